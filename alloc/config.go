package alloc

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults. The lease TTL bounds how long a replica cut off from the KV
// keeps numbering from a block it cannot renew.
const (
	DefaultBucket    = "tally_alloc"
	DefaultTTL       = 4 * time.Second
	DefaultTarget    = time.Second
	DefaultMinBlock  = 16
	DefaultMaxBlock  = 1 << 20
	DefaultOpTimeout = 2 * time.Second
)

var sequenceName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Config configures one replica's leaseholder of one sequence.
type Config struct {
	// KV is the allocator's bucket (see OpenBucket, LazyBucket). Required.
	KV KV
	// Sequence names the global sequence, e.g. "likes". Required.
	Sequence string
	// Replica is the id of the replica this leaseholder numbers for (a leaseholder
	// is a replica's client of the allocator, not another process).
	// Required.
	Replica string

	// TTL is how long the leaseholder may number from a lease after sending the
	// write that last renewed it. Default 4s.
	TTL time.Duration
	// RenewEvery is how often the leaseholder renews its leases and reports
	// what it used. Default TTL/4.
	RenewEvery time.Duration
	// ReclaimAfter, if not zero, is how long a lease's beat must stay
	// unchanged, in another replica's clock, before that replica frees the
	// lease's tail from the leaseholder's last report. Zero (the default) never
	// does: a leaseholder always gives back its own tail, exactly, when it
	// returns (reconnects, resumes, restarts with its data). Only a leaseholder
	// that never returns needs reclaiming, and that costs exactness: the
	// numbers it used after its last report (at most RenewEvery + TTL of
	// its traffic) may be used again if it does come back. See Retire.
	ReclaimAfter time.Duration
	// IdleRelease: a leaseholder that took no number for this long gives its
	// leases' unused tails back, so that others number them and milestones
	// in them are not held up. Default 2×Target.
	IdleRelease time.Duration
	// CloseAfter: a lease held this long is given back (its unused tail
	// becoming a hole) even while numbers are still taken from it, and a
	// fresh one taken if needed. The ranks of the numbers above a lease
	// wait for it to close, so this bounds how long a number stays
	// without its rank while the leaseholder can reach the KV. Default
	// 2×Target.
	CloseAfter time.Duration
	// Target is how much of the leaseholder's own traffic one block should
	// last; block sizes follow the observed rate. Default 1s.
	Target time.Duration
	// MinBlock and MaxBlock bound the block size. Defaults 16 and 2^20.
	MinBlock, MaxBlock uint64
	// OpTimeout bounds one KV request. Default 2s.
	OpTimeout time.Duration

	// Restored is the leaseholder state last written with the replica's data
	// (Leaseholder.Snapshot), or nil. Leases in it are not used again: their
	// unused tails are given back when the KV is next reachable.
	Restored []byte

	// OnReady, if set, is called when numbers become available after a
	// Take found none. It must not block.
	OnReady func()
	// OnFinal, if set, is called from the leaseholder's goroutine with this
	// leaseholder's closed blocks whose numbers' ranks are now known (Closed
	// with Folded and Base): the number p of a block, Start <= p < Used,
	// is the (Base + p - Start + 1)th number used in the sequence. Once it
	// returns nil the blocks are settled in the KV and never passed again;
	// on an error they are passed again in a later round. A leaseholder that
	// restarts gets the blocks its earlier run did not settle.
	OnFinal func(ctx context.Context, blocks []Closed) error

	Logger     hclog.Logger
	Registerer prometheus.Registerer

	// beforeTick, in tests, runs before every renewal round (and can
	// block it, as a paused process would be).
	beforeTick func()
}

func (c *Config) ensureDefaults() {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 4
	}
	if c.Target == 0 {
		c.Target = DefaultTarget
	}
	if c.IdleRelease == 0 {
		c.IdleRelease = 2 * c.Target
	}
	if c.CloseAfter == 0 {
		c.CloseAfter = 2 * c.Target
	}
	if c.MinBlock == 0 {
		c.MinBlock = DefaultMinBlock
	}
	if c.MaxBlock == 0 {
		c.MaxBlock = DefaultMaxBlock
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.KV == nil {
		errs = append(errs, errors.New("alloc: KV is required"))
	}
	if !sequenceName.MatchString(c.Sequence) {
		errs = append(errs, fmt.Errorf("alloc: sequence %q must match %s", c.Sequence, sequenceName))
	}
	if c.Replica == "" {
		errs = append(errs, errors.New("alloc: leaseholder is required"))
	}
	if c.TTL <= 0 || c.RenewEvery <= 0 || c.RenewEvery >= c.TTL {
		errs = append(errs, fmt.Errorf("alloc: want 0 < renew_every (%v) < ttl (%v)", c.RenewEvery, c.TTL))
	}
	if c.ReclaimAfter != 0 && c.ReclaimAfter <= c.TTL {
		errs = append(errs, fmt.Errorf("alloc: reclaim_after (%v) must exceed ttl (%v)", c.ReclaimAfter, c.TTL))
	}
	if c.MinBlock == 0 || c.MaxBlock < c.MinBlock {
		errs = append(errs, fmt.Errorf("alloc: want 0 < min_block (%d) <= max_block (%d)", c.MinBlock, c.MaxBlock))
	}
	if c.Target <= 0 || c.IdleRelease <= 0 || c.CloseAfter <= 0 || c.OpTimeout <= 0 {
		errs = append(errs, errors.New("alloc: target, idle_release, close_after and op_timeout must be positive"))
	}
	return errors.Join(errs...)
}

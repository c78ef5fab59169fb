package region

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/storage"
)

// Config configures a Replica.
type Config struct {
	// Region is the geography this replica serves, e.g. "us". Required.
	Region string
	// Replica is this replica's stable id, unique across all regions, e.g.
	// "us-1". It must not change across restarts of the same data. Required.
	Replica string
	// Store holds the replica's state. Required; the Replica does not close it.
	Store *storage.Store
	// Holds, if set, reports whether this replica holds shard s (package
	// shard) of a sharded region: local writes of keys on other shards are
	// refused with ErrNotHeld (they go to a holder). Default: nil, every
	// shard.
	Holds func(s int) bool
	// Logger for the replica. Default: a null logger.
	Logger hclog.Logger
	// Now is the wall clock. Default: time.Now.
	Now func() time.Time
	// Monotonic is elapsed time on a clock that never steps, for telling
	// a step of Now apart from time passing (see physClock). Default: the
	// process's monotonic clock if Now is the default too, else none (no
	// step detection).
	Monotonic func() time.Duration
	// MaxBatch caps the operations applied in one group commit. Default 32768:
	// several full POST /v1/events batches share a commit, so a key they all
	// touch (and its slots) is written once.
	MaxBatch int
	// QueueDepth is how many operations may wait for the writer. Default 16384.
	QueueDepth int
	// CacheItems caps the vectors kept in memory. Default 100000.
	CacheItems int
	// HoldWrites starts the replica refusing writes (ErrNotReady) until
	// AcceptWrites is called: a replica whose own entries must first be
	// recovered from peers must not acknowledge anything before that.
	HoldWrites bool
	// KeepHandoff, if set, is asked on open about a budget handoff found
	// in the store (handoff.go): one whose target it refuses, such as a
	// replica that is no longer a peer, is dropped instead of resumed.
	// Default: every one is resumed.
	KeepHandoff func(to string) bool
	// Failpoints arms the chaos suite's deliberate bugs (failpoints.go),
	// honoured only in a chaos build; nil, the default and what
	// production passes, arms none. It is one opaque handle, not a field
	// per bug, and it is a field because the replica is built from its
	// Config alone: New has no other way in, and every test that builds a
	// replica already does so through a Config.
	Failpoints *failpoint.Set
	// OnCommit, if set, is called by the writer after every durable commit
	// that changed state, before the commit's writes are acknowledged. It
	// must not block; replication queues the changes.
	OnCommit func(Changes)
	// Registerer receives the replica's metrics. Default: none registered.
	Registerer prometheus.Registerer
	// Sequences number this replica's counted likes and increments from
	// global sequences and record milestone claims (see numbering.go).
	Sequences []*Numbering
	// IdempotencyTTL is how long an applied idempotency key is remembered,
	// counted from its stamp: a retry with the same key within it, at
	// this replica or any other, counts once; a retry after it applies
	// again. Every replica must use the same TTL. A sweeper deletes older
	// keys. Zero keeps every key forever (the store grows with every
	// keyed increment).
	IdempotencyTTL time.Duration
	// LikeLists keeps the like index (Likers, LikedItems): two more keys
	// per like or unlike that changes a user's state. Off, the index is
	// dropped at open, and Likers and LikedItems answer ErrNoLists.
	LikeLists bool
	// EventLog keeps the event log: every accepted like, unlike and
	// increment, each reconciliation and each recovered own entry, in the
	// batch that applies it (storage.Event). A publisher ships it to the
	// region's stream; the audit recomputes own entries from it.
	EventLog bool
	// IdempotencySweep is how often the sweeper looks for expired keys.
	// An expired key is gone by rule at once; until the sweep deletes it,
	// anti-entropy digests may differ from a peer that swept already.
	// Default: TTL/100, within 1 s..1 min.
	IdempotencySweep time.Duration
	// Windows configures slots and trending (windows.go). Nil:
	// DefaultWindows(). Every replica must use the same rules: a slot's
	// name carries its retention, but a replica books only the levels it
	// is configured with.
	Windows *WindowConfig
	// Approx makes the counters under some prefixes approximate (approx.go):
	// an increment is counted in steps that grow with the counter, so a hot
	// counter writes, fsyncs and replicates a fraction of its increments,
	// within a relative standard error. Nil: every counter is exact. Every
	// replica should use the same rules: each counts its own increments by
	// its rules, and reads say approx by the rules of the replica read.
	Approx []ApproxRule
	// Seed seeds the replica's random source, which only approximate
	// counters draw from. Zero: a seed from crypto/rand.
	Seed uint64
}

// DefaultConfig returns a Config with every default filled in.
func DefaultConfig() Config {
	return Config{MaxBatch: 32768, QueueDepth: 16384, CacheItems: 100000}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if !crdt.ValidID(c.Region) {
		errs = append(errs, fmt.Errorf("region: bad region id %q", c.Region))
	}
	if !crdt.ValidID(c.Replica) {
		errs = append(errs, fmt.Errorf("region: bad replica id %q", c.Replica))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("region: Store is required"))
	}
	if c.MaxBatch < 1 {
		errs = append(errs, fmt.Errorf("region: MaxBatch %d < 1", c.MaxBatch))
	}
	if c.QueueDepth < 1 {
		errs = append(errs, fmt.Errorf("region: QueueDepth %d < 1", c.QueueDepth))
	}
	if c.CacheItems < 1 {
		errs = append(errs, fmt.Errorf("region: CacheItems %d < 1", c.CacheItems))
	}
	if c.IdempotencyTTL < 0 || c.IdempotencySweep < 0 {
		errs = append(errs, fmt.Errorf("region: IdempotencyTTL %v and IdempotencySweep %v must not be negative", c.IdempotencyTTL, c.IdempotencySweep))
	}
	if c.Windows != nil {
		if err := c.Windows.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := validateApprox(c.Approx); err != nil {
		errs = append(errs, err)
	}
	if len(c.Sequences) > maxSequences {
		errs = append(errs, fmt.Errorf("region: %d sequences, at most %d", len(c.Sequences), maxSequences))
	}
	names := map[string]bool{}
	for _, n := range c.Sequences {
		switch {
		case n == nil || n.Seq == nil || !crdt.ValidID(n.Sequence) || strings.Contains(n.Sequence, "/"):
			errs = append(errs, errors.New("region: every sequence needs a Seq and a name"))
		case names[n.Sequence]:
			errs = append(errs, fmt.Errorf("region: sequence %q twice", n.Sequence))
		case n.Counts > CountIncrements:
			errs = append(errs, fmt.Errorf("region: sequence %q counts %d", n.Sequence, n.Counts))
		default:
			names[n.Sequence] = true
		}
	}
	return errors.Join(errs...)
}

func (c *Config) ensureDefaults() {
	d := DefaultConfig()
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
		if c.Monotonic == nil {
			start := time.Now()
			c.Monotonic = func() time.Duration { return time.Since(start) }
		}
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.QueueDepth == 0 {
		c.QueueDepth = d.QueueDepth
	}
	if c.CacheItems == 0 {
		c.CacheItems = d.CacheItems
	}
	if c.Windows == nil {
		c.Windows = DefaultWindows()
	} else {
		w := *c.Windows
		c.Windows = &w
	}
	c.Windows.ensureDefaults()
	if c.IdempotencySweep == 0 && c.IdempotencyTTL > 0 {
		c.IdempotencySweep = min(max(c.IdempotencyTTL/100, time.Second), time.Minute)
	}
}

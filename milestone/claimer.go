package milestone

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/storage"
)

// Source is where claim intents live: the replica's store.
type Source interface {
	// Claims calls fn for every unsettled intent, in number order.
	Claims(fn func(n uint64, l storage.CountedLike) bool) error
	// SettleClaim removes an intent.
	SettleClaim(n uint64) error
}

// ClaimerConfig configures a Claimer.
type ClaimerConfig struct {
	// KV is the allocator's bucket; claims are keys "ms.<sequence>.<n>".
	KV alloc.KV
	// Feed publishes won milestones.
	Feed *Feed
	// Source holds the replica's claim intents.
	Source Source
	// Sequence, Region and Replica describe this replica's claims.
	Sequence, Region, Replica string
	// Retry is how often intents are retried while the KV or the stream is
	// out of reach. Default 1s.
	Retry time.Duration
	// OpTimeout bounds one KV or stream request. Default 2s.
	OpTimeout time.Duration
	// Failpoints may arm failpoint.CrashBeforeClaim: the process kills
	// itself (SIGKILL) just before its first claim, after the like that
	// took the number was acknowledged, so the chaos suite proves the
	// claim is finished on restart. Honoured only in a chaos build; nil,
	// the default and what production passes, arms nothing. One opaque
	// handle, as the claimer is built from its config alone.
	Failpoints *failpoint.Set

	Logger     hclog.Logger
	Registerer prometheus.Registerer
}

// Claimer turns claim intents into milestones: for each, a create-only KV
// write that exactly one claimant of a number can win, then the event on
// the milestone stream, then the intent is settled. Every step is safe to
// repeat, so a crash anywhere is finished by the next attempt (after a
// restart, by the same replica's claimer, from the intent in its store):
//
//   - Create fails with "key exists" when any claim of the number exists,
//     including our own earlier attempt whose answer was lost; the stored
//     value tells which (its replica, item and user are ours or not).
//   - The stream keeps one message per subject and refuses a second
//     (DiscardNewPerSubject), so publishing twice stores one event.
type Claimer struct {
	cfg  ClaimerConfig
	log  hclog.Logger
	won  prometheus.Counter
	lost prometheus.Counter

	mu sync.Mutex // one ClaimAll at a time: the claimer's loop and the leaseholder's OnFinal

	kick   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewClaimer checks cfg and builds a claimer; Start runs it.
func NewClaimer(cfg ClaimerConfig) (*Claimer, error) {
	if cfg.KV == nil || cfg.Feed == nil || cfg.Source == nil || cfg.Sequence == "" || cfg.Replica == "" {
		return nil, errors.New("milestone: claimer needs KV, Feed, Source, Sequence and Replica")
	}
	if cfg.Retry == 0 {
		cfg.Retry = time.Second
	}
	if cfg.OpTimeout == 0 {
		cfg.OpTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	c := &Claimer{
		cfg: cfg,
		log: cfg.Logger.Named("milestone"),
		won: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_milestones_won_total", Help: "Milestones this replica claimed and published.",
			ConstLabels: prometheus.Labels{"sequence": cfg.Sequence}}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Name: "tally_milestones_lost_total", Help: "Claim intents another replica's claim of the same number beat (see docs/architecture.md).",
			ConstLabels: prometheus.Labels{"sequence": cfg.Sequence}}),
		kick: make(chan struct{}, 1),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.won); err != nil {
			return nil, fmt.Errorf("milestone: register metrics: %w", err)
		}
		if err := cfg.Registerer.Register(c.lost); err != nil {
			return nil, fmt.Errorf("milestone: register metrics: %w", err)
		}
	}
	return c, nil
}

// Start runs the claimer until Close.
func (c *Claimer) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go c.run(ctx)
}

// Kick makes the claimer look at its intents now. It does not block.
func (c *Claimer) Kick() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Close stops the claimer; intents left are claimed after the restart.
func (c *Claimer) Close() {
	if c.cancel != nil {
		c.cancel()
		c.wg.Wait()
	}
}

func (c *Claimer) run(ctx context.Context) {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.Retry)
	defer t.Stop()
	for {
		if err := c.ClaimAll(ctx); err != nil && ctx.Err() == nil {
			c.log.Debug("claims pending", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// ClaimAll settles every intent it can now, in number order.
func (c *Claimer) ClaimAll(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	type intent struct {
		n uint64
		l storage.CountedLike
	}
	var todo []intent
	err := c.cfg.Source.Claims(func(n uint64, l storage.CountedLike) bool {
		todo = append(todo, intent{n, l})
		return len(todo) < 1000
	})
	if err != nil {
		return err
	}
	for _, it := range todo {
		if err := c.claim(ctx, it.n, it.l); err != nil {
			return err
		}
	}
	return nil
}

// claim settles one intent: claimed and published (won), or found claimed
// by another like (lost). An error leaves the intent for the next try.
func (c *Claimer) claim(ctx context.Context, n uint64, l storage.CountedLike) error {
	ev := Event{
		Sequence: c.cfg.Sequence, Number: n, Item: l.Item, User: l.User,
		Region: c.cfg.Region, Replica: c.cfg.Replica, Time: time.UnixMilli(l.AtMs).UTC(),
	}
	c.cfg.Failpoints.Crash(failpoint.CrashBeforeClaim) // a no-op outside a chaos build
	key := kvKey(c.cfg.Sequence, n)
	octx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	// Update at revision 0 creates the key only if it never had a value:
	// KV Create would also write over a delete marker, and a claim that
	// was deleted must not be won (and announced) a second time.
	_, err := c.cfg.KV.Update(octx, key, encodeEvent(ev), 0)
	cancel()
	won := err == nil
	if errors.Is(err, alloc.ErrRefused) {
		// The lease authority found the rank in no block of ours awaiting
		// its ranks: never claimable (an intent older than the authority).
		c.lost.Inc()
		c.log.Error("the lease authority refused a milestone claim; not claiming it", "key", key, "error", err)
		return c.cfg.Source.SettleClaim(n)
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		octx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
		e, gerr := c.cfg.KV.Get(octx, key)
		cancel()
		if errors.Is(gerr, jetstream.ErrKeyNotFound) {
			// Settled as lost: the milestone fired when the key was made.
			c.lost.Inc()
			c.log.Error("milestone claim was deleted from the KV; not claiming it again", "key", key)
			return c.cfg.Source.SettleClaim(n)
		}
		if gerr != nil {
			return fmt.Errorf("read claim %s: %w", key, gerr)
		}
		prev, derr := DecodeEvent(e.Value())
		if derr != nil {
			return fmt.Errorf("read claim %s: %w", key, derr)
		}
		won = prev.Replica == ev.Replica && prev.Item == ev.Item && prev.User == ev.User
		ev = prev
		err = nil
	}
	if err != nil {
		return fmt.Errorf("claim %s: %w", key, err)
	}
	if won {
		if err := c.cfg.Feed.publish(ctx, ev); err != nil {
			return err
		}
		c.won.Inc()
		c.log.Info("milestone", "sequence", ev.Sequence, "number", n, "item", ev.Item, "user", ev.User)
	} else {
		// Two likes carried the same number: possible only after a
		// replica lost its disk or a lease was reclaimed from a leaseholder
		// that came back (see package alloc).
		// The first claim stands; the milestone fired once.
		c.lost.Inc()
		c.log.Warn("milestone already claimed by another like", "number", n, "item", l.Item, "user", l.User, "claimed_by", ev.Replica)
	}
	return c.cfg.Source.SettleClaim(n)
}

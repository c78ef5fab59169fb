package node

// Like numbering: the lease holder of the likes sequence, the milestone
// claimer and the milestone feed, wired to the replica.
//
// Construction order. The parts refer to each other in a cycle: the
// replica's writer numbers from the holder and, after a commit that stored
// claim intents, wakes the claimer; the holder wakes the writer when
// numbers are usable again; the claimer reads and settles the intents the
// writer stored. The cycle is broken by building in this order, with no
// function that looks a part up later:
//
//  1. the store and the NATS connection (Start does these first);
//  2. the KV bucket and the feed, from the connection;
//  3. the claimer, on the store's claim intents (region.ClaimIntents):
//     intents are in the store, so the claimer needs no replica;
//  4. the holder, restored from the store (region.NumberingSnapshot), with
//     no wake-up hook yet;
//  5. the replica, numbering from the holder (region.Numbering.Seq) and
//     waking the claimer (Numbering.OnClaim = claimer.Kick);
//  6. start: holder.Attach(replica.NumbersReady) and
//     holder.AttachFinal(replica.Finalize, adapted), then the holder, feed
//     and claimer goroutines start.
//
// Nothing runs before step 6, so the hook Attach sets is in place before
// the only goroutine that calls it exists. The replica's writer may Take
// from the holder before step 6: it finds no numbers and waits for the
// wake-up the started holder sends once it holds a lease.

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/milestone"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// LikesSequence is the global sequence counted likes are numbered from.
const LikesSequence = "likes"

// numbering is a node's like numbering.
type numbering struct {
	cfg     Config
	log     hclog.Logger
	rule    milestone.Rule
	kv      *alloc.LazyBucket
	holder  *alloc.Holder
	feed    *milestone.Feed
	claimer *milestone.Claimer
	replica *region.Replica // set by start, before anything runs
}

// holderSeq adapts the holder to the replica's Sequencer.
type holderSeq struct{ *alloc.Holder }

func (h holderSeq) Take(n uint64) (uint64, uint64, bool) {
	sp, ok := h.Holder.Take(n)
	return sp.Start, sp.End, ok
}

// allocConfig is the holder's config from cfg: the settings of the likes
// sequence's leases.
func allocConfig(cfg Config, kv alloc.KV, restored []byte) alloc.Config {
	return alloc.Config{
		KV:           kv,
		Sequence:     LikesSequence,
		Holder:       cfg.Replica,
		TTL:          duration(cfg.LeaseTTL),
		ReclaimAfter: duration(cfg.LeaseReclaimAfter),
		Restored:     restored,
	}
}

// newNumbering builds steps 2 to 4: everything the replica needs before
// it exists. Nothing runs until start.
func newNumbering(cfg Config, nc *nats.Conn, store *storage.Store, log hclog.Logger, reg prometheus.Registerer, getenv func(string) string) (*numbering, error) {
	rule, err := milestone.ParseRule(cfg.Milestones)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	num := &numbering{cfg: cfg, log: log, rule: rule}
	num.kv = alloc.NewLazyBucket(js, alloc.BucketConfig{Name: cfg.AllocBucket, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster})
	num.feed, err = milestone.NewFeed(milestone.FeedConfig{JS: js, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster, Logger: log})
	if err != nil {
		return nil, err
	}
	num.claimer, err = milestone.NewClaimer(milestone.ClaimerConfig{
		KV:         num.kv,
		Feed:       num.feed,
		Source:     region.ClaimIntents{Store: store, Sequence: LikesSequence},
		Sequence:   LikesSequence,
		Region:     cfg.Region,
		Replica:    cfg.Replica,
		Logger:     log,
		Chaos:      milestone.ChaosFromEnv(getenv), // zero outside a chaos build
		Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	restored, err := region.NumberingSnapshot(store, LikesSequence)
	if err != nil {
		return nil, err
	}
	acfg := allocConfig(cfg, num.kv, restored)
	acfg.Logger, acfg.Registerer = log, reg
	if num.holder, err = alloc.New(acfg); err != nil {
		return nil, err
	}
	return num, nil
}

// regionNumbering is the replica's numbering config (step 5).
func (num *numbering) regionNumbering() *region.Numbering {
	return &region.Numbering{
		Sequence:  LikesSequence,
		Seq:       holderSeq{num.holder},
		Milestone: num.rule.Hit,
		OnClaim:   num.claimer.Kick,
	}
}

// start hands the replica to the holder and runs the holder, the feed and
// the claimer (step 6).
func (num *numbering) start(r *region.Replica) {
	num.replica = r
	num.holder.Attach(r.NumbersReady)
	num.holder.AttachFinal(func(ctx context.Context, blocks []alloc.Closed) error {
		fb := make([]region.FinalBlock, len(blocks))
		for i, b := range blocks {
			fb[i] = region.FinalBlock{Start: b.Start, Used: b.Used, Base: b.Base}
		}
		return r.Finalize(ctx, fb)
	})
	num.holder.Start()
	num.feed.Start()
	num.claimer.Start()
	num.log.Info("numbering likes", "milestones", num.rule.String(), "bucket", num.cfg.AllocBucket,
		"cluster", num.cfg.AllocCluster, "reclaim_after", duration(num.cfg.LeaseReclaimAfter))
}

// close stops claiming and following, then gives back the unused part of
// the leases. The replica's writer must have stopped.
func (num *numbering) close(ctx context.Context) error {
	num.claimer.Close()
	num.feed.Close()
	if err := num.holder.Close(ctx); err != nil {
		return fmt.Errorf("give back leases: %w", err)
	}
	return nil
}

// closeTimeout bounds giving back leases when a start fails half way.
const closeTimeout = 2 * time.Second

// numberingStatus is what /v1/status shows of numbering.
type numberingStatus struct {
	Milestones string       `json:"milestones"`
	Numbered   uint64       `json:"numbered"`
	Unnumbered int          `json:"unnumbered"`
	Lease      alloc.Status `json:"lease"`
}

func (num *numbering) status() any {
	return numberingStatus{
		Milestones: num.rule.String(),
		Numbered:   num.replica.Numbered(),
		Unnumbered: num.replica.Unnumbered(),
		Lease:      num.holder.Status(),
	}
}

// sequenceView is GET /v1/sequences/{name}: the allocator's state, and
// what an operator wants to know of it.
type sequenceView struct {
	*alloc.State
	// Numbered is how many likes have their final number (rank): every
	// milestone up to it has fired or is being claimed.
	Numbered uint64 `json:"numbered"`
	// Holes are numbers leased and never used, below the final ones.
	Holes uint64 `json:"holes"`
	// OldestOpen is the lowest block still open: the ranks of every number
	// above it wait for it to close.
	OldestOpen *alloc.Lease `json:"oldest_open,omitempty"`
}

// sequence reads a sequence's allocator state from the KV.
func (num *numbering) sequence(ctx context.Context, name string) (any, error) {
	if name != LikesSequence {
		return nil, httpapi.ErrNoSequence
	}
	st, err := alloc.Read(ctx, num.kv, name)
	if err != nil {
		return nil, err
	}
	v := sequenceView{State: st, Numbered: st.Dense.Rank, Holes: st.Holes()}
	for i := range st.Leases {
		if l := &st.Leases[i]; v.OldestOpen == nil || l.Start < v.OldestOpen.Start {
			v.OldestOpen = l
		}
	}
	return v, nil
}

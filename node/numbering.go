package node

// Numbering: for each numbered sequence a leaseholder and a milestone
// claimer, and one milestone feed, wired to the replica.
//
// Construction order. The parts refer to each other in a cycle: the
// replica's writer numbers from the leaseholder and, after a commit that stored
// claim intents, wakes the claimer; the leaseholder wakes the writer when
// numbers are usable again; the claimer reads and settles the intents the
// writer stored. The cycle is broken by building in this order, with no
// function that looks a part up later:
//
//  1. the store and the NATS connection (Start does these first);
//  2. the KV bucket and the feed, from the connection;
//  3. the claimer, on the store's claim intents (region.ClaimIntents):
//     intents are in the store, so the claimer needs no replica;
//  4. the leaseholders, restored from the store (region.NumberingSnapshot), with
//     no wake-up hook yet;
//  5. the replica, numbering from the leaseholders (region.Numbering.Seq) and
//     waking the claimers (Numbering.OnClaim = claimer.Kick);
//  6. start: leaseholder.Attach(replica.Numbers().Ready) and
//     leaseholder.AttachFinal(replica.Numbers().Finalize, adapted), then the leaseholder, feed
//     and claimer goroutines start.
//
// Nothing runs before step 6, so the hook Attach sets is in place before
// the only goroutine that calls it exists. The replica's writer may Take
// from the leaseholder before step 6: it finds no numbers and waits for the
// wake-up the started leaseholder sends once it holds a lease.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/milestone"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/replication"
	"github.com/tally-dev/tally/storage"
)

// LikesSequence is the global sequence counted likes are numbered from.
const LikesSequence = "likes"

// numbering is a node's numbered sequences: the global likes sequence
// (Config.Milestones) and the configured ones (Config.Sequences), each with
// its leaseholder and claimer, sharing the KV bucket and the feed.
type numbering struct {
	cfg     Config
	log     hclog.Logger
	kv      alloc.KV
	feed    *milestone.Feed
	seqs    []*sequence
	replica *region.Replica // set by start, before anything runs
}

// sequence is one numbered sequence of a node.
type sequence struct {
	cfg         SequenceConfig
	rule        milestone.Rule
	leaseholder *alloc.Leaseholder
	claimer     *milestone.Claimer
}

// leaseholderSeq adapts the leaseholder to the replica's Sequencer.
type leaseholderSeq struct{ *alloc.Leaseholder }

func (h leaseholderSeq) Take(n uint64) (uint64, uint64, bool) {
	sp, ok := h.Leaseholder.Take(n)
	return sp.Start, sp.End, ok
}

// allocConfig is a leaseholder's config from cfg: the settings of a sequence's
// leases.
func allocConfig(cfg Config, seq string, kv alloc.KV, restored []byte) alloc.Config {
	return alloc.Config{
		KV:           kv,
		Sequence:     seq,
		Replica:      cfg.Replica,
		TTL:          duration(cfg.LeaseTTL),
		ReclaimAfter: duration(cfg.LeaseReclaimAfter),
		Restored:     restored,
	}
}

// numbered lists the node's sequences: the likes sequence first, if
// milestones are set, then the configured ones.
func (c Config) numbered() []SequenceConfig {
	var out []SequenceConfig
	if c.Milestones != "" {
		out = append(out, SequenceConfig{Name: LikesSequence, Counts: CountsLikes, Match: "*", Milestones: c.Milestones})
	}
	return append(out, c.Sequences...)
}

// newNumbering builds steps 2 to 4: everything the replica needs before
// it exists. Nothing runs until start.
func newNumbering(cfg Config, nc *nats.Conn, store *storage.Store, log hclog.Logger, reg prometheus.Registerer, fp *failpoint.Set) (*numbering, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	num := &numbering{cfg: cfg, log: log}
	bucket := alloc.NewLazyBucket(js, alloc.BucketConfig{Name: cfg.AllocBucket, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster})
	num.kv = bucket
	if cfg.AllocAuthority {
		num.kv = &alloc.RemoteKV{NC: nc, Bucket: bucket, Replica: cfg.Replica}
	}
	num.feed, err = milestone.NewFeed(milestone.FeedConfig{JS: js, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster,
		ByAuthority: cfg.AllocAuthority, Logger: log})
	if err != nil {
		return nil, err
	}
	for _, sc := range cfg.numbered() {
		rule, err := milestone.ParseRule(sc.Milestones)
		if err != nil {
			return nil, fmt.Errorf("sequence %s: %w", sc.Name, err)
		}
		s := &sequence{cfg: sc, rule: rule}
		s.claimer, err = milestone.NewClaimer(milestone.ClaimerConfig{
			KV:         num.kv,
			Feed:       num.feed,
			Source:     region.ClaimIntents{Store: store, Sequence: sc.Name},
			Sequence:   sc.Name,
			Region:     cfg.Region,
			Replica:    cfg.Replica,
			Logger:     log,
			Failpoints: fp, // never on outside a chaos build
			Registerer: reg,
		})
		if err != nil {
			return nil, err
		}
		restored, err := region.NumberingSnapshot(store, sc.Name)
		if err != nil {
			return nil, err
		}
		acfg := allocConfig(cfg, sc.Name, num.kv, restored)
		acfg.Logger, acfg.Registerer = log, reg
		if s.leaseholder, err = alloc.New(acfg); err != nil {
			return nil, err
		}
		num.seqs = append(num.seqs, s)
	}
	return num, nil
}

// regionNumbering is the replica's numbering config (step 5).
func (num *numbering) regionNumbering() []*region.Numbering {
	var out []*region.Numbering
	for _, s := range num.seqs {
		counts := region.CountLikes
		if s.cfg.Counts == CountsIncrements {
			counts = region.CountIncrements
		}
		out = append(out, &region.Numbering{
			Sequence:  s.cfg.Name,
			Counts:    counts,
			Match:     s.cfg.matcher(),
			Seq:       leaseholderSeq{s.leaseholder},
			Milestone: s.rule.Hit,
			Next:      s.rule.Next,
			OnClaim:   s.claimer.Kick,
		})
	}
	return out
}

// start hands the replica to the leaseholders and runs the leaseholders, the feed
// and the claimers (step 6).
func (num *numbering) start(r *region.Replica) {
	num.replica = r
	for _, s := range num.seqs {
		name, claimer := s.cfg.Name, s.claimer
		s.leaseholder.Attach(r.Numbers().Ready)
		s.leaseholder.AttachFinal(func(ctx context.Context, blocks []alloc.Closed) error {
			fb := make([]region.FinalBlock, len(blocks))
			for i, b := range blocks {
				fb[i] = region.FinalBlock{Start: b.Start, Used: b.Used, Base: b.Base}
			}
			if err := r.Numbers().Finalize(ctx, name, fb); err != nil {
				return err
			}
			if num.cfg.AllocAuthority {
				// The authority accepts a claim only while its block
				// waits for its ranks: claim before the block is settled.
				return claimer.ClaimAll(ctx)
			}
			return nil
		})
		s.leaseholder.Start()
		s.claimer.Start()
		num.log.Info("numbering", "sequence", name, "counts", s.cfg.Counts, "match", s.cfg.Match,
			"milestones", s.rule.String(), "bucket", num.cfg.AllocBucket,
			"cluster", num.cfg.AllocCluster, "reclaim_after", duration(num.cfg.LeaseReclaimAfter))
	}
	num.feed.Start()
}

// close stops claiming and following, then gives back the unused part of
// the leases. The replica's writer must have stopped.
func (num *numbering) close(ctx context.Context) error {
	for _, s := range num.seqs {
		s.claimer.Close()
	}
	num.feed.Close()
	var errs []error
	for _, s := range num.seqs {
		if err := s.leaseholder.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("give back leases of %s: %w", s.cfg.Name, err))
		}
	}
	return errors.Join(errs...)
}

// closeTimeout bounds giving back leases when a start fails half way.
const closeTimeout = 2 * time.Second

// status is /v1/status's "numbering": one entry per sequence.
func (num *numbering) status() []api.SequenceStatus {
	out := make([]api.SequenceStatus, 0, len(num.seqs))
	for _, s := range num.seqs {
		pending, err := num.replica.Numbers().PendingClaims(s.cfg.Name)
		if err != nil {
			pending = -1
		}
		out = append(out, api.SequenceStatus{
			Name:          s.cfg.Name,
			Counts:        s.cfg.Counts,
			Match:         s.cfg.Match,
			Milestones:    s.rule.String(),
			Numbered:      num.replica.Numbers().Numbered(s.cfg.Name),
			Unnumbered:    num.replica.Numbers().Unnumbered(s.cfg.Name),
			ClaimsPending: pending,
			Lease:         leaseholderJSON(s.leaseholder.Status()),
		})
	}
	return out
}

// eventLogJSON is the publisher's status in the API's shape.
func eventLogJSON(st replication.PublisherStatus) *api.EventLog {
	return &api.EventLog{Stream: st.Stream, Published: st.Published, Logged: st.Logged, Error: st.Error}
}

// leaseholderJSON is a leaseholder's status in the API's shape.
func leaseholderJSON(st alloc.Status) api.LeaseHolder {
	out := api.LeaseHolder{Sequence: st.Sequence, BlockSize: st.BlockSize, Taken: st.Taken, Waiting: st.Waiting,
		KVError: st.KVError, Leases: make([]api.HeldLease, 0, len(st.Leases))}
	for _, l := range st.Leases {
		out.Leases = append(out.Leases, api.HeldLease{Epoch: l.Epoch, Start: l.Start, End: l.End, Next: l.Next,
			Committed: l.Committed, ExpiresMs: l.ExpiresMs})
	}
	return out
}

// sequenceJSON is GET /v1/sequences/{name}: the allocator's state, and
// what an operator wants to know of it: how many numbers are final, the
// holes below them, and the lowest block still open (the ranks of every
// number above it wait for it to close).
func sequenceJSON(st *alloc.State) *api.Sequence {
	out := &api.Sequence{Version: st.Version, HWM: st.HWM, NextEpoch: st.NextEpoch,
		Dense: api.Dense{Pos: st.Dense.Pos, Rank: st.Dense.Rank}, Applied: st.Applied,
		Numbered: st.Dense.Rank, Holes: st.Holes()}
	for _, f := range st.Free {
		out.Free = append(out.Free, api.Span{Start: f.Start, End: f.End})
	}
	for _, l := range st.Leases {
		out.Leases = append(out.Leases, api.SequenceLease{Epoch: l.Epoch, Leaseholder: l.Leaseholder, Start: l.Start,
			End: l.End, Used: l.Used, Beat: l.Beat})
	}
	for _, c := range st.Closed {
		out.Closed = append(out.Closed, api.ClosedBlock{Epoch: c.Epoch, Leaseholder: c.Leaseholder, Start: c.Start,
			End: c.End, Used: c.Used, Folded: c.Folded, Base: c.Base})
	}
	for i := range out.Leases {
		if l := out.Leases[i]; out.OldestOpen == nil || l.Start < out.OldestOpen.Start {
			out.OldestOpen = &l
		}
	}
	return out
}

// sequence reads a sequence's allocator state from the KV.
func (num *numbering) sequence(ctx context.Context, name string) (*api.Sequence, error) {
	if !slices.ContainsFunc(num.seqs, func(s *sequence) bool { return s.cfg.Name == name }) {
		return nil, httpapi.ErrNoSequence
	}
	st, err := alloc.Read(ctx, num.kv, name)
	if err != nil {
		return nil, err
	}
	return sequenceJSON(st), nil
}

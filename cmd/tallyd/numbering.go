package main

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/alloc"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/milestone"
	"github.com/tally-dev/tally/region"
)

// likesSequence is the global sequence counted likes are numbered from.
const likesSequence = "likes"

// numbering is a node's like numbering: the lease holder of the likes
// sequence, the milestone claimer and the milestone feed.
type numbering struct {
	rule    milestone.Rule
	kv      *alloc.LazyBucket
	holder  *alloc.Holder
	feed    *milestone.Feed
	claimer *milestone.Claimer
	replica *region.Replica
}

// holderSeq adapts the holder to the replica's Sequencer.
type holderSeq struct{ *alloc.Holder }

func (h holderSeq) Take(n uint64) (uint64, uint64, bool) {
	sp, ok := h.Holder.Take(n)
	return sp.Start, sp.End, ok
}

// newNumbering builds the parts that must exist before the replica (its
// writer numbers from the holder) and returns the replica's Numbering.
// Nothing runs until start.
func (n *node) newNumbering(cfg Config) (*numbering, *region.Numbering, error) {
	rule, err := milestone.ParseRule(cfg.Milestones)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(n.nc)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	restored, err := region.NumberingSnapshot(n.store, likesSequence)
	if err != nil {
		return nil, nil, err
	}
	num := &numbering{rule: rule}
	num.kv = alloc.NewLazyBucket(js, alloc.BucketConfig{Name: cfg.AllocBucket, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster})
	num.holder, err = alloc.New(alloc.Config{
		KV:         num.kv,
		Sequence:   likesSequence,
		Holder:     cfg.Replica,
		TTL:        duration(cfg.LeaseTTL),
		Restored:   restored,
		OnReady:    func() { num.replica.NumbersReady() },
		Logger:     n.log,
		Registerer: n.registry,
	})
	if err != nil {
		return nil, nil, err
	}
	num.feed, err = milestone.NewFeed(milestone.FeedConfig{JS: js, Replicas: cfg.AllocReplicas, Cluster: cfg.AllocCluster, Logger: n.log})
	if err != nil {
		return nil, nil, err
	}
	rn := &region.Numbering{
		Sequence:  likesSequence,
		Seq:       holderSeq{num.holder},
		Milestone: rule.Hit,
		OnClaim:   func() { num.claimer.Kick() },
	}
	return num, rn, nil
}

// start runs the holder, the feed and the claimer for replica r.
func (num *numbering) start(cfg Config, n *node) error {
	num.replica = n.replica
	var err error
	num.claimer, err = milestone.NewClaimer(milestone.ClaimerConfig{
		KV:         num.kv,
		Feed:       num.feed,
		Source:     n.replica,
		Sequence:   likesSequence,
		Region:     cfg.Region,
		Replica:    cfg.Replica,
		Chaos:      milestone.ChaosFromEnv(os.Getenv), // zero outside a chaos build
		Logger:     n.log,
		Registerer: n.registry,
	})
	if err != nil {
		return err
	}
	num.holder.Start()
	num.feed.Start()
	num.claimer.Start()
	n.log.Info("numbering likes", "milestones", num.rule.String(), "bucket", cfg.AllocBucket, "cluster", cfg.AllocCluster)
	return nil
}

// close stops claiming and following, then gives back the unused part of
// the leases. The replica's writer must have stopped.
func (num *numbering) close(ctx context.Context) error {
	if num.claimer != nil {
		num.claimer.Close()
	}
	num.feed.Close()
	if err := num.holder.Close(ctx); err != nil {
		return fmt.Errorf("give back leases: %w", err)
	}
	return nil
}

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

// sequence reads a sequence's allocator state from the KV.
func (num *numbering) sequence(ctx context.Context, name string) (any, error) {
	if name != likesSequence {
		return nil, httpapi.ErrNoSequence
	}
	return alloc.Read(ctx, num.kv, name)
}

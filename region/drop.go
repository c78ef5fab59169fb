package region

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// DropShards deletes the other replicas' data of shards this replica
// keeps no longer (storage.Batch.DropSegment, segment by segment, each in
// its own commit; its own entries and records stay, as nobody may give
// them back) and what the writer caches of them, and returns how many
// stored entries it deleted. The caller makes sure first that every
// holder of each shard has this replica's entries (a shard move's
// release, package node). Writes to the shards are refused or forwarded
// by then (Config.Holds), and a merge that still arrives only brings back
// part of what the holders have, which a CRDT merge takes as any other
// stale state.
func (a Admin) DropShards(ctx context.Context, shards []int) (int, error) {
	r := a.r
	for _, s := range shards {
		if s < 0 || s >= shard.Count || s == shard.Global {
			return 0, fmt.Errorf("drop shard %d: not a keyed shard", s)
		}
	}
	q := &request{drop: shards}
	if err := r.submit(ctx, q); err != nil {
		return 0, err // the writer may still be at it: q is its own
	}
	return q.dropped, nil
}

// commitDrop runs a drop request on the writer, alone: its segments are
// deleted as committed, so no other write may touch them in its batch.
func (r *Replica) commitDrop(q *request) {
	if err := r.Err(); err != nil {
		q.finish(err)
		return
	}
	dropped := map[int]bool{}
	for _, s := range q.drop {
		dropped[s] = true
	}
	own := r.self
	if r.chaosDropOwn() { // never outside a chaos build
		own = ""
	}
	var err error
	for _, s := range q.drop {
		for seg := s * storage.SegmentsPerShard; seg < (s+1)*storage.SegmentsPerShard && err == nil; seg++ {
			b := r.store.NewBatch()
			var n int
			if n, err = b.DropSegment(seg, own); err == nil {
				err = b.Commit()
			}
			b.Close()
			if err == nil {
				q.dropped += n
			}
		}
	}
	// Forget what the writer and readers cache of the dropped shards: a
	// cached vector or page is one the store no longer holds.
	of := func(k vkey) bool { return dropped[storage.SegmentShard(storage.VectorSegment(k.item))] }
	r.cache.dropIf(of)
	r.ownPages.clear()
	r.umu.Lock()
	for k := range r.unreconciled {
		if of(k) {
			delete(r.unreconciled, k)
		}
	}
	r.umu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w: drop shards: %w", ErrFailed, err)
		r.failure.CompareAndSwap(nil, &err)
		r.log.Error("dropping shards failed; replica stops writing", "error", err)
	} else {
		r.log.Info("dropped the data of shards this replica keeps no longer", "shards", len(q.drop), "entries", q.dropped)
	}
	q.finish(err)
}

// The write path: requests to the writer, Do and its shorthands (Apply,
// Like, Unlike, Incr, Merge), and the writer goroutine that commits them
// in batches.

package region

import (
	"context"
	"fmt"
	"slices"

	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// request is one submission to the writer: local ops or remote merges.
type request struct {
	ops []Op
	res []Result
	// ctx is the caller's context of local ops (Do): ops whose caller
	// gave up before the writer takes them are not applied (see commit).
	ctx     context.Context
	vmerges []VectorMerge
	rmerges []RecordMerge
	smerges []SketchMerge
	// gives are peers' asks for budget rights (GiveRights).
	gives []RightsGive
	// handoff lists budgets whose rights to hand off now (HandOffRights).
	handoff []string
	// handoffTo lists budgets whose rights go to a given replica
	// (HandOffShards).
	handoffTo []keyTo
	// setHandoff, if not nil, is the handoff target to record in the
	// store ("": none).
	setHandoff *string
	// ids counts the unique ids of the ops (OpUniques), which weigh on
	// the batch like ops.
	ids int
	// expire lists keyed records to delete if still expired by the rule;
	// expired is how many the writer deleted.
	expire  []rkey
	expired int
	// expireWin lists slots to delete if still expired by the
	// rule (expired counts them too).
	expireWin []storage.WindowRef
	// reconcileAll: reconcile every marked record this replica is the
	// origin of (the pass recovery put off).
	reconcileAll bool
	// finals: blocks of numbers whose ranks are known (Finalize).
	finals   []FinalBlock
	finalSeq string
	// drop: shards whose data to delete (DropShards), alone in a commit;
	// dropped counts the entries deleted.
	drop    []int
	dropped int
	// applyErr: a part of the request failed before the commit; the
	// request fails with it (the commit still happens for the others).
	applyErr error
	err      error // whole-request failure (commit failed, closed)
	done     chan struct{}
}

// abandoned reports whether q's ops are local ones whose caller has given
// up on them.
func (q *request) abandoned() bool { return q.ctx != nil && q.ctx.Err() != nil }

func (q *request) size() int {
	return len(q.ops) + q.ids + len(q.gives) + len(q.handoff) + len(q.handoffTo) + len(q.vmerges) + len(q.rmerges) + len(q.smerges) + len(q.expire) + len(q.expireWin) + len(q.finals)
}

// Do applies local operations in order, durably, and returns one Result per
// op. A nil error means every op was attempted; each Result carries its own
// error. If ctx ends first the ops may or may not have been applied.
func (r *Replica) Do(ctx context.Context, ops []Op) ([]Result, error) {
	if r.shut.Load() {
		return nil, ErrClosed
	}
	if !r.accepting.Load() {
		return nil, ErrNotReady
	}
	if err := r.checkHeld(ops); err != nil {
		if r.chaosAckUnheld() {
			return make([]Result, len(ops)), nil // acknowledged, never stored
		}
		return nil, err
	}
	q := &request{ops: ops, res: make([]Result, len(ops)), ctx: ctx}
	for i := range ops {
		q.ids += len(ops[i].IDs)
	}
	if err := r.submit(ctx, q); err != nil {
		return nil, err
	}
	return q.res, nil
}

// checkHeld refuses a batch with a key on a shard this replica does not
// hold: every key an op writes (a cashback writes three) must be here.
// Block flags live on the global shard, which every replica holds.
func (r *Replica) checkHeld(ops []Op) error {
	if r.cfg.Holds == nil {
		return nil
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind == OpBlock || o.Kind == OpUnblock || o.Kind == OpType {
			continue // on shard.Global, which every replica holds
		}
		if err := r.checkKeyHeld(o.Item); err != nil {
			return err
		}
		if o.Kind == OpCashback {
			if err := r.checkKeyHeld(o.Merchant); err != nil {
				return err
			}
			if err := r.checkKeyHeld(o.User); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Replica) checkKeyHeld(k string) error {
	if s := shard.Of(k); !r.cfg.Holds(s) {
		return fmt.Errorf("%w: %q is on shard %d", ErrNotHeld, k, s)
	}
	return nil
}

// do1 runs a single op and folds its error into the return.
// Apply runs one operation durably, as Do, and returns its result or error.
func (r *Replica) Apply(ctx context.Context, op Op) (Result, error) { return r.do1(ctx, op) }

func (r *Replica) do1(ctx context.Context, op Op) (Result, error) {
	res, err := r.Do(ctx, []Op{op})
	if err != nil {
		return Result{}, err
	}
	return res[0], res[0].Err
}

// Merge folds remote state in. It is idempotent and order-insensitive.
func (r *Replica) Merge(ctx context.Context, vecs []VectorMerge, recs []RecordMerge) error {
	if len(vecs) == 0 && len(recs) == 0 {
		return nil
	}
	return r.submit(ctx, &request{vmerges: vecs, rmerges: recs})
}

func (r *Replica) submit(ctx context.Context, q *request) error {
	if err := r.Err(); err != nil {
		return err
	}
	q.done = make(chan struct{})
	r.closeMu.RLock()
	if r.closed {
		r.closeMu.RUnlock()
		return ErrClosed
	}
	select {
	case r.reqs <- q:
		r.closeMu.RUnlock()
	case <-ctx.Done():
		r.closeMu.RUnlock()
		return fmt.Errorf("queue for writer: %w", ctx.Err())
	}
	select {
	case <-q.done:
		return q.err
	case <-ctx.Done():
		return fmt.Errorf("wait for commit: %w", ctx.Err())
	}
}

func (q *request) finish(err error) {
	q.err = err
	close(q.done)
}

// run is the writer goroutine.
func (r *Replica) run() {
	defer r.wg.Done()
	batch := make([]*request, 0, 64)
	for {
		select {
		case <-r.stopped.Done():
			return
		case <-r.kick:
			if r.accepting.Load() {
				r.commit(nil) // number queued likes
			}
		case <-r.reconcileKick:
			r.commit([]*request{{reconcileAll: true, done: make(chan struct{})}})
		case q := <-r.reqs:
			batch = append(batch[:0], q)
			n := q.size()
		fill:
			for n < r.cfg.MaxBatch {
				select {
				case q := <-r.reqs:
					batch = append(batch, q)
					n += q.size()
				default:
					break fill
				}
			}
			r.commit(batch)
			clear(batch) // drop references for the GC
		}
	}
}

// commit applies a group of requests as one durable batch.
func (r *Replica) commit(batch []*request) {
	if err := r.Err(); err != nil {
		for _, q := range batch {
			q.finish(err)
		}
		return
	}
	if slices.ContainsFunc(batch, func(q *request) bool { return len(q.drop) > 0 }) {
		rest := batch[:0:0]
		for _, q := range batch {
			if len(q.drop) > 0 {
				r.commitDrop(q)
			} else {
				rest = append(rest, q)
			}
		}
		if batch = rest; len(batch) == 0 {
			return
		}
	}
	if slices.ContainsFunc(batch, (*request).abandoned) {
		// The caller of these ops has given up (its deadline passed or
		// its client left) while they waited for the writer: they are
		// not applied. Applied now, a like whose client has already
		// retried it elsewhere, then unliked, would come after the
		// unlike and win (a replica paused with forwarded requests in
		// hand, a writer stalled behind a slow disk).
		rest := batch[:0:0]
		for _, q := range batch {
			if q.abandoned() {
				q.finish(fmt.Errorf("the caller gave up before the writer took the ops: %w", context.Cause(q.ctx)))
			} else {
				rest = append(rest, q)
			}
		}
		if batch = rest; len(batch) == 0 {
			return
		}
	}
	records := 0 // how many like and keyed records the batch may touch
	for _, q := range batch {
		records += len(q.rmerges)
		for i := range q.ops {
			if k := q.ops[i].Kind; k == OpLike || k == OpUnlike || k == OpToggle || k == OpIncr && q.ops[i].IdemKey != "" {
				records++
			}
		}
	}
	tx := r.newTxn(records)
	defer tx.close()
	for _, q := range batch {
		tx.apply(q)
	}
	if r.chaosAckBeforeCommit(batch) { // never outside a chaos build
		batch = nil // acknowledged already
	}
	changes, err := tx.commit()
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrFailed, err)
		r.failure.CompareAndSwap(nil, &err)
		r.log.Error("commit failed; replica stops writing", "error", err)
		for _, q := range batch {
			q.finish(err)
		}
		return
	}
	r.metrics.ownChanged.Add(float64(len(changes.Vectors)))
	// Before the acks too: an acknowledged write is already queued for
	// replication, so the next flush after the ack carries it.
	if r.cfg.OnCommit != nil && (!changes.Empty() || changes.Merged > 0) {
		r.cfg.OnCommit(changes)
	}
	for _, q := range batch {
		q.finish(q.applyErr)
	}
}

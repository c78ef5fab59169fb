package region

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// txn is the writer's overlay for one group commit: what the batch touches
// of every data type, read once from committed state and then changed in
// memory until the batch is written.
//
// Each data type is a part (the interface below) that owns its share of the
// overlay, in its own file. The writer applies a batch's requests to the
// parts (apply), then commits the batch: every part settles, then every
// part writes into the one atomic batch, then the event log, the state-lost
// mark and the clock are added, the batch is committed durably, and every
// part publishes what the commit changed to readers (caches, indexes). Only
// then are the requests acknowledged (Replica.commit). Each step runs the
// parts in the order of parts().
type txn struct {
	r     *Replica
	b     *storage.Batch
	nowMs int64

	// events: the batch's event log entries (Config.EventLog), in order.
	events []storage.Event
	// stateLost: recovery took back own state the store did not hold
	// (metaStateLost).
	stateLost bool
	// ch is what the commit changed, for replication; the parts' write
	// hooks fill it. (Kept here, not on commit's stack, which an interface
	// call would move to the heap: one more allocation per batch.)
	ch Changes

	// The parts, each in its file; the txn's methods that apply operations
	// and merges to them are there too.
	vectorTxn  // vectors.go: the vectors every counting part shares
	recordTxn  // records.go: like and keyed records
	counterTxn // counters.go
	budgetTxn  // budgets.go and handoff.go
	flagTxn    // blocks.go
	typeTxn    // types.go
	pageTxn    // uniques.go
	bookingTxn // windows.go: slots
	trendTxn   // trending.go
	numberTxn  // numbering.go
}

// A part is one data type's share of a group commit. The writer calls each
// hook of every part once per batch, in the order of parts(); a part
// embeds noHooks for the hooks it does not need.
type part interface {
	// settle makes the part's last changes to the overlay before anything
	// is written (they may touch other parts' overlays: a budget's rights
	// forwarded, bookings into slots' vectors).
	settle(t *txn) error
	// write adds the part's changes to the batch, and to ch what
	// replication must carry.
	write(t *txn, ch *Changes) error
	// publish runs once the batch is durable, before any request of it is
	// acknowledged: it shows the commit to readers (caches, in-memory
	// indexes) and to whatever waits on it.
	publish(t *txn)
}

// parts lists the parts in the order their hooks run. The order matters:
// budgets settle before slots are booked (a forwarded right loads
// vectors, and vectors are written in first-touch order); vectors are
// written before flags, flags before records (a record's marker follows
// its user's flag), records before sketch pages and pages before numbers,
// so a batch holds its writes in that order; and the vector cache is
// published before the trending sketches, both before the markers, and
// all of them before the sequences learn what the batch took (the sketch
// page cache is the writer's own, so its place among them is free).
//
// A new data type adds its part to txn and here. (Likes and counters have
// no hooks of their own: they write through the vectors and records.)
func (t *txn) parts() [9]part {
	return [...]part{&t.budgetTxn, &t.bookingTxn, &t.vectorTxn, &t.trendTxn, &t.flagTxn, &t.typeTxn, &t.recordTxn, &t.pageTxn, &t.numberTxn}
}

// noHooks gives a part the hooks it does not need, as no-ops.
type noHooks struct{}

func (noHooks) settle(*txn) error          { return nil }
func (noHooks) write(*txn, *Changes) error { return nil }
func (noHooks) publish(*txn)               {}

// logEvent adds an event to the batch's log, if the log is on.
func (t *txn) logEvent(e storage.Event) {
	if t.r.cfg.EventLog {
		t.events = append(t.events, e)
	}
}

// halves splits a change of an own entry into its P and N growth.
func halves(delta int64) (p, n uint64) {
	if delta >= 0 {
		return uint64(delta), 0
	}
	return 0, uint64(-delta)
}

// newTxn starts the overlay for a group commit that may touch up to
// records like records (a hint: the record map is sized for it, so a batch
// of 10,000 likes does not rehash its way up).
func (r *Replica) newTxn(records int) *txn {
	return &txn{
		r:         r,
		b:         r.store.NewBatch(),
		nowMs:     r.pclock.NowMs(),
		vectorTxn: vectorTxn{vecs: make(map[vkey]*vecState)},
		recordTxn: recordTxn{
			recs:   make(map[rkey]*recState, records),
			rorder: make([]rkey, 0, records),
		},
	}
}

func (t *txn) close() { t.b.Close() }

// apply runs every part of one request against the overlay.
func (t *txn) apply(q *request) {
	var kinds [numOpKinds]int // ops by kind, counted once per request
	for i := range q.ops {
		q.res[i] = t.applyOp(&q.ops[i], &kinds)
	}
	for k, n := range kinds {
		if n > 0 {
			t.r.metrics.opsByKind[k].Add(float64(n))
		}
	}
	for i := range q.vmerges {
		if err := t.mergeVector(&q.vmerges[i]); err != nil {
			t.r.log.Warn("vector merge skipped", "item", q.vmerges[i].Item, "error", err)
		}
	}
	for i := range q.rmerges {
		if err := t.mergeRecord(&q.rmerges[i]); err != nil {
			t.r.log.Warn("record merge skipped", "item", q.rmerges[i].Item, "user", q.rmerges[i].User, "error", err)
		}
	}
	for _, g := range q.gives {
		t.give(g)
	}
	if to := t.r.handoffTo(); to != "" {
		for _, k := range q.handoff {
			t.handOff(k, to)
		}
	}
	for _, p := range q.handoffTo {
		t.handOff(p.key, p.to)
	}
	if q.setHandoff != nil {
		t.b.PutMeta(metaHandoff, []byte(*q.setHandoff))
	}
	for i := range q.smerges {
		if err := t.mergeSketch(&q.smerges[i]); err != nil {
			t.r.log.Warn("sketch merge skipped", "name", q.smerges[i].Name, "replica", q.smerges[i].Replica, "error", err)
		}
	}
	if len(q.finals) > 0 {
		q.applyErr = t.finalize(q.finalSeq, q.finals)
	}
	if q.reconcileAll {
		if err := t.reconcileMarked(); err != nil {
			t.r.log.Warn("reconciliation after recovery", "error", err)
		}
	}
	for _, ref := range q.expireWin {
		ok, err := t.expireWindow(ref)
		if err != nil {
			t.r.log.Warn("slot not expired", "slot", ref.Name, "error", err)
		}
		if ok {
			q.expired++
		}
	}
	for _, ik := range q.expire {
		ok, err := t.expireKeyed(ik)
		if err != nil {
			t.r.log.Warn("idempotency key not expired", "key", ik.a, "idempotency_key", ik.b, "error", err)
		}
		if ok {
			q.expired++
		}
	}
}

func (t *txn) applyOp(op *Op, kinds *[numOpKinds]int) Result {
	if err := op.Validate(); err != nil {
		return Result{Err: err}
	}
	kinds[op.Kind]++ // Validate bounded Kind
	if err := t.checkAt(op.At, op.Import); err != nil {
		return Result{Err: err}
	}
	switch op.Kind {
	case OpLike, OpUnlike, OpIncr, OpUniques:
		if err := t.checkType(op.Item); err != nil {
			return Result{Err: err}
		}
	}
	switch op.Kind {
	case OpLike, OpUnlike:
		return t.applyLike(op)
	case OpToggle:
		return t.applyToggle(op)
	case OpUniques:
		return t.applyUniques(op)
	case OpGrant:
		return t.applyGrant(op)
	case OpSpend:
		return t.applySpend(op)
	case OpCashback:
		return t.applyCashback(op)
	case OpFence:
		return t.applyFence(op)
	case OpCallOff, OpCallOffCredit:
		return t.applyCallOff(op)
	case OpBlock, OpUnblock:
		return t.applyBlock(op.User, op.Kind == OpBlock)
	case OpType:
		return t.applyType(op)
	default:
		return t.applyIncr(op)
	}
}

// logFolded adds e to the batch's event of the same key in folds (By,
// P, N and Count summed), or logs it as that key's event.
func (t *txn) logFolded(folds *map[string]int, e storage.Event) {
	if i, ok := (*folds)[e.Key]; ok {
		f := &t.events[i]
		f.By += e.By
		f.P += e.P
		f.N += e.N
		f.Count += e.Count
		return
	}
	if *folds == nil {
		*folds = make(map[string]int)
	}
	(*folds)[e.Key] = len(t.events)
	t.events = append(t.events, e)
}

// checkEntry refuses a change that would take either half of an own entry
// past EntryCap at the commit's time. (Halves are at most MaxEntry = 2^62
// and |delta| at most 2^41, so the sums cannot wrap.)
func (t *txn) checkEntry(e crdt.PN, delta int64) error {
	limit := EntryCap(t.nowMs)
	if delta > 0 && e.P+uint64(delta) > limit || delta < 0 && e.N+uint64(-delta) > limit {
		return fmt.Errorf("%w: this replica's entry may hold at most %d now (rising by %d a second up to %d)",
			ErrOverflow, limit, EntryRatePerMs*1000, uint64(MaxEntry))
	}
	return nil
}

// persistClock stores the largest HLC issued or observed, in the batch
// that used it, if it moved.
func (t *txn) persistClock() {
	if last := t.r.clock.Last(); last > t.r.hlcStored {
		t.r.hlcStored = last
		t.b.PutMeta(metaHLC, crdt.AppendPN(nil, crdt.PN{P: uint64(last)}))
	}
}

// commit writes the overlay, fsyncs, and publishes it to readers.
func (t *txn) commit() (Changes, error) {
	t.ch = Changes{Records: make([]RecordChange, 0, len(t.rorder))}
	parts := t.parts()
	for _, p := range parts {
		if err := p.settle(t); err != nil {
			return Changes{}, err
		}
	}
	for _, p := range parts {
		if err := p.write(t, &t.ch); err != nil {
			return Changes{}, err
		}
	}
	t.b.LogEvents(t.events)
	if t.stateLost && !t.r.stateLost.Load() {
		t.b.PutMeta(metaStateLost, []byte{1})
	}
	if t.b.Len() > 0 {
		t.persistClock()
	}
	if t.b.Len() == 0 {
		return t.ch, nil
	}
	timer := prometheus.NewTimer(t.r.metrics.commitSeconds)
	if err := t.b.Commit(); err != nil {
		return Changes{}, err
	}
	timer.ObserveDuration()
	if t.stateLost {
		t.r.stateLost.Store(true)
	}
	t.r.metrics.batchWrites.Observe(float64(t.b.Len()))
	// Publish: the commit is durable, so readers may see it.
	for _, p := range parts {
		p.publish(t)
	}
	return t.ch, nil
}

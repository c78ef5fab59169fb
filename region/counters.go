package region

import (
	"context"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Counters is the replica's face for counters: increments, reads and
// approximate counting (approx.go).
type Counters struct{ r *Replica }

// Counters returns the replica's counters face.
func (r *Replica) Counters() Counters { return Counters{r} }

// Counters: increments of a counter's vector, unkeyed, or keyed by an
// idempotency key whose keyed record says whether it was applied. They
// write through the vectors and records and have no hooks of their own.

// counterTxn is the batch's counter state beside its vectors and records.
type counterTxn struct {
	// incrEv: where each counter's unkeyed increments fold in the log.
	incrEv map[string]int
}

// expireKeyed deletes a keyed record the sweeper found past the TTL, if
// it still is: a merge may have moved its register since the sweep read it.
func (t *txn) expireKeyed(k rkey) (bool, error) {
	rs, err := t.record(k)
	if err != nil || !rs.deleted || rs.dirty {
		return false, err
	}
	return true, nil
}

func (t *txn) applyIncr(op *Op) Result {
	if op.IdemKey != "" {
		return t.applyKeyed(op)
	}
	vs, err := t.vector(storage.Counters, op.Item)
	if err != nil {
		return Result{Err: err}
	}
	if e := t.r.approx.errorOf(op.Item); e > 0 {
		return t.applyApproxIncr(op, vs, e)
	}
	if err := t.checkEntry(vs.cur.Get(t.r.self), op.By); err != nil {
		return Result{Err: err}
	}
	vs.cur = vs.cur.Add(t.r.self, op.By)
	t.book(storage.Counters, op.Item, t.atOr(op.At), op.By)
	if len(t.r.nums) > 0 {
		t.countIncr(op.Item, op.By)
	}
	if t.r.cfg.EventLog && !t.r.chaosLogSkipsIncrements() {
		t.logIncr(op.Item, op.By)
	}
	return Result{Value: vs.cur.Value()}
}

// applyApproxIncr applies an unkeyed increment of an approximate counter:
// it counts what the coin decides, and an increment that counts nothing
// touches nothing (no write, no booking, no event, nothing to replicate).
func (t *txn) applyApproxIncr(op *Op, vs *vecState, relErr float64) Result {
	n := t.approxIncr(relErr, vs.cur, op.By)
	if err := t.checkEntry(vs.cur.Get(t.r.self), n); err != nil {
		return Result{Err: err}
	}
	if n == 0 {
		t.r.metrics.approxSkipped.Inc()
		return Result{Value: vs.cur.Value(), Approx: true}
	}
	t.r.metrics.approxWritten.Inc()
	vs.cur = vs.cur.Add(t.r.self, n)
	t.book(storage.Counters, op.Item, t.atOr(op.At), n)
	if len(t.r.nums) > 0 {
		t.countIncr(op.Item, n)
	}
	if t.r.cfg.EventLog && !t.r.chaosLogSkipsIncrements() {
		// The event says what was counted: By is the counted amount, so
		// the log adds up to the counter (and the audit to its entry).
		t.logIncr(op.Item, n)
	}
	return Result{Value: vs.cur.Value(), Approx: true, Counted: n}
}

// logIncr folds an unkeyed increment into its counter's event of this
// batch: one event per counter per commit, carrying the sum and count.
func (t *txn) logIncr(key string, by int64) {
	p, n := halves(by)
	t.logFolded(&t.incrEv, storage.Event{Type: storage.EventIncr, Kind: storage.Counters, Key: key, By: by,
		P: p, N: n, Count: 1, HLC: crdt.MakeHLC(t.nowMs, 0)})
}

// applyKeyed applies an increment with an idempotency key unless the key
// was applied already, here or at any replica this one has heard from.
// Applications at replicas that had not heard of each other all count at
// first; the keyed record's winner takes the extra ones back.
func (t *txn) applyKeyed(op *Op) Result {
	rs, err := t.record(keyedKey(op.Item, op.IdemKey))
	if err != nil {
		return Result{Err: err}
	}
	vs, err := t.vector(storage.Counters, op.Item)
	if err != nil {
		return Result{Err: err}
	}
	relErr := t.r.approx.errorOf(op.Item)
	rec := rs.keyed()
	if res, done := t.keyedDuplicate(rec, op.IdemKey, op.By, 1); done {
		if res.Err == nil {
			res.Value, res.Approx = vs.cur.Value(), relErr > 0
		}
		return res
	}
	// On an approximate counter the coin is flipped once, here: the record
	// keeps what it decided (a retry is a duplicate of this decision, and
	// a concurrent application elsewhere reconciles to the later one's).
	counted := op.By
	if relErr > 0 {
		counted = t.approxIncr(relErr, vs.cur, op.By)
	}
	if err := t.checkEntry(vs.cur.Get(t.r.self), counted); err != nil {
		return Result{Err: err}
	}
	if relErr > 0 {
		t.r.metrics.approxWritten.Inc() // the key is written, whatever was counted
	}
	hlc := t.r.clock.Now(t.nowMs)
	if hlc <= rec.HLC {
		hlc = rec.HLC + 1
	}
	written := t.chaosApproxWritten(relErr, vs.cur, op.By, counted)
	delta := rec.ApplyCounted(t.r.self, op.By, counted, hlc)
	rec.At = op.At
	vs.cur = vs.cur.Add(t.r.self, delta+written-counted)
	t.book(storage.Counters, op.Item, rec.BookedMs(), delta)
	if t.r.cfg.EventLog && !t.r.chaosLogSkipsIncrements() {
		p, n := halves(delta)
		t.logEvent(storage.Event{Type: storage.EventIncr, Kind: storage.Counters, Key: op.Item, Idem: op.IdemKey, By: op.By,
			P: p, N: n, Count: 1, HLC: hlc})
	}
	if len(t.r.nums) > 0 {
		t.countIncr(op.Item, counted)
	}
	rs.dirty, rs.spread, rs.deleted = true, true, false
	if relErr > 0 {
		return Result{Value: vs.cur.Value(), Approx: true, Counted: counted}
	}
	return Result{Value: vs.cur.Value()}
}

// Incr adds by to counter key, once per idem key if idem is not empty.
func (c Counters) Incr(ctx context.Context, key string, by int64, idem string) (Result, error) {
	return c.r.do1(ctx, Op{Kind: OpIncr, Item: key, By: by, IdemKey: idem})
}

// Get reads a counter.
func (c Counters) Get(key string) (Read, error) { return c.r.read(storage.Counters, key) }

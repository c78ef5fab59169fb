package region

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// txn is the writer's overlay for one group commit: the vectors, records
// and idempotency keys the batch touches, read once from committed state and
// then changed in memory until the batch is written.
type txn struct {
	r      *Replica
	b      *storage.Batch
	nowMs  int64
	vecs   map[vkey]*vecState
	recs   map[rkey]*recState
	order  []vkey // vectors in first-touch order, for deterministic writes
	rorder []rkey
	// last is the vector the previous op touched: a batch of likes of one
	// hot item (or increments of one counter) skips the map lookup.
	lastKey vkey
	last    *vecState

	// Numbering (numbering.go): per sequence, nil until one is touched.
	seq []seqTxn

	// events: the batch's event log entries (Config.EventLog), in order;
	// incrEv: where each counter's unkeyed increments fold.
	events  []storage.Event
	incrEv  map[string]int
	spendEv map[string]int // unkeyed budget spends, folded the same way

	// Budgets (budgets.go) the batch touches, and the asks for rights it
	// sends.
	budgets map[string]*budgetState
	asks    []RightsAsk
	// forward: budgets whose rights may have grown in this batch, moved on
	// at commit while a handoff is on (handoff.go).
	forward map[string]struct{}

	// Block flags (blocks.go) the batch touches.
	flags map[string]*flagState

	// Unique-count sketch pages (uniques.go) the batch touches.
	pages   map[skey]*pageState
	porder  []skey
	targets map[targetKey]*uniqueTarget

	// Time buckets (windows.go): changes of own entries to book, folded
	// per (family, key, second).
	bookings    map[booking]*int64
	bookOrder   []booking
	lastBookKey booking
	lastBook    *int64

	// stateLost: recovery took back own state the store did not hold
	// (metaStateLost).
	stateLost bool
}

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
		r:      r,
		b:      r.store.NewBatch(),
		nowMs:  r.pclock.NowMs(),
		vecs:   make(map[vkey]*vecState),
		recs:   make(map[rkey]*recState, records),
		rorder: make([]rkey, 0, records),
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
			t.r.log.Warn("time bucket not expired", "bucket", ref.Name, "error", err)
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
	if err := t.checkAt(op.At); err != nil {
		return Result{Err: err}
	}
	switch op.Kind {
	case OpLike, OpUnlike:
		return t.applyLike(op.Item, op.User, op.Kind == OpLike, op.At)
	case OpUniques:
		return t.applyUniques(op)
	case OpGrant:
		return t.applyGrant(op)
	case OpSpend:
		return t.applySpend(op)
	case OpCashback:
		return t.applyCashback(op)
	case OpBlock, OpUnblock:
		return t.applyBlock(op.User, op.Kind == OpBlock)
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
	ch := Changes{Records: make([]RecordChange, 0, len(t.rorder))}
	self := t.r.self
	t.forwardRights()
	t.noteSpent()
	if err := t.flushBookings(); err != nil {
		return Changes{}, err
	}
	for _, k := range t.order {
		vs := t.vecs[k]
		if vs.deleted {
			if len(vs.orig) > 0 {
				t.b.DeleteVector(k.kind, k.item, vs.orig)
			}
			continue
		}
		if k.kind.IsWindows() && len(vs.orig) == 0 && len(vs.cur) > 0 {
			t.b.IndexWindow(k.kind, k.item)
		}
		for _, e := range vs.cur {
			if vs.orig.Get(e.Replica) != e.PN {
				t.b.PutVectorEntry(k.kind, k.item, e.Replica, vs.orig.Get(e.Replica), e.PN)
			}
		}
		if own := vs.cur.Get(self); own != vs.orig.Get(self) {
			ch.Vectors = append(ch.Vectors, VectorChange{Kind: k.kind, Item: k.item, Own: own})
		}
	}
	type markerChange struct {
		vec vkey
		on  bool
	}
	var markers []markerChange
	for user, fs := range t.flags {
		if !fs.dirty {
			continue
		}
		t.b.PutFlag(user, fs.orig, fs.cur)
		if fs.spread {
			ch.Records = append(ch.Records, RecordChange{Item: BlockRecordItem, User: user, Rec: fs.cur.Record()})
		} else {
			ch.Merged++
		}
	}
	for _, k := range t.rorder {
		rs := t.recs[k]
		if rs.deleted && !rs.dirty {
			t.b.DeleteKeyedRecord(k.a, k.b, rs.orig)
			if rs.origEx != 0 {
				markers = append(markers, markerChange{k.vector(), false})
			}
			continue
		}
		if !rs.dirty {
			// A record the batch did not change still moves when its
			// user's flag did (blocks.go): its marker follows.
			if !k.keyed && len(t.flags) > 0 && rs.orig != nil {
				if ex := t.excess(k, rs.rec); (ex != 0) != (rs.origEx != 0) {
					t.b.SetMarker(k.a, k.b, false, ex != 0)
					markers = append(markers, markerChange{k.vector(), ex != 0})
				}
			}
			continue
		}
		t.b.PutLikeRecord(k.a, k.b, rs.orig, rs.rec)
		if was := rs.orig != nil && rs.orig.Liked; !k.keyed && t.r.cfg.LikeLists && (rs.rec.Liked != was || rs.rec.Liked && rs.rec.HLC != rs.orig.HLC) && !t.r.chaosListsSkip(rs) {
			t.b.SetLiked(k.a, k.b, rs.rec.Liked, rs.rec.HLC)
		}
		if ex := t.excess(k, rs.rec); (ex != 0) != (rs.origEx != 0) {
			t.b.SetMarker(k.a, k.b, k.keyed, ex != 0)
			markers = append(markers, markerChange{k.vector(), ex != 0})
		}
		if rs.spread {
			// rs.rec is the txn's own copy and the txn ends here: it can
			// be handed over without another copy.
			ch.Records = append(ch.Records, RecordChange{Item: k.a, User: k.b, Rec: rs.rec})
		} else {
			ch.Merged++
		}
	}
	t.writePages(&ch)
	ch.Asks = t.asks
	if err := t.number(); err != nil {
		return Changes{}, err
	}
	t.b.LogEvents(t.events)
	if t.stateLost && !t.r.stateLost.Load() {
		t.b.PutMeta(metaStateLost, []byte{1})
	}
	if t.b.Len() > 0 {
		t.persistClock()
	}
	if t.b.Len() == 0 {
		return ch, nil
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
	for _, k := range t.order {
		vs := t.vecs[k]
		if !vs.cur.Equal(vs.orig) {
			t.r.cache.put(k, vs.cur)
		}
	}
	t.feedTrends()
	t.cachePages()
	if len(markers) > 0 {
		t.r.umu.Lock()
		for _, m := range markers {
			if m.on {
				t.r.unreconciled[m.vec]++
			} else if t.r.unreconciled[m.vec]--; t.r.unreconciled[m.vec] <= 0 {
				delete(t.r.unreconciled, m.vec)
			}
		}
		t.r.umu.Unlock()
	}
	return ch, nil
}

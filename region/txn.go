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

// rkey names a record: (item, user) of a like record, or (counter key,
// idempotency key) of a keyed record.
type rkey struct {
	a, b  string
	keyed bool
}

// kind is the vector family the record's contributions count in.
func (k rkey) kind() storage.Kind {
	switch {
	case k.isBudget():
		return storage.Budgets
	case k.keyed:
		return storage.Counters
	}
	return storage.Likes
}

// vector is the vector the record's contributions count in.
func (k rkey) vector() vkey {
	if k.isBudget() {
		return vkey{storage.Budgets, k.a[len(budgetRecordPrefix):]}
	}
	return vkey{k.kind(), k.a}
}

type vecState struct {
	orig crdt.Vector // committed value; never modified
	cur  crdt.Vector
	// deleted: an expired time bucket the commit deletes.
	deleted bool
	// bucket is a time bucket's parsed name, once known (trend is set if
	// its width feeds the trending sketches).
	bucket crdt.Bucket
	parsed bool
}

type recState struct {
	rec    *crdt.LikeRecord
	orig   *crdt.LikeRecord // committed record; nil if there was none
	origEx int64            // excess of orig
	dirty  bool
	spread bool // changed by a local action or own reconciliation
	// deleted: an expired keyed record the commit deletes.
	deleted bool

	// When there was no record, rec points at fresh, and fresh.Contrib
	// starts on contrib: a first like costs one allocation, not three.
	fresh   crdt.LikeRecord
	contrib [1]crdt.Entry
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

// vector returns the overlay state of a vector, loading it on first touch.
func (t *txn) vector(kind storage.Kind, item string) (*vecState, error) {
	k := vkey{kind, item}
	if t.last != nil && t.lastKey == k {
		return t.last, nil
	}
	if s, ok := t.vecs[k]; ok {
		t.lastKey, t.last = k, s
		return s, nil
	}
	v, ok := t.r.cache.peek(k)
	if !ok {
		var err error
		if v, err = t.r.store.Vector(kind, item); err != nil {
			return nil, err
		}
	}
	s := &vecState{orig: v, cur: v.Clone()}
	t.vecs[k] = s
	t.order = append(t.order, k)
	t.lastKey, t.last = k, s
	return s, nil
}

// record returns the overlay state of a like or keyed record (zero if
// none). A keyed record past the idempotency TTL reads as none: it is gone
// by rule wherever the sweeper has not deleted it yet.
func (t *txn) record(k rkey) (*recState, error) {
	if s, ok := t.recs[k]; ok {
		return s, nil
	}
	var rec *crdt.LikeRecord
	var ok bool
	var err error
	if k.keyed {
		rec, ok, err = t.r.store.KeyedRecord(k.a, k.b)
	} else {
		rec, ok, err = t.r.store.LikeRecord(k.a, k.b)
	}
	if err != nil {
		return nil, err
	}
	s := &recState{}
	if ok {
		// origEx is the excess the stored marker stands for: under the
		// committed flag, whatever this batch did to the flag so far.
		origEx := rec.Excess()
		if !k.keyed {
			origEx = rec.ExcessBlocked(t.r.store.Flag(k.b).Blocked)
		}
		s.orig, s.rec, s.origEx = rec, rec.Clone(), origEx
		if k.keyed && t.r.keyExpired(rec, t.nowMs) {
			s.resetKeyed()
		}
	} else {
		s.fresh.Contrib = s.contrib[:0]
		s.rec = &s.fresh
	}
	t.recs[k] = s
	t.rorder = append(t.rorder, k)
	return s, nil
}

// resetKeyed replaces an expired keyed record by none: the commit deletes
// it unless the batch writes the key anew.
func (s *recState) resetKeyed() {
	s.fresh = crdt.LikeRecord{Keyed: true, Contrib: s.contrib[:0]}
	s.rec = &s.fresh
	s.deleted = s.orig != nil
}

// applied reports whether a keyed record holds an application of its key.
func applied(rec *crdt.LikeRecord) bool { return rec.HLC != 0 || len(rec.Contrib) > 0 }

// KeyExpired reports whether a keyed record is past the idempotency TTL by
// this replica's clock: gone by rule, whether or not swept yet.
func (r *Replica) KeyExpired(rec *crdt.LikeRecord) bool {
	return rec.Keyed && r.keyExpired(rec, r.pclock.NowMs())
}

// keyExpired is the rule every replica applies to keyed records: a key
// expires IdempotencyTTL after its register's stamp (zero TTL: never).
func (r *Replica) keyExpired(rec *crdt.LikeRecord, nowMs int64) bool {
	ttl := r.cfg.IdempotencyTTL.Milliseconds()
	return ttl > 0 && rec.HLC != 0 && rec.HLC.WallMs()+ttl <= nowMs
}

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

func (t *txn) applyLike(item, user string, liked bool, at int64) Result {
	if t.blocked(user) {
		t.r.metrics.refusedBlocked.Inc()
		return Result{Err: ErrBlocked}
	}
	rs, err := t.record(rkey{item, user, false})
	if err != nil {
		return Result{Err: err}
	}
	vs, err := t.vector(storage.Likes, item)
	if err != nil {
		return Result{Err: err}
	}
	hlc := t.r.clock.Now(t.nowMs)
	if hlc <= rs.rec.HLC {
		// The record holds a stamp our clock has not caught up with (it
		// was written while the clock ran ahead, see load). The action
		// must still win over it, or it would be reverted.
		hlc = rs.rec.HLC + 1
	}
	// A like moves the count by at most the number of replicas, so unlike
	// increments it needs no overflow check.
	changed, delta := rs.rec.Apply(t.r.self, liked, hlc)
	rs.rec.At = at
	vs.cur = vs.cur.Add(t.r.self, delta)
	t.book(storage.Likes, item, rs.rec.BookedMs(), delta)
	if t.r.cfg.EventLog {
		typ := storage.EventUnlike
		if liked {
			typ = storage.EventLike
		}
		p, n := halves(delta)
		t.logEvent(storage.Event{Type: typ, Kind: storage.Likes, Key: item, User: user, P: p, N: n, Count: 1, HLC: hlc})
	}
	// Only a user's first like of an item takes a number: a like after an
	// unlike counts again, but taking a number for it would let one user
	// toggling like/unlike burn numbers, and milestones, without bound.
	// (Concurrent first likes in several regions may each take one, at
	// most one per replica.)
	if delta > 0 && rs.rec.Additions() == 1 {
		if len(t.r.nums) > 0 {
			t.countLike(item, user)
		}
	}
	rs.dirty, rs.spread = true, true
	return Result{Liked: liked, Changed: changed, Value: vs.cur.Value()}
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

// applyKeyed applies an increment with an idempotency key unless the key
// was applied already, here or at any replica this one has heard from.
// Applications at replicas that had not heard of each other all count at
// first; the keyed record's winner takes the extra ones back.
func (t *txn) applyKeyed(op *Op) Result {
	rs, err := t.record(rkey{op.Item, op.IdemKey, true})
	if err != nil {
		return Result{Err: err}
	}
	vs, err := t.vector(storage.Counters, op.Item)
	if err != nil {
		return Result{Err: err}
	}
	relErr := t.r.approx.errorOf(op.Item)
	if res, done := t.keyedDuplicate(rs, op.IdemKey, op.By, 1); done {
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
	if hlc <= rs.rec.HLC {
		hlc = rs.rec.HLC + 1
	}
	written := t.chaosApproxWritten(relErr, vs.cur, op.By, counted)
	delta := rs.rec.ApplyKeyedCounted(t.r.self, op.By, counted, hlc)
	rs.rec.At = op.At
	vs.cur = vs.cur.Add(t.r.self, delta+written-counted)
	t.book(storage.Counters, op.Item, rs.rec.BookedMs(), delta)
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

func (t *txn) mergeVector(m *VectorMerge) error {
	if !storage.ValidItem(m.Kind, m.Item) {
		return fmt.Errorf("%w: bad vector merge %c/%q", ErrInvalid, m.Kind, m.Item)
	}
	var bucket crdt.Bucket
	if m.Kind.IsWindows() {
		if bucket, _ = crdt.ParseBucket(m.Item); bucket.Expired(t.nowMs) {
			// Gone by rule everywhere: taking it would bring it back.
			t.r.metrics.refusedBucket.Inc()
			return nil
		}
	}
	for _, e := range m.Vec {
		if e.P > MaxEntry || e.N > MaxEntry {
			t.r.metrics.refusedCap.Inc()
			return fmt.Errorf("%w: entry %s=%v of %c/%q is past 2^62", ErrInvalid, e.Replica, e.PN, m.Kind, m.Item)
		}
	}
	vs, err := t.vector(m.Kind, m.Item)
	if err != nil {
		return err
	}
	if m.Kind.IsWindows() {
		vs.bucket, vs.parsed = bucket, true
	}
	if m.Kind == storage.Budgets && t.r.handoff.Load() != nil {
		// A transfer to us, or our own entries adopted in recovery.
		if key, _, _, ok := crdt.SplitBudgetName(m.Item); ok {
			t.forwardLater(key)
		}
	}
	vec := m.Vec
	if own := vec.Get(t.r.self); !vs.cur.Get(t.r.self).Covers(own) {
		if t.r.accepting.Load() {
			// This replica is the only authority on its own entries, and
			// it never loses one it acknowledged (every commit is durable
			// before the ack). A peer claiming more is forging it, or is
			// a second process running with our id.
			t.r.metrics.refusedOwn.Inc()
			t.r.log.Warn("refused a peer's higher value of our own entry", "kind", m.Kind, "item", m.Item,
				"local", vs.cur.Get(t.r.self), "peer", own)
			vec = without(vec, t.r.self)
		} else {
			// Recovery, before any write is acknowledged: our state was
			// lost or restored from an old copy, and max-merge adopting
			// the peers' view of our entries is the repair.
			t.r.metrics.ownRecovered.Inc()
			t.r.log.Warn("own entry recovered from peer", "kind", m.Kind, "item", m.Item, "local", vs.cur.Get(t.r.self), "peer", own)
			if !m.Kind.IsWindows() {
				// A time bucket's own entry is booked from the others;
				// the counts themselves are what was lost.
				t.stateLost = true
			}
			if local := vs.cur.Get(t.r.self); t.r.cfg.EventLog && !m.Kind.IsWindows() {
				e := storage.Event{Type: storage.EventRecovered, Kind: m.Kind, Key: m.Item, Count: 1,
					P: max(own.P, local.P) - local.P, N: max(own.N, local.N) - local.N, HLC: crdt.MakeHLC(t.nowMs, 0)}
				if m.Kind == storage.Budgets {
					// An inbox's name is no id: the log names it by key
					// and receiver (storage.Event.Moves).
					e.Key, e.User, _, _ = crdt.SplitBudgetName(m.Item)
				}
				t.logEvent(e)
			}
		}
	}
	vs.cur, _ = vs.cur.Merge(vec)
	vs.deleted = false
	return nil
}

// without returns v minus replica id's entry, as a new vector.
func without(v crdt.Vector, id string) crdt.Vector {
	out := make(crdt.Vector, 0, len(v))
	for _, e := range v {
		if e.Replica != id {
			out = append(out, e)
		}
	}
	return out
}

func (t *txn) mergeRecord(m *RecordMerge) error {
	if m.Rec == nil || !ValidRecordKey(m.Item, m.Rec.Keyed) || !crdt.ValidID(m.User) {
		return fmt.Errorf("%w: bad record merge %q/%q", ErrInvalid, m.Item, m.User)
	}
	in := m.Rec
	if m.Item == BlockRecordItem && !in.Keyed {
		f, ok := crdt.FlagOfRecord(in)
		if !ok {
			return fmt.Errorf("%w: flag of %q is not a pure register", ErrInvalid, m.User)
		}
		return t.mergeFlag(m.User, f)
	}
	k := rkey{m.Item, m.User, in.Keyed}
	if k.keyed && t.r.keyExpired(in, t.nowMs) {
		// Gone by rule everywhere: taking it would bring it back.
		t.r.metrics.refusedExpiry.Inc()
		return nil
	}
	for _, e := range in.Contrib {
		if e.P > MaxEntry || e.N > MaxEntry {
			t.r.metrics.refusedCap.Inc()
			return fmt.Errorf("%w: contribution %s=%v past 2^62", ErrInvalid, e.Replica, e.PN)
		}
	}
	// A stamp far ahead of our wall clock is a broken clock or a forgery.
	// Adopting it would let it beat every later action for as long as it
	// is ahead, reverting acknowledged ones. The whole record waits
	// (anti-entropy offers it again; it is taken once our clock is within
	// the bound), so every replica's view of it stays a consistent
	// portion: taking the contributions without the register could have
	// two replicas each reconcile as the winner.
	if in.HLC.WallMs() > t.nowMs+maxClockDriftMs {
		t.r.metrics.refusedFuture.Inc()
		return fmt.Errorf("%w: record stamped %v, more than %v ahead of our clock", ErrInvalid, in.HLC, maxClockDriftMs)
	}
	rs, err := t.record(k)
	if err != nil {
		return err
	}
	if k.keyed && in.HLC == 0 && rs.rec.HLC == 0 {
		// A contribution without the register that says when the key was
		// applied: stored alone, it could never expire. It waits for the
		// register (anti-entropy offers it again).
		t.r.metrics.refusedNoReg.Inc()
		return nil
	}
	self := t.r.self
	ownRaise := !rs.rec.Contrib.Get(self).Covers(in.Contrib.Get(self))
	regRaise := in.Origin == self && in.Wins(rs.rec)
	if t.r.accepting.Load() {
		// As for vectors: once writes are acknowledged, only this replica
		// raises its own contribution or writes registers in its name.
		if ownRaise || regRaise {
			t.r.metrics.refusedOwn.Inc()
			t.r.log.Warn("refused a peer's newer view of our own like record", "item", m.Item, "user", m.User)
			in, _ = in.Restrict(func(id string) bool { return id != self })
		}
	} else if ownRaise || regRaise {
		// Recovery: a peer knows an action this replica accepted and
		// the store forgot (a repeated like moves no vector, but its
		// register names us).
		t.stateLost = true
	}
	t.r.clock.Observe(in.HLC)
	if !rs.rec.Merge(in) {
		return nil
	}
	rs.dirty, rs.deleted = true, false
	// While recovering, this replica's own entries are not all back yet:
	// a reconciliation now would change its own vector entry from a stale
	// base, and the recovered entry would then swallow the change by
	// max. The record stays marked; AcceptWrites runs the pass.
	if !t.r.accepting.Load() {
		return nil
	}
	return t.reconcileRecord(k, rs)
}

// reconcileRecord runs the winner's duty on a record of the overlay.
func (t *txn) reconcileRecord(k rkey, rs *recState) error {
	var delta int64
	if k.isBudget() {
		delta = t.r.refundLoser(rs.rec)
		if delta != 0 {
			t.forwardLater(k.a[len(budgetRecordPrefix):])
		}
	} else {
		delta = t.r.reconcile(rs.rec, !k.keyed && t.blocked(k.b))
	}
	if delta != 0 {
		vk := k.vector()
		vs, err := t.vector(vk.kind, vk.item)
		if err != nil {
			return err
		}
		vs.cur = vs.cur.Add(t.r.self, delta)
		// Booked where the winning action is: the buckets end as if the
		// concurrent actions had happened one after the other.
		t.book(k.kind(), k.a, rs.rec.BookedMs(), delta)
		rs.dirty, rs.spread = true, true
		t.r.metrics.reconciled.Inc()
		if t.r.cfg.EventLog {
			e := storage.Event{Type: storage.EventReconcile, Kind: vk.kind, Key: vk.item, Count: 1, HLC: crdt.MakeHLC(t.nowMs, 0)}
			if k.keyed {
				e.Idem = k.b
			} else {
				e.User = k.b
			}
			e.P, e.N = halves(delta)
			t.logEvent(e)
		}
	}
	return nil
}

// reconcileMarked reconciles every record whose excess is not zero and
// whose origin is this replica: the pass recovery put off.
func (t *txn) reconcileMarked() error {
	var keys []rkey
	if err := t.r.store.Markers(func(item, user string, keyed bool) bool {
		keys = append(keys, rkey{item, user, keyed})
		return true
	}); err != nil {
		return err
	}
	for _, k := range keys {
		rs, err := t.record(k)
		if err != nil {
			return err
		}
		if err := t.reconcileRecord(k, rs); err != nil {
			return err
		}
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

package region

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Records: like records (item, user; crdt.LikeRecord), counters' keyed
// records (counter key, idempotency key; crdt.KeyedRecord) and budget
// spends (budget key, idempotency key; crdt.Spend). The three kinds share
// this overlay, the winner's duty (reconcileRecord) and the
// reconciliation markers.

// recordTxn is the batch's overlay of records.
type recordTxn struct {
	noHooks
	recs   map[rkey]*recState
	rorder []rkey // records in first-touch order, for deterministic writes
	// markers: the reconciliation markers the batch sets or clears, for
	// Replica.unreconciled once the commit is durable.
	markers []markerChange
}

// markerChange is a record's marker set (on) or cleared, counted against
// the vector the record counts in.
type markerChange struct {
	vec vkey
	on  bool
}

// rkey names a record: its kind, as the family of vectors its
// contributions count in (storage.Likes for a like record, Counters for a
// keyed record, Budgets for a spend), and its names: (item, user),
// (counter key, idempotency key) or (budget key, idempotency key).
type rkey struct {
	kind storage.Kind
	a, b string
}

func likeKey(item, user string) rkey    { return rkey{storage.Likes, item, user} }
func keyedKey(key, idem string) rkey    { return rkey{storage.Counters, key, idem} }
func spendKey(budget, idem string) rkey { return rkey{storage.Budgets, budget, idem} }

// idempotent reports whether the record is an idempotency key's (a keyed
// record or a spend), which expires.
func (k rkey) idempotent() bool { return k.kind != storage.Likes }

// vector is the vector the record's contributions count in.
func (k rkey) vector() vkey { return vkey{k.kind, k.a} }

type recState struct {
	// rec is the record, of the key's kind: *crdt.LikeRecord,
	// *crdt.KeyedRecord or *crdt.Spend (like, keyed and spend return it
	// typed).
	rec    crdt.Record
	orig   crdt.Record // committed record; nil if there was none
	origEx int64       // excess of orig
	dirty  bool
	spread bool // changed by a local action or own reconciliation
	// deleted: an expired keyed record or spend the commit deletes.
	deleted bool

	// When there was no like record, rec points at fresh, and
	// fresh.Contrib starts on contrib: a first like costs one allocation,
	// not three.
	fresh   crdt.LikeRecord
	contrib [1]crdt.Entry
}

// like, keyed and spend return the record of a like record's, a keyed
// record's or a spend's state.
func (s *recState) like() *crdt.LikeRecord   { return s.rec.(*crdt.LikeRecord) }
func (s *recState) keyed() *crdt.KeyedRecord { return s.rec.(*crdt.KeyedRecord) }
func (s *recState) spend() *crdt.Spend       { return s.rec.(*crdt.Spend) }

// record returns the overlay state of a record (zero if none). A keyed
// record or spend past the idempotency TTL reads as none: it is gone by
// rule wherever the sweeper has not deleted it yet.
func (t *txn) record(k rkey) (*recState, error) {
	if s, ok := t.recs[k]; ok {
		return s, nil
	}
	s := &recState{}
	var ok bool
	var err error
	switch k.kind {
	case storage.Likes:
		var rec *crdt.LikeRecord
		if rec, ok, err = t.r.store.LikeRecord(k.a, k.b); ok {
			// origEx is the excess the stored marker stands for: under
			// the committed flag, whatever this batch did to the flag so
			// far.
			s.orig, s.rec, s.origEx = rec, rec.Clone(), rec.ExcessBlocked(t.r.store.Flag(k.b).Value.Blocked)
		}
	case storage.Counters:
		var rec *crdt.KeyedRecord
		if rec, ok, err = t.r.store.KeyedRecord(k.a, k.b); ok {
			s.orig, s.rec, s.origEx = rec, rec.Clone(), rec.Excess()
		}
	case storage.Budgets:
		var rec *crdt.Spend
		if rec, ok, err = t.r.store.Spend(k.a, k.b); ok {
			s.orig, s.rec, s.origEx = rec, rec.Clone(), rec.Excess()
		}
	}
	if err != nil {
		return nil, err
	}
	switch {
	case ok && k.idempotent() && t.r.keyExpired(s.orig, t.nowMs):
		s.reset(k)
	case !ok:
		s.reset(k)
	}
	t.recs[k] = s
	t.rorder = append(t.rorder, k)
	return s, nil
}

// reset replaces the record by none, of k's kind. An expired keyed record
// or spend that is stored the commit deletes, unless the batch writes the
// key anew.
func (s *recState) reset(k rkey) {
	switch k.kind {
	case storage.Likes:
		s.fresh.Contrib = s.contrib[:0]
		s.rec = &s.fresh
	case storage.Counters:
		s.rec = &crdt.KeyedRecord{Contrib: s.contrib[:0]}
	case storage.Budgets:
		s.rec = &crdt.Spend{Contrib: s.contrib[:0]}
	}
	s.deleted = s.orig != nil
}

// ValidRecordName reports whether item names a record of rec's kind: an
// item or an item's part (crdt.PartName) for a like record (or BlockRecordItem, for a block flag), a counter
// key for a keyed record (or a crdt.ToggleName, for a keyed like action's
// record of the right shape), a budget key for a spend. Replication checks
// the names of the records it receives with it.
func ValidRecordName(item string, rec crdt.Record) bool {
	if _, like := rec.(*crdt.LikeRecord); like && item == BlockRecordItem {
		return true
	}
	if _, typ := rec.(*crdt.TypeMeta); typ || item == TypeRecordItem {
		return typ && item == TypeRecordItem
	}
	if _, like := rec.(*crdt.LikeRecord); like {
		return crdt.ValidItemName(item) // a hot item's part too
	}
	if kr, keyed := rec.(*crdt.KeyedRecord); keyed {
		if _, _, ok := crdt.ToggleItem(item); ok {
			// A keyed like action's: a register alone, which counts in
			// no vector.
			return kr.ValidToggleRecord()
		}
	}
	return crdt.ValidID(item)
}

// mergeRecord folds a peer's record into the overlay: a record of any
// kind, or a block flag in its record form.
func (t *txn) mergeRecord(m *RecordMerge) error {
	if m.Rec == nil || !ValidRecordName(m.Item, m.Rec) || !crdt.ValidID(m.User) {
		return fmt.Errorf("%w: bad record merge %q/%q", ErrInvalid, m.Item, m.User)
	}
	switch in := m.Rec.(type) {
	case *crdt.LikeRecord:
		if m.Item == BlockRecordItem {
			f, ok := crdt.FlagOfRecord(in)
			if !ok {
				return fmt.Errorf("%w: flag of %q is not a pure register", ErrInvalid, m.User)
			}
			return t.mergeFlag(m.User, f)
		}
		if done, err := t.chaosMergeByStamp(likeKey(m.Item, m.User), in); done { // never outside a chaos build
			return err
		}
		return mergeInto(t, likeKey(m.Item, m.User), in, (*recState).like)
	case *crdt.KeyedRecord:
		if done, err := t.chaosMergeFenceByStamp(keyedKey(m.Item, m.User), in); done { // never outside a chaos build
			return err
		}
		return mergeInto(t, keyedKey(m.Item, m.User), in, (*recState).keyed)
	case *crdt.Spend:
		if done, err := t.chaosMergeFenceByStamp(spendKey(m.Item, m.User), in); done { // never outside a chaos build
			return err
		}
		return mergeInto(t, spendKey(m.Item, m.User), in, (*recState).spend)
	case *crdt.TypeMeta:
		return t.mergeType(m.User, *in)
	}
	return fmt.Errorf("%w: record merge of %T", ErrInvalid, m.Rec)
}

// mergeable is what mergeInto asks of a kind of record.
type mergeable[R any] interface {
	crdt.Record
	Wins(R) bool
	Merge(R) bool
	Restrict(keep func(replica string) bool) (R, bool)
}

// mergeInto merges in, a record of k's kind, into its overlay state;
// typed returns that state's record.
func mergeInto[R mergeable[R]](t *txn, k rkey, in R, typed func(*recState) R) error {
	inHLC, inOrigin := in.Stamp()
	if k.idempotent() && t.r.keyExpired(in, t.nowMs) {
		// Gone by rule everywhere: taking it would bring it back.
		t.r.metrics.refusedExpiry.Inc()
		return nil
	}
	for _, e := range in.Contributions() {
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
	if inHLC.WallMs() > t.nowMs+maxClockDriftMs {
		t.r.metrics.refusedFuture.Inc()
		return fmt.Errorf("%w: record stamped %v, more than %v ahead of our clock", ErrInvalid, inHLC, maxClockDriftMs)
	}
	rs, err := t.record(k)
	if err != nil {
		return err
	}
	rec := typed(rs)
	if recHLC, _ := rec.Stamp(); k.idempotent() && inHLC == 0 && recHLC == 0 {
		// A contribution without the register that says when the key was
		// applied: stored alone, it could never expire. It waits for the
		// register (anti-entropy offers it again).
		t.r.metrics.refusedNoReg.Inc()
		return nil
	}
	self := t.r.self
	ownRaise := !rec.Contributions().Get(self).Covers(in.Contributions().Get(self))
	regRaise := inOrigin == self && in.Wins(rec)
	if t.r.accepting.Load() {
		// As for vectors: once writes are acknowledged, only this replica
		// raises its own contribution or writes registers in its name.
		if ownRaise || regRaise {
			t.r.metrics.refusedOwn.Inc()
			t.r.log.Warn("refused a peer's newer view of our own record", "item", k.a, "user", k.b)
			in, _ = in.Restrict(func(id string) bool { return id != self })
		}
	} else if ownRaise || regRaise {
		// Recovery: a peer knows an action this replica accepted and
		// the store forgot (a repeated like moves no vector, but its
		// register names us).
		t.stateLost = true
	}
	t.r.clock.Observe(inHLC)
	if !rec.Merge(in) {
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
	switch k.kind {
	case storage.Likes:
		delta = t.r.reconcileLike(rs.like(), t.blocked(k.b))
	case storage.Counters:
		delta = t.r.reconcileKeyed(rs.keyed())
	case storage.Budgets:
		var err error
		if delta, err = t.reconcileBudgetKey(k.a, rs.spend()); err != nil {
			return err
		}
		if delta != 0 {
			t.forwardLater(k.a)
		}
	}
	if delta != 0 {
		vk := k.vector()
		vs, err := t.vector(vk.kind, vk.item)
		if err != nil {
			return err
		}
		vs.cur = vs.cur.Add(t.r.self, delta)
		// Booked where the winning action is: the slots end as if the
		// concurrent actions had happened one after the other.
		t.book(k.kind, k.a, rs.rec.BookedMs(), delta)
		rs.dirty, rs.spread = true, true
		t.r.metrics.reconciled.Inc()
		if t.r.cfg.EventLog {
			e := storage.Event{Type: storage.EventReconcile, Kind: vk.kind, Key: vk.item, Count: 1, HLC: crdt.MakeHLC(t.nowMs, 0)}
			if k.idempotent() {
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
	if err := t.r.store.Markers(func(kind storage.Kind, a, b string) bool {
		keys = append(keys, rkey{kind, a, b})
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

// write adds the changed records, their like index entries and markers to
// the batch, and to ch the records whose new state must spread. Flags are
// written first (flagTxn): a record the batch did not change still moves
// when its user's flag did, and its marker follows.
func (rt *recordTxn) write(t *txn, ch *Changes) error {
	for _, k := range rt.rorder {
		rs := rt.recs[k]
		if rs.deleted && !rs.dirty {
			if k.kind == storage.Budgets {
				t.b.DeleteSpend(k.a, k.b, rs.orig.(*crdt.Spend))
			} else {
				t.b.DeleteKeyedRecord(k.a, k.b, rs.orig.(*crdt.KeyedRecord))
			}
			if rs.origEx != 0 {
				rt.markers = append(rt.markers, markerChange{k.vector(), false})
			}
			continue
		}
		if !rs.dirty {
			// A record the batch did not change still moves when its
			// user's flag did (blocks.go): its marker follows.
			if k.kind == storage.Likes && len(t.flags) > 0 && rs.orig != nil {
				if ex := t.excess(k, rs.rec); (ex != 0) != (rs.origEx != 0) {
					t.b.SetMarker(k.kind, k.a, k.b, ex != 0)
					rt.markers = append(rt.markers, markerChange{k.vector(), ex != 0})
				}
			}
			continue
		}
		switch k.kind {
		case storage.Likes:
			rec := rs.like()
			orig, _ := rs.orig.(*crdt.LikeRecord)
			t.b.PutLikeRecord(k.a, k.b, orig, rec)
			if was := orig != nil && orig.Liked; t.r.cfg.LikeLists && (rec.Liked != was || rec.Liked && rec.HLC != orig.HLC) && !t.r.chaosListsSkip(rs) {
				t.b.SetLiked(k.a, k.b, rec.Liked, rec.HLC)
			}
		case storage.Counters:
			orig, _ := rs.orig.(*crdt.KeyedRecord)
			t.b.PutKeyedRecord(k.a, k.b, orig, rs.keyed())
		case storage.Budgets:
			orig, _ := rs.orig.(*crdt.Spend)
			t.b.PutSpend(k.a, k.b, orig, rs.spend())
		}
		if ex := t.excess(k, rs.rec); (ex != 0) != (rs.origEx != 0) {
			t.b.SetMarker(k.kind, k.a, k.b, ex != 0)
			rt.markers = append(rt.markers, markerChange{k.vector(), ex != 0})
		}
		if rs.spread {
			// rs.rec is the txn's own copy and the txn ends here: it can
			// be handed over without another copy.
			ch.Records = append(ch.Records, RecordChange{Item: k.a, User: k.b, Rec: rs.rec})
		} else {
			ch.Merged++
		}
	}
	return nil
}

// publish counts the markers set and cleared in Replica.unreconciled.
func (rt *recordTxn) publish(t *txn) {
	if len(rt.markers) == 0 {
		return
	}
	t.r.umu.Lock()
	for _, m := range rt.markers {
		if m.on {
			t.r.unreconciled[m.vec]++
		} else if t.r.unreconciled[m.vec]--; t.r.unreconciled[m.vec] <= 0 {
			delete(t.r.unreconciled, m.vec)
		}
	}
	t.r.umu.Unlock()
}

package region

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Records: like records (item, user) and keyed records (counter or
// budget key, idempotency key), both crdt.LikeRecord. Like records, counters'
// idempotency keys and budget spends' share this overlay, the winner's duty
// (reconcileRecord) and the reconciliation markers.

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

// write adds the changed records, their like index entries and markers to
// the batch, and to ch the records whose new state must spread. Flags are
// written first (flagTxn): a record the batch did not change still moves
// when its user's flag did, and its marker follows.
func (rt *recordTxn) write(t *txn, ch *Changes) error {
	for _, k := range rt.rorder {
		rs := rt.recs[k]
		if rs.deleted && !rs.dirty {
			t.b.DeleteKeyedRecord(k.a, k.b, rs.orig)
			if rs.origEx != 0 {
				rt.markers = append(rt.markers, markerChange{k.vector(), false})
			}
			continue
		}
		if !rs.dirty {
			// A record the batch did not change still moves when its
			// user's flag did (blocks.go): its marker follows.
			if !k.keyed && len(t.flags) > 0 && rs.orig != nil {
				if ex := t.excess(k, rs.rec); (ex != 0) != (rs.origEx != 0) {
					t.b.SetMarker(k.a, k.b, false, ex != 0)
					rt.markers = append(rt.markers, markerChange{k.vector(), ex != 0})
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

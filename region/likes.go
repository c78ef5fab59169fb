package region

import (
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Likes: a user's like, unlike or toggle of an item, a like record
// counting in the item's vector. The record's register is ordered by the
// action's time, the client's if it gave one (crdt.LikeRecord.Wins), and
// the writer decides every action by that order (crdt.LikeRecord.Decide).

func (t *txn) applyLike(item, user string, liked bool, at int64) Result {
	rs, vs, hlc, res, ok := t.likeState(item, user)
	if !ok {
		return res
	}
	return t.decideLike(item, user, rs, vs, crdt.Action{Liked: liked, HLC: hlc, At: at})
}

// applyToggle flips the user's state as this replica sees it, in one step
// of the writer. A toggle carrying the idempotency key of the toggle that
// wrote the register is a duplicate: it answers the state that toggle
// decided and changes nothing.
func (t *txn) applyToggle(op *Op) Result {
	rs, vs, hlc, res, ok := t.likeState(op.Item, op.User)
	if !ok {
		return res
	}
	rec := rs.like()
	if op.IdemKey != "" && rec.Idem == op.IdemKey && !t.r.chaosToggleTwice() {
		return Result{Liked: rec.Liked, Duplicate: true, Value: vs.cur.Value()}
	}
	// Ordered right after the state it flips, so it wins here, and so
	// everywhere.
	return t.decideLike(op.Item, op.User, rs, vs, crdt.Action{Liked: !rec.Liked, HLC: hlc, At: rec.ToggleAt(hlc), Idem: op.IdemKey})
}

// likeState loads what a like, unlike or toggle of (item, user) needs: the
// record, the item's vector and a fresh HLC above the record's. ok is
// false, with res the refusal, if the action cannot be applied.
func (t *txn) likeState(item, user string) (rs *recState, vs *vecState, hlc crdt.HLC, res Result, ok bool) {
	if t.blocked(user) {
		t.r.metrics.refusedBlocked.Inc()
		return nil, nil, 0, Result{Err: ErrBlocked}, false
	}
	rs, err := t.record(likeKey(item, user))
	if err != nil {
		return nil, nil, 0, Result{Err: err}, false
	}
	vs, err = t.vector(storage.Likes, item)
	if err != nil {
		return nil, nil, 0, Result{Err: err}, false
	}
	hlc = t.r.clock.Now(t.nowMs)
	if rec := rs.like(); hlc <= rec.HLC {
		// The record holds a stamp our clock has not caught up with (it
		// was written while the clock ran ahead, see load). An action
		// without a client time must still win over it, or it would be
		// reverted.
		hlc = rec.HLC + 1
	}
	return rs, vs, hlc, Result{}, true
}

// decideLike applies action a to the record if it wins over it (an action
// older by its client's time than the state it finds changes nothing and
// answers that state), and answers the user's state and the item's count.
func (t *txn) decideLike(item, user string, rs *recState, vs *vecState, a crdt.Action) Result {
	rec := rs.like()
	// A like moves the count by at most the number of replicas, so unlike
	// increments it needs no overflow check.
	applied, changed, delta := rec.Decide(t.r.self, a)
	if !applied {
		return Result{Liked: rec.Liked, Value: vs.cur.Value()}
	}
	vs.cur = vs.cur.Add(t.r.self, delta)
	t.book(storage.Likes, item, rec.BookedMs(), delta)
	if t.r.cfg.EventLog {
		typ := storage.EventUnlike
		if a.Liked {
			typ = storage.EventLike
		}
		p, n := halves(delta)
		t.logEvent(storage.Event{Type: typ, Kind: storage.Likes, Key: item, User: user, P: p, N: n, Count: 1, HLC: a.HLC})
	}
	// Only a user's first like of an item takes a number: a like after an
	// unlike counts again, but taking a number for it would let one user
	// toggling like/unlike burn numbers, and milestones, without bound.
	// (Concurrent first likes in several regions may each take one, at
	// most one per replica.)
	if delta > 0 && rec.Additions() == 1 {
		if len(t.r.nums) > 0 {
			t.countLike(item, user)
		}
	}
	rs.dirty, rs.spread = true, true
	return Result{Liked: a.Liked, Changed: changed, Value: vs.cur.Value()}
}

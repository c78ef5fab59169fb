package region

import "github.com/tally-dev/tally/storage"

// Likes: a user's like or unlike of an item, a like record counting in the
// item's vector.

func (t *txn) applyLike(item, user string, liked bool, at int64) Result {
	if t.blocked(user) {
		t.r.metrics.refusedBlocked.Inc()
		return Result{Err: ErrBlocked}
	}
	rs, err := t.record(likeKey(item, user))
	if err != nil {
		return Result{Err: err}
	}
	vs, err := t.vector(storage.Likes, item)
	if err != nil {
		return Result{Err: err}
	}
	rec := rs.like()
	hlc := t.r.clock.Now(t.nowMs)
	if hlc <= rec.HLC {
		// The record holds a stamp our clock has not caught up with (it
		// was written while the clock ran ahead, see load). The action
		// must still win over it, or it would be reverted.
		hlc = rec.HLC + 1
	}
	// A like moves the count by at most the number of replicas, so unlike
	// increments it needs no overflow check.
	changed, delta := rec.Apply(t.r.self, liked, hlc)
	rec.At = at
	vs.cur = vs.cur.Add(t.r.self, delta)
	t.book(storage.Likes, item, rec.BookedMs(), delta)
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
	if delta > 0 && rec.Additions() == 1 {
		if len(t.r.nums) > 0 {
			t.countLike(item, user)
		}
	}
	rs.dirty, rs.spread = true, true
	return Result{Liked: liked, Changed: changed, Value: vs.cur.Value()}
}

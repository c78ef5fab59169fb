package region

import (
	"context"
	"fmt"
	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Likes is the replica's face for likes: a user's like or unlike of an item,
// the item's count, a user's like state, record and history.
type Likes struct{ r *Replica }

// Likes returns the replica's likes face.
func (r *Replica) Likes() Likes { return Likes{r} }

// Likes: a user's like, unlike or toggle of an item, a like record
// counting in the item's vector. The record's register is ordered by the
// action's time, the client's if it gave one (crdt.LikeRecord.Wins), and
// the writer decides every action by that order (crdt.LikeRecord.Decide).

// applyLike is a like or unlike of op.Item by op.User: an action of the
// client's time (op.At) if it gave one. With an idempotency key it is
// applied at most once (keyedAction).
func (t *txn) applyLike(op *Op) Result {
	rs, vs, hlc, res, ok := t.likeState(op.Item, op.User)
	if !ok {
		return res
	}
	ks, res, dup := t.keyedAction(op, vs)
	if dup {
		return res
	}
	res = t.decideLike(op.Item, op.User, rs, vs, crdt.Action{Liked: op.Kind == OpLike, HLC: hlc, At: op.At})
	t.rememberAction(ks, hlc, res)
	return res
}

// applyToggle flips the user's state as this replica sees it, in one step
// of the writer. With an idempotency key it is applied at most once
// (keyedAction): a retry answers the state the toggle left and changes
// nothing.
func (t *txn) applyToggle(op *Op) Result {
	rs, vs, hlc, res, ok := t.likeState(op.Item, op.User)
	if !ok {
		return res
	}
	rec := rs.like()
	ks, res, dup := t.keyedAction(op, vs)
	if dup {
		return res
	}
	// The register of the like record holds the key of the toggle that
	// wrote it (crdt.LikeRecord.Idem): a record a version without keyed
	// action records wrote says so there alone.
	if op.IdemKey != "" && rec.Idem == op.IdemKey && !t.r.chaosToggleTwice() {
		return Result{Liked: rec.Liked, Duplicate: true, Value: vs.cur.Value()}
	}
	// Ordered right after the state it flips, so it wins here, and so
	// everywhere.
	res = t.decideLike(op.Item, op.User, rs, vs, crdt.Action{Liked: !rec.Liked, HLC: hlc, At: rec.ToggleAt(hlc), Idem: op.IdemKey})
	t.rememberAction(ks, hlc, res)
	return res
}

// keyedAction looks up the record of a like, unlike or toggle's
// idempotency key (crdt.ToggleName of its item and user, and the key),
// which remembers the action's application for as long as keyed records
// are kept (Config.IdempotencyTTL), however many actions of the user
// came after it. If the key was applied, here or at a replica this one
// heard from, dup is true and res answers the state that application
// left, with the item's count now. Without a key it reads nothing: an
// unkeyed like costs no lookup.
func (t *txn) keyedAction(op *Op, vs *vecState) (ks *recState, res Result, dup bool) {
	if op.IdemKey == "" {
		return nil, Result{}, false
	}
	ks, err := t.record(keyedKey(crdt.ToggleName(op.Item, op.User), op.IdemKey))
	if err != nil {
		return nil, Result{Err: err}, true
	}
	if liked, ok := ks.keyed().ToggleOutcome(); ok && !t.r.chaosToggleTwice() {
		return nil, Result{Liked: liked, Duplicate: true, Value: vs.cur.Value()}, true
	}
	return ks, Result{}, false
}

// rememberAction writes the outcome of a keyed like action into its
// record ks (nil: the action had no key), stamped with the action's hlc,
// so that it expires IdempotencyTTL after it.
func (t *txn) rememberAction(ks *recState, hlc crdt.HLC, res Result) {
	if ks == nil || res.Err != nil {
		return
	}
	ks.keyed().SetToggleOutcome(t.r.self, hlc, res.Liked)
	ks.dirty, ks.spread, ks.deleted = true, true, false
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

// LikeState is a user's like of an item as this replica sees it.
type LikeState struct {
	Liked bool
	// HLC and Origin are the winning like or unlike's stamp and the
	// replica that accepted it (zero if the user never liked the item).
	HLC    crdt.HLC
	Origin string
}

// Like marks item liked by user.
func (l Likes) Like(ctx context.Context, item, user string) (Result, error) {
	return l.r.do1(ctx, Op{Kind: OpLike, Item: item, User: user})
}

// Unlike marks item not liked by user.
func (l Likes) Unlike(ctx context.Context, item, user string) (Result, error) {
	return l.r.do1(ctx, Op{Kind: OpUnlike, Item: item, User: user})
}

// Count reads an item's like count.
func (l Likes) Count(item string) (Read, error) { return l.r.read(storage.Likes, item) }

// Liked reports whether user likes item in this replica's view.
func (l Likes) Liked(item, user string) (bool, error) {
	r := l.r
	st, err := r.Likes().State(item, user)
	return st.Liked, err
}

// State returns user's like state of item in this replica's view.
func (l Likes) State(item, user string) (LikeState, error) {
	r := l.r
	if !crdt.ValidItemName(item) || !crdt.ValidID(user) {
		return LikeState{}, fmt.Errorf("%w: bad id", ErrInvalid)
	}
	if err := r.Err(); err != nil {
		return LikeState{}, err // see read
	}
	rec, ok, err := r.store.LikeRecord(item, user)
	if err != nil || !ok {
		return LikeState{}, err
	}
	return LikeState{Liked: rec.Liked, HLC: rec.HLC, Origin: rec.Origin}, nil
}

// Record returns a user's like record as this replica sees it.
func (l Likes) Record(item, user string) (*crdt.LikeRecord, bool, error) {
	return l.r.store.LikeRecord(item, user)
}

// History returns the likes and unlikes of (item, user) this replica
// accepted (its own only), oldest first: the newest limit of them.
func (l Likes) History(item, user string, limit int) ([]storage.Action, error) {
	r := l.r
	if !r.cfg.EventLog {
		return nil, fmt.Errorf("%w: the like history needs it", ErrNoLog)
	}
	if !crdt.ValidItemName(item) || !crdt.ValidID(user) || limit < 1 || limit > MaxHistory { // an item, or a split item's part
		return nil, fmt.Errorf("%w: history of %q/%q, limit %d", ErrInvalid, item, user, limit)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	return r.store.History(item, user, limit)
}

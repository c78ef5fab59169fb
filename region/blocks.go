package region

import (
	"context"
	"errors"
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// The block list: a per-user flag (crdt.Flag), replicated like any
// record. A blocked user's likes do not count: each of the user's like
// records has the excess d = Σ Contrib − (Liked && !blocked ? 1 : 0), and
// its winner brings d to zero whenever its view of the record or of the
// flag changes. So when a flag's blocked state changes here (a local block
// or unblock, or a merged one), the writer reconciles, in the same batch,
// every record of the user this replica is the winner of, and re-marks
// every record of the user whose excess moved in its view (the marker
// keeps reads approx until the winner's correction arrives).
//
// The records of a user whose likes a flag moves are the ones liked in
// this replica's view: an unliked record's target is 0 either way. The
// like index (z/<user>/<item>) lists exactly those; without it
// (Config.LikeLists off) the writer scans every record, which stalls it
// for as long as the scan takes.

// BlockRecordItem is the record name a flag travels under between
// replicas: a flag is sent as the register-only like record
// crdt.FlagRecord of (BlockRecordItem, user), so the fast path,
// anti-entropy pages and provenance cuts carry it as any record's
// register. No item can be named so ('!' is not an id byte).
const BlockRecordItem = "!"

// ErrBlocked: the user is blocked in this replica's view; their likes and
// unlikes are refused.
var ErrBlocked = errors.New("region: user is blocked")

// flagTxn is the batch's overlay of block flags.
type flagTxn struct {
	noHooks
	flags map[string]*flagState
}

// flagKind: a flag travels as a register-only like record
// (crdt.FlagRecord).
func flagKind() regKind[crdt.Block] {
	return regKind[crdt.Block]{what: "block flag", logKey: "user", item: BlockRecordItem,
		put:    func(t *txn, user string, old, cur crdt.Flag) { t.b.PutFlag(user, old, cur) },
		record: func(f crdt.Flag) crdt.Record { return crdt.FlagRecord(f) }}
}

// write adds the changed flags to the batch, and to ch those this replica
// set.
func (ft *flagTxn) write(t *txn, ch *Changes) error {
	writeRegisters(t, ch, flagKind(), ft.flags)
	return nil
}

// flagState is the overlay of one user's flag.
type flagState = regState[crdt.Block]

// flag returns the overlay state of user's flag, loading it on first
// touch.
func (t *txn) flag(user string) *flagState {
	if fs, ok := t.flags[user]; ok {
		return fs
	}
	f := t.r.store.Flag(user)
	fs := &flagState{orig: f, cur: f}
	if t.flags == nil {
		t.flags = make(map[string]*flagState)
	}
	t.flags[user] = fs
	return fs
}

// blocked reports whether user is blocked in the overlay's view.
func (t *txn) blocked(user string) bool {
	if fs, ok := t.flags[user]; ok {
		return fs.cur.Value.Blocked
	}
	return t.r.store.Flag(user).Value.Blocked
}

// excess is a record's excess in the overlay's view (a like record's
// under its user's flag).
func (t *txn) excess(k rkey, rec crdt.Record) int64 {
	if like, ok := rec.(*crdt.LikeRecord); ok {
		return like.ExcessBlocked(t.blocked(k.b))
	}
	return rec.Excess()
}

// applyBlock sets user's flag at this replica: a fresh stamp, origin self.
func (t *txn) applyBlock(user string, blocked bool) Result {
	fs := t.flag(user)
	changed := setRegister(t, fs, crdt.Block{Blocked: blocked})
	if changed {
		if err := t.flagChanged(user, true); err != nil {
			return Result{Err: err}
		}
	}
	return Result{Changed: changed, Flag: fs.cur}
}

// mergeFlag folds a peer's flag in.
func (t *txn) mergeFlag(user string, in crdt.Flag) error {
	fs := t.flag(user)
	was := fs.cur.Value.Blocked
	if merged, err := mergeRegister(t, flagKind(), user, fs, in); !merged || fs.cur.Value.Blocked == was {
		return err
	}
	return t.flagChanged(user, !t.r.chaosBlockNotReconciled())
}

// flagChanged loads every record of user whose excess the flag moves, so
// that the commit re-marks it, and, if reconcile and this replica
// acknowledges writes, runs the winner's duty on each (while recovering,
// the pass AcceptWrites runs reconciles the marked ones instead).
func (t *txn) flagChanged(user string, reconcile bool) error {
	var keys []rkey
	for _, k := range t.rorder { // records this batch touched already
		if k.kind == storage.Likes && k.b == user {
			keys = append(keys, k)
		}
	}
	err := t.r.likedItems(user, func(item string) {
		if _, ok := t.recs[likeKey(item, user)]; !ok {
			keys = append(keys, likeKey(item, user))
		}
	})
	if err != nil {
		return fmt.Errorf("records of blocked user %s: %w", user, err)
	}
	for _, k := range keys {
		rs, err := t.record(k)
		if err != nil {
			return err
		}
		if reconcile && t.r.accepting.Load() {
			if err := t.reconcileRecord(k, rs); err != nil {
				return err
			}
		}
	}
	return nil
}

// likedItems calls fn with every item user likes in committed state: from
// the like index, or by a scan of every record without it.
func (r *Replica) likedItems(user string, fn func(item string)) error {
	if !r.cfg.LikeLists {
		r.log.Warn("like lists are off: scanning every record for a changed block flag", "user", user)
		return r.store.LikeRecordsOfUser(user, func(item string, rec *crdt.LikeRecord) {
			if rec.Liked {
				fn(item)
			}
		})
	}
	after := ""
	for {
		page, more, err := r.store.LikedItems(user, after, MaxListLimit)
		if err != nil {
			return err
		}
		for _, l := range page {
			fn(l.ID)
		}
		if !more {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// Block blocks (blocked) or unblocks user at this replica and returns the
// user's flag after it.
func (a Admin) Block(ctx context.Context, user string, blocked bool) (Result, error) {
	r := a.r
	kind := OpUnblock
	if blocked {
		kind = OpBlock
	}
	return r.do1(ctx, Op{Kind: kind, User: user})
}

// Flag returns user's block flag as this replica sees it (the zero Flag if
// the user was never blocked).
func (a Admin) Flag(user string) (crdt.Flag, error) {
	r := a.r
	if !crdt.ValidID(user) {
		return crdt.Flag{}, fmt.Errorf("%w: bad user %q", ErrInvalid, user)
	}
	if err := r.Err(); err != nil {
		return crdt.Flag{}, err // see read
	}
	return r.store.Flag(user), nil
}

// Flags lists up to limit users' flags in user order after the user id
// after ("" from the first), blocked users only if blockedOnly; more
// reports whether any follow.
func (a Admin) Flags(after string, limit int, blockedOnly bool) ([]storage.Flagged, bool, error) {
	r := a.r
	if after != "" && !crdt.ValidID(after) {
		return nil, false, fmt.Errorf("%w: bad id", ErrInvalid)
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, false, fmt.Errorf("%w: limit %d: want 1..%d", ErrInvalid, limit, MaxListLimit)
	}
	if err := r.Err(); err != nil {
		return nil, false, err
	}
	out, more := r.store.Flags(after, limit, blockedOnly)
	return out, more, nil
}

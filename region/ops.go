package region

import (
	"errors"
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Errors returned by Replica methods. Callers match them with errors.Is.
var (
	// ErrClosed: the replica is shut down.
	ErrClosed = errors.New("region: replica closed")
	// ErrNotReady: the replica is recovering its own entries from peers and
	// does not acknowledge writes yet.
	ErrNotReady = errors.New("region: not accepting writes yet")
	// ErrFailed: a commit failed; the replica stopped writing to protect
	// what it has acknowledged. Restart it.
	ErrFailed = errors.New("region: storage failed")
	// ErrIDConflict: another process runs with this replica's id; this
	// one stopped (Replica.Stop) so the two do not overwrite each
	// other's entries.
	ErrIDConflict = errors.New("region: another process holds this replica id")
	// ErrOverflow: the operation would push this replica's entry of a key
	// past EntryCap. The cap rises with time: a smaller change, or the
	// same one a little later, can be applied.
	ErrOverflow = errors.New("region: counter would overflow")
	// ErrNotHeld: a write of a key on a shard this replica does not hold
	// (Config.Holds); nothing was applied. A holder of the shard takes it.
	ErrNotHeld = errors.New("region: key is on a shard this replica does not hold")
	// ErrInvalid: the operation is malformed (bad id, zero kind, ...).
	ErrInvalid = errors.New("region: invalid operation")
	// ErrIdempotencyMismatch: an increment reused an idempotency key that
	// was applied with another amount. Nothing is applied; the key's first
	// request stands.
	ErrIdempotencyMismatch = errors.New("region: idempotency key reused for a different request")
	// ErrFenced: a spend, increment or cashback under an idempotency key
	// that a cross-shard cashback called off (OpFence, OpCallOff). Nothing
	// is applied; the purchase under that key stays refused.
	ErrFenced = errors.New("region: the purchase under this idempotency key was refused and called off")
	// ErrNoLists: the like lists are off (Config.LikeLists).
	ErrNoLists = errors.New("region: like lists are off")
	// ErrNoLog: the event log is off (Config.EventLog).
	ErrNoLog = errors.New("region: the event log is off")
)

// MaxEntry bounds each half of a replica's vector entry (2^62): no entry
// past it is merged. A replica's own value P − N is always inside int64;
// sums over several replicas are kept in 128 bits and saturate at the
// int64 range (crdt.Vector.Value), which entries that grow at most as
// EntryCap allows cannot reach before the 2160s.
const MaxEntry = 1 << 62

// How fast a replica's own entries may grow (EntryCap): freely up to
// FreeEntry, then by EntryRatePerMs for every millisecond since
// EntryEpochMs, up to MaxEntry.
const (
	FreeEntry      = 1 << 53
	EntryRatePerMs = 1 << 20       // about 10^9 a second
	EntryEpochMs   = 1735689600000 // 2025-01-01T00:00:00Z
)

// EntryCap is the most either half of this replica's own entry of any
// key may hold at wall time nowMs: FreeEntry before EntryEpochMs, then
// rising by EntryRatePerMs a millisecond, and MaxEntry from about 2164 on.
//
// Halves only grow, so a fixed cap could be reached once (8,192
// increments of MaxBy reach 2^53) and would then refuse every increment
// of that key for good. A cap that rises with time can be caught up
// with, but then refuses only what outruns it: a +1 fits again within a
// millisecond, MaxBy within about 17 minutes, and nothing is refused
// once the burst stops. Reaching MaxEntry takes until the cap gets there, about
// 139 years after EntryEpochMs, however fast the writes come. The clock
// is the replica's (Replica.Now), with steps taken out.
func EntryCap(nowMs int64) uint64 {
	if nowMs <= EntryEpochMs {
		return FreeEntry
	}
	ms := uint64(nowMs - EntryEpochMs)
	if ms >= (MaxEntry-FreeEntry)/EntryRatePerMs {
		return MaxEntry
	}
	return FreeEntry + ms*EntryRatePerMs
}

// MaxBy bounds the size of one increment.
const MaxBy = 1 << 40

// OpKind says what a local operation does.
type OpKind uint8

const (
	// OpLike marks Item liked by User, at most once per IdemKey if set
	// (likes.go: a retry answers the state the like left, whatever the
	// user did since, for as long as keyed records are kept).
	OpLike OpKind = iota + 1
	// OpUnlike marks Item not liked by User, at most once per IdemKey if
	// set, as OpLike.
	OpUnlike
	// OpIncr adds By to counter Item, at most once per IdemKey if set.
	OpIncr
	// OpUniques adds IDs to the unique count of Item (uniques.go).
	OpUniques
	// OpGrant adds By to budget Item (budgets.go).
	OpGrant
	// OpSpend takes By from budget Item if this replica holds the rights
	// to it, at most once per IdemKey if set (budgets.go).
	OpSpend
	// OpCashback spends By from budget Item and from budget Merchant (the
	// merchant's balance, spent like any budget: only rights this replica
	// holds) and adds it to counter User, once per IdemKey (required),
	// all or nothing (budgets.go).
	OpCashback
	// OpBlock blocks User (blocks.go): their likes stop counting and
	// their likes and unlikes are refused. Item is not used.
	OpBlock
	// OpUnblock unblocks User: their likes count again.
	OpUnblock
	// OpToggle flips User's like of Item as this replica sees it: a like
	// if not liked, else an unlike, decided in one step of the writer, at
	// most once per IdemKey if set, as OpLike (likes.go). It takes no At.
	OpToggle
	// OpType registers event type Item, or updates it, with Meta's owner,
	// status and description (types.go).
	OpType
	// OpFence closes budget Item's idempotency key IdemKey to spends, for
	// a cashback carried across shards (package purchase) that was
	// refused and is being called off: if a spend of By under the key was
	// applied already, it answers Duplicate and changes nothing (the
	// purchase goes on); otherwise it records the key as used with
	// nothing spent, so no spend under it ever applies (ErrFenced), here
	// or at any replica that merges the record.
	OpFence
	// OpCallOff calls off budget Item's idempotency key IdemKey, for a
	// cross-shard cashback that was called off: its record becomes a
	// fence whatever was applied under it, here or anywhere (a fence
	// beats every application, crdt.KeyedRecord.Fence), and every spend
	// under the key is given back. A retry answers Duplicate.
	OpCallOff
	// OpCallOffCredit is OpCallOff for counter Item's key IdemKey: the
	// increment applied under it, here or anywhere, is taken back.
	OpCallOffCredit

	numOpKinds = OpCallOffCredit + 1
)

func (k OpKind) String() string {
	switch k {
	case OpLike:
		return "like"
	case OpUnlike:
		return "unlike"
	case OpIncr:
		return "incr"
	case OpUniques:
		return "uniques"
	case OpGrant:
		return "grant"
	case OpSpend:
		return "spend"
	case OpCashback:
		return "cashback"
	case OpBlock:
		return "block"
	case OpUnblock:
		return "unblock"
	case OpToggle:
		return "toggle"
	case OpType:
		return "type"
	case OpFence:
		return "fence"
	case OpCallOff:
		return "call_off"
	case OpCallOffCredit:
		return "call_off_credit"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one local operation. Item is the item for likes and the counter key
// for increments.
type Op struct {
	Kind    OpKind
	Item    string
	User    string
	By      int64
	IdemKey string
	// At is when the event happened by its client, in unix ms (zero: now,
	// by the replica's clock). It must be within WindowConfig.Past and
	// Future of the replica's clock; the event is booked into the time
	// slots of that moment.
	At int64
	// IDs are the ids an OpUniques adds (1 to MaxUniqueIDs).
	IDs []string
	// Merchant is the budget an OpCashback takes By from, besides Item
	// (User is the counter it adds By to).
	Merchant string
	// Meta is an OpType's owner, status and description (its stamp and
	// origin are the writer's): a pointer, so that the ops of a batch,
	// which never carry one otherwise, stay small.
	Meta *crdt.TypeMeta
	// Import: a backfilled event (a like, unlike, increment or unique
	// add) whose At may be any time in the past, however old: it is
	// counted in the totals and booked in the slots of every level that
	// still keeps that time (flushBookings skips the others). At is still
	// bounded by WindowConfig.Future.
	Import bool
}

// Validate checks ids and bounds.
func (o *Op) Validate() error {
	if o.Kind == OpBlock || o.Kind == OpUnblock {
		if !crdt.ValidID(o.User) {
			return fmt.Errorf("%w: bad user %q", ErrInvalid, o.User)
		}
		return nil
	}
	if o.Import && o.Kind != OpLike && o.Kind != OpUnlike && o.Kind != OpIncr && o.Kind != OpUniques {
		return fmt.Errorf("%w: only likes, unlikes, increments and unique adds are imported, not %s", ErrInvalid, o.Kind)
	}
	if o.Kind == OpType {
		if !crdt.ValidID(o.Item) {
			return fmt.Errorf("%w: bad type name %q", ErrInvalid, o.Item)
		}
		if o.Meta == nil {
			return fmt.Errorf("%w: a type needs its metadata", ErrInvalid)
		}
		if why := crdt.ValidTypeTexts(o.Meta.Value.Owner, o.Meta.Value.Status, o.Meta.Value.Description); why != "" {
			return fmt.Errorf("%w: %s", ErrInvalid, why)
		}
		return nil
	}
	if o.Kind == OpLike || o.Kind == OpUnlike || o.Kind == OpToggle {
		if !crdt.ValidItemName(o.Item) { // a hot item's part too
			return fmt.Errorf("%w: bad item %q", ErrInvalid, o.Item)
		}
	} else if !crdt.ValidID(o.Item) {
		return fmt.Errorf("%w: bad item or key %q", ErrInvalid, o.Item)
	}
	switch o.Kind {
	case OpLike, OpUnlike:
		switch {
		case !crdt.ValidID(o.User):
			return fmt.Errorf("%w: bad user %q", ErrInvalid, o.User)
		case o.IdemKey != "" && !crdt.ValidID(o.IdemKey):
			return fmt.Errorf("%w: bad idempotency key %q", ErrInvalid, o.IdemKey)
		}
	case OpToggle:
		switch {
		case !crdt.ValidID(o.User):
			return fmt.Errorf("%w: bad user %q", ErrInvalid, o.User)
		case o.IdemKey != "" && !crdt.ValidID(o.IdemKey):
			return fmt.Errorf("%w: bad idempotency key %q", ErrInvalid, o.IdemKey)
		case o.At != 0:
			// It flips the state it finds, so it is ordered right after
			// it: a time of the client's would order it elsewhere.
			return fmt.Errorf("%w: a toggle takes no client time", ErrInvalid)
		}
	case OpIncr:
		if o.By > MaxBy || o.By < -MaxBy {
			return fmt.Errorf("%w: by %d outside ±%d", ErrInvalid, o.By, int64(MaxBy))
		}
		if o.IdemKey != "" && !crdt.ValidID(o.IdemKey) {
			return fmt.Errorf("%w: bad idempotency key %q", ErrInvalid, o.IdemKey)
		}
	case OpGrant, OpSpend, OpCashback, OpFence, OpCallOff, OpCallOffCredit:
		if o.By < 1 || o.By > MaxBy {
			return fmt.Errorf("%w: by %d outside 1..%d", ErrInvalid, o.By, int64(MaxBy))
		}
		switch {
		case (o.Kind == OpCashback || o.Kind == OpFence || o.Kind == OpCallOff || o.Kind == OpCallOffCredit) && o.IdemKey == "":
			return fmt.Errorf("%w: a %s needs an idempotency key", ErrInvalid, o.Kind)
		case o.IdemKey != "" && !crdt.ValidID(o.IdemKey):
			return fmt.Errorf("%w: bad idempotency key %q", ErrInvalid, o.IdemKey)
		}
		if o.Kind == OpCashback {
			if !crdt.ValidID(o.Merchant) || !crdt.ValidID(o.User) {
				return fmt.Errorf("%w: bad merchant %q or user %q", ErrInvalid, o.Merchant, o.User)
			}
			if o.Merchant == o.User {
				return fmt.Errorf("%w: merchant and user are the same balance %q", ErrInvalid, o.User)
			}
			if o.Merchant == o.Item {
				return fmt.Errorf("%w: merchant and budget are the same budget %q", ErrInvalid, o.Item)
			}
		}
	case OpUniques:
		if len(o.IDs) == 0 || len(o.IDs) > MaxUniqueIDs {
			return fmt.Errorf("%w: %d ids, want 1 to %d", ErrInvalid, len(o.IDs), MaxUniqueIDs)
		}
		for _, id := range o.IDs {
			if !crdt.ValidID(id) {
				return fmt.Errorf("%w: bad id %q", ErrInvalid, id)
			}
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrInvalid, o.Kind)
	}
	return nil
}

// Result is the outcome of one Op.
type Result struct {
	Err error
	// Liked is the user's state after a like, unlike or toggle: after a
	// like or unlike older by its client's time than the state it found
	// (which it does not change), that state.
	Liked bool
	// Changed: a like, unlike or toggle changed the user's state in this
	// replica's view.
	Changed bool
	// Value is the item's count or the counter's value after the op.
	Value int64
	// Duplicate: an increment whose idempotency key was already applied, at
	// this replica or one it heard from; Value is the counter's current
	// value. For a like, unlike or toggle: its key was applied (here or
	// at a replica this one heard from, within the idempotency TTL);
	// Liked is the state that application left, Value the item's count
	// now.
	Duplicate bool
	// Approx: the increment is of an approximate counter (Config.Approx).
	// Counted is what it counted: a multiple of the counter's step, often
	// nothing (then the replica wrote nothing for it), By on average.
	// Zero for a duplicate.
	Approx  bool
	Counted int64
	// Rights is what this replica holds of a budget after a grant, spend
	// or cashback (Value is the budget's remaining, as seen here).
	Rights int64
	// Merchant and UserValue are a cashback's two balances after it (the
	// merchant's budget's remaining as seen here, the user's counter).
	Merchant, UserValue int64
	// Refused names the budget a refused cashback could not cover when it
	// is the merchant's ("" when it is the pool, Item): then Value and
	// Rights are the merchant's.
	Refused string
	// Flag is the user's block flag after a block or unblock (Changed:
	// the blocked state changed in this replica's view).
	Flag crdt.Flag
	// Meta is a type's metadata after an OpType (Changed: its texts
	// changed in this replica's view).
	Meta *crdt.TypeMeta
}

// VectorMerge carries a remote view of a vector to merge by max.
type VectorMerge struct {
	Kind storage.Kind
	Item string
	Vec  crdt.Vector
}

// RecordMerge carries a remote record to merge: a like record of (Item,
// User), a keyed record of (counter key, idempotency key), a spend of
// (budget key, idempotency key), or a block flag in its record form (Item
// BlockRecordItem, crdt.FlagRecord).
type RecordMerge struct {
	Item, User string
	Rec        crdt.Record
}

// Changes is what one commit changed, handed to replication.
type Changes struct {
	// Vectors whose own entry changed, with its new absolute value.
	Vectors []VectorChange
	// Records changed by a local action or by this replica's reconciliation,
	// so their new state must spread, and block flags this replica set (as
	// the register-only record of (BlockRecordItem, user)). Each Rec is a
	// private copy.
	Records []RecordChange
	// Sketches are the pages of this replica's own unique-count sketches
	// that changed, with their new absolute registers.
	Sketches []SketchChange
	// Merged counts records changed by merges only (nothing new to spread).
	Merged int
	// Asks are requests for budget rights to send to the peers.
	Asks []RightsAsk
}

// VectorChange is a replica's new own entry of one vector.
type VectorChange struct {
	Kind storage.Kind
	Item string
	Own  crdt.PN
}

// RecordChange is a record's new state, named as in RecordMerge.
type RecordChange struct {
	Item, User string
	Rec        crdt.Record
}

// Empty reports whether c carries nothing.
func (c *Changes) Empty() bool {
	return len(c.Vectors) == 0 && len(c.Records) == 0 && len(c.Sketches) == 0 && len(c.Asks) == 0
}

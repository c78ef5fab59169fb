package region

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Event types: a registry of metadata (crdt.TypeMeta: owner, status,
// description) for counter keys and key prefixes, a last-writer-wins map
// replicated like the block list. A type's metadata travels between
// replicas as a record of (TypeRecordItem, name), so the fast path and
// anti-entropy pages carry it as they carry a block flag. A key belongs to
// the type crdt.TypeOf finds: the key itself or its longest registered
// prefix ending at a ':'. Writes to a key whose type is inactive are
// refused with ErrInactiveType, at every replica that has heard of the
// status: a region cut off from the one that set it keeps taking them
// until it hears.

// TypeRecordItem is the record item a type's metadata travels under. No
// item can be named so ('!' is not an id byte).
const TypeRecordItem = shard.TypeItem

// ErrInactiveType: the key's event type is inactive in this replica's
// view; writes to it are refused.
var ErrInactiveType = errors.New("region: the key's event type is inactive")

// typeTxn is the batch's overlay of event types.
type typeTxn struct {
	noHooks
	types map[string]*typeState
}

// typeState is the overlay of one type's metadata.
type typeState = regState[crdt.TypeInfo]

// typeKind: a type travels as the register itself.
func typeKind() regKind[crdt.TypeInfo] {
	return regKind[crdt.TypeInfo]{what: "event type", logKey: "type", item: TypeRecordItem,
		put:    func(t *txn, name string, old, cur crdt.TypeMeta) { t.b.PutType(name, old, cur) },
		record: func(m crdt.TypeMeta) crdt.Record { return &m }}
}

// write adds the changed types to the batch, and to ch those this replica
// set.
func (tt *typeTxn) write(t *txn, ch *Changes) error {
	writeRegisters(t, ch, typeKind(), tt.types)
	return nil
}

// typeMeta returns the overlay state of a type, loading it on first touch.
func (t *txn) typeMeta(name string) *typeState {
	if ts, ok := t.types[name]; ok {
		return ts
	}
	m, _ := t.r.store.Type(name)
	ts := &typeState{orig: m, cur: m}
	if t.types == nil {
		t.types = make(map[string]*typeState)
	}
	t.types[name] = ts
	return ts
}

// lookupType is a name's metadata in the overlay's view.
func (t *txn) lookupType(name string) (crdt.TypeMeta, bool) {
	if ts, ok := t.types[name]; ok {
		return ts.cur, !ts.cur.IsZero()
	}
	return t.r.store.Type(name)
}

// checkType refuses a write of key if its type is inactive in the
// overlay's view.
func (t *txn) checkType(key string) error {
	if len(t.types) == 0 && !t.r.store.HasTypes() {
		return nil // no type registered: the common case
	}
	name, m, ok := crdt.TypeOf(crdt.ItemOf(key), t.lookupType)
	if ok && m.Value.Inactive() {
		return fmt.Errorf("%w: %q is of type %q", ErrInactiveType, key, name)
	}
	return nil
}

// applyType registers or updates a type at this replica: a fresh stamp,
// origin self.
func (t *txn) applyType(op *Op) Result {
	ts := t.typeMeta(op.Item)
	changed := setRegister(t, ts, op.Meta.Value)
	m := ts.cur
	return Result{Changed: changed, Meta: &m}
}

// mergeType folds a peer's type metadata in.
func (t *txn) mergeType(name string, in crdt.TypeMeta) error {
	_, err := mergeRegister(t, typeKind(), name, t.typeMeta(name), in)
	return err
}

// SetType registers an event type, or updates its metadata, in every
// region: owner and description are free texts, status crdt.TypeActive
// or crdt.TypeInactive.
func (a Admin) SetType(ctx context.Context, name, owner, status, description string) (Result, error) {
	return a.r.do1(ctx, Op{Kind: OpType, Item: name, Meta: &crdt.TypeMeta{Value: crdt.TypeInfo{Owner: owner, Status: status, Description: description}}})
}

// Type returns a type's metadata as this replica sees it (ok false if it
// was never registered).
func (a Admin) Type(name string) (crdt.TypeMeta, bool, error) {
	r := a.r
	if !crdt.ValidID(name) {
		return crdt.TypeMeta{}, false, fmt.Errorf("%w: bad type name %q", ErrInvalid, name)
	}
	if err := r.Err(); err != nil {
		return crdt.TypeMeta{}, false, err
	}
	m, ok := r.store.Type(name)
	return m, ok, nil
}

// TypeOf returns the type key belongs to (crdt.TypeOf; an item's part
// belongs to its item's), ok false if none.
func (a Admin) TypeOf(key string) (name string, m crdt.TypeMeta, ok bool) {
	r := a.r
	if !r.store.HasTypes() {
		return "", crdt.TypeMeta{}, false
	}
	return crdt.TypeOf(crdt.ItemOf(key), r.store.Type)
}

// Types lists up to limit types in name order after the name after (""
// from the first); more reports whether any follow.
func (a Admin) Types(after string, limit int) ([]storage.Typed, bool, error) {
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
	out, more := r.store.Types(after, limit)
	return out, more, nil
}

// TypeSum is the all-time count of an event type: the vectors of its
// keys added up entry by entry, so Vector's per-replica entries are the
// replicas' shares and its value the exact sum wherever the keys'
// counts are.
type TypeSum struct {
	Vector crdt.Vector
	// Keys is how many keys (an item's parts one each) were added up.
	Keys int
	// Approx: some of the keys are approximate counters (ApproxError).
	Approx bool
	// Unreconciled (TypeWindow): records of the keys whose excess is not
	// zero yet.
	Unreconciled int
}

// TypeTotal adds up the all-time vectors of the keys of family kind
// (Likes or Counters) that belong to the registered type name as
// crdt.TypeOf decides at this read: a key of a longer registered type
// nested in it (video:hd: in video:) is that type's, not name's. The
// sums are per shard as shardOf says, keeping only the keys it accepts
// (a sharded region's held shards); nil puts every key in shard 0.
//
// No running aggregate per type is kept: a key's type is decided by the
// registry at read time, and registering or nesting a type later moves
// keys between types, so an aggregate booked at write time would drift
// from that definition (and miss every key written before the type was
// registered). The read scans the family's keys, skipping those that do
// not start with the type's name: time in proportion to the family's
// keys, as for all-time trending.
func (a Admin) TypeTotal(kind storage.Kind, name string, shardOf func(key string) (int, bool)) (map[int]TypeSum, error) {
	r := a.r
	out := map[int]TypeSum{}
	err := r.typeKeys(kind, name, shardOf, func(sh int, key string, v crdt.Vector) error {
		sum := out[sh]
		sum.Vector = addVectors(sum.Vector, v)
		sum.Keys++
		sum.Approx = sum.Approx || kind == storage.Counters && r.Counters().ApproxError(key) > 0
		out[sh] = sum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("type %q total: %w", name, err)
	}
	return out, nil
}

// TypeWindow is TypeTotal over a time window: the net changes of the
// type's keys in [fromMs, toMs) added up per shard. The bounds are
// widened to whole slots of the finest level of the type's own name
// (as a key of that name would be, WindowOf) that covers them, and every
// key is read over exactly those slots, from a level of its own whose
// width divides that width; a key with none is ErrNoWindow, so a sum
// never mixes intervals. The returned Window has the bounds, SlotWidth
// and Closed; no Points. TypeSum.Unreconciled counts the keys' records
// whose excess is not zero yet.
func (a Admin) TypeWindow(kind storage.Kind, name string, fromMs, toMs int64, shardOf func(key string) (int, bool)) (Window, map[int]TypeSum, error) {
	r := a.r
	if toMs <= fromMs {
		return Window{}, nil, fmt.Errorf("%w: window ends before it starts", ErrInvalid)
	}
	if !crdt.ValidID(name) {
		return Window{}, nil, fmt.Errorf("%w: bad type name %q", ErrInvalid, name)
	}
	l, err := r.pickLevel(kind, name, fromMs, toMs, 0)
	if err != nil {
		return Window{}, nil, err
	}
	from := crdt.SlotStart(fromMs, l.width)
	to := crdt.SlotStart(toMs-1, l.width) + l.width
	nowMs := r.pclock.NowMs()
	w := Window{From: time.Unix(from, 0), To: time.Unix(to, 0), Width: time.Duration(to-from) * time.Second,
		SlotWidth: time.Duration(l.width) * time.Second, Closed: to*1000+r.cfg.Windows.Past.Milliseconds() <= nowMs}
	out := map[int]TypeSum{}
	err = r.typeKeys(kind, name, shardOf, func(sh int, key string, _ crdt.Vector) error {
		kl, err := r.pickLevel(kind, key, from*1000, to*1000, l.width)
		if err != nil {
			return fmt.Errorf("key %q of the type: %w", key, err)
		}
		sum := out[sh]
		if err := r.addSlots(kind, key, kl, from, to, nowMs, func(_ crdt.Slot, v crdt.Vector) {
			sum.Vector = addVectors(sum.Vector, v)
		}); err != nil {
			return err
		}
		sum.Keys++
		sum.Approx = sum.Approx || kind == storage.Counters && r.Counters().ApproxError(key) > 0
		r.umu.RLock()
		sum.Unreconciled += r.unreconciled[vkey{kind, key}]
		r.umu.RUnlock()
		out[sh] = sum
		return nil
	})
	if err != nil {
		return Window{}, nil, fmt.Errorf("type %q window: %w", name, err)
	}
	return w, out, nil
}

// typeKeys calls fn with each key of family kind (Likes or Counters)
// that belongs to the registered type name (TypeTotal), its shard as
// shardOf says (nil: 0) and its all-time vector, skipping the keys
// shardOf refuses.
func (r *Replica) typeKeys(kind storage.Kind, name string, shardOf func(key string) (int, bool), fn func(sh int, key string, v crdt.Vector) error) error {
	if kind != storage.Likes && kind != storage.Counters {
		return fmt.Errorf("%w: type sum of family %c", ErrInvalid, kind)
	}
	if !crdt.ValidID(name) {
		return fmt.Errorf("%w: bad type name %q", ErrInvalid, name)
	}
	if err := r.Err(); err != nil {
		return err
	}
	base := strings.TrimSuffix(name, ":")
	var ferr error
	err := r.store.ScanVectors(kind, func(key string, v crdt.Vector) bool {
		if !strings.HasPrefix(key, base) {
			return true
		}
		sh := 0
		if shardOf != nil {
			var ok bool
			if sh, ok = shardOf(key); !ok {
				return true
			}
		}
		if got, _, ok := crdt.TypeOf(crdt.ItemOf(key), r.store.Type); !ok || got != name {
			return true
		}
		ferr = fn(sh, key, v)
		return ferr == nil
	})
	if err == nil {
		err = ferr
	}
	return err
}

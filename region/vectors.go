package region

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Vectors: the PN vectors of like counts, counters, budgets and time
// slots (storage.Kind), the overlay every part that counts shares. A
// vector is read once per batch (from the cache of hot items or the
// store), changed in memory, written entry by entry at commit, and put in
// the cache once the commit is durable.

// vectorTxn is the batch's overlay of vectors.
type vectorTxn struct {
	noHooks
	vecs  map[vkey]*vecState
	order []vkey // vectors in first-touch order, for deterministic writes
	// last is the vector the previous op touched: a batch of likes of one
	// hot item (or increments of one counter) skips the map lookup.
	lastKey vkey
	last    *vecState
}

// vecState is the overlay of one vector.
type vecState struct {
	orig crdt.Vector // committed value; never modified
	cur  crdt.Vector
	// deleted: an expired slot the commit deletes.
	deleted bool
	// slot is a slot's parsed name, once known (trend is set if its width
	// feeds the trending sketches).
	slot   crdt.Slot
	parsed bool
}

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

func (t *txn) mergeVector(m *VectorMerge) error {
	if !storage.ValidItem(m.Kind, m.Item) {
		return fmt.Errorf("%w: bad vector merge %c/%q", ErrInvalid, m.Kind, m.Item)
	}
	var slot crdt.Slot
	if m.Kind.IsWindows() {
		if slot, _ = crdt.ParseSlot(m.Item); slot.Expired(t.nowMs) {
			// Gone by rule everywhere: taking it would bring it back.
			t.r.metrics.refusedSlot.Inc()
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
		vs.slot, vs.parsed = slot, true
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
				// A slot's own entry is booked from the others;
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

// write adds the changed entries of every vector to the batch (a time
// slot's first entries also index it for expiry), and this replica's
// changed own entries to ch.
func (v *vectorTxn) write(t *txn, ch *Changes) error {
	self := t.r.self
	for _, k := range v.order {
		vs := v.vecs[k]
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
	return nil
}

// publish puts the changed vectors in the cache readers read.
func (v *vectorTxn) publish(t *txn) {
	for _, k := range v.order {
		vs := v.vecs[k]
		if !vs.cur.Equal(vs.orig) {
			t.r.cache.put(k, vs.cur)
		}
	}
}

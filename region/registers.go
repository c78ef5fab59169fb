package region

import (
	"fmt"

	"github.com/tally-dev/tally/crdt"
)

// Registers: a user's block flag (blocks.go) and an event type's
// metadata (types.go) are both a crdt.Register, kept in the batch's
// overlay as a regState and written, stamped and merged here alike. They
// differ in what a change sets off (a flag's moves its user's like
// records) and in the record form they travel in: a flag as a
// register-only like record (crdt.FlagRecord) that replicas of every
// version read, a type as the register itself.

// regState is the overlay of one register.
type regState[V crdt.RegisterValue[V]] struct {
	orig, cur crdt.Register[V]
	dirty     bool
	spread    bool // set by a local write
}

// regKind is how one kind of register is written and sent.
type regKind[V crdt.RegisterValue[V]] struct {
	what   string // "block flag", "event type": in errors and logs
	logKey string // the log attribute its name goes under
	item   string // the record item it travels under
	put    func(t *txn, name string, old, cur crdt.Register[V])
	record func(crdt.Register[V]) crdt.Record // its record form
}

// writeRegisters adds the changed registers of one kind to the batch, and
// to ch (as records) those this replica wrote.
func writeRegisters[V crdt.RegisterValue[V]](t *txn, ch *Changes, k regKind[V], states map[string]*regState[V]) {
	for name, s := range states {
		if !s.dirty {
			continue
		}
		k.put(t, name, s.orig, s.cur)
		if s.spread {
			ch.Records = append(ch.Records, RecordChange{Item: k.item, User: name, Rec: k.record(s.cur)})
		} else {
			ch.Merged++
		}
	}
}

// setRegister writes v to s at this replica: a fresh stamp, origin self.
// It reports whether the value changed.
func setRegister[V crdt.RegisterValue[V]](t *txn, s *regState[V], v V) (changed bool) {
	hlc := t.r.clock.Now(t.nowMs)
	if hlc <= s.cur.HLC {
		hlc = s.cur.HLC + 1 // as in applyLike: the write must win
	}
	changed = s.cur.Set(t.r.self, v, hlc)
	s.dirty, s.spread = true, true
	return changed
}

// mergeRegister folds a peer's register of the named one into s and
// reports whether s changed.
func mergeRegister[V crdt.RegisterValue[V]](t *txn, k regKind[V], name string, s *regState[V], in crdt.Register[V]) (bool, error) {
	if in.HLC.WallMs() > t.nowMs+maxClockDriftMs {
		// As for records (mergeRecord): a stamp far ahead would beat every
		// later write until real time caught up with it.
		t.r.metrics.refusedFuture.Inc()
		return false, fmt.Errorf("%w: %s stamped %v, more than %v ahead of our clock", ErrInvalid, k.what, in.HLC, maxClockDriftMs)
	}
	if t.r.accepting.Load() && in.Origin == t.r.self && in.Wins(s.cur) {
		// Only this replica writes registers in its name once it
		// acknowledges writes (during recovery this is how its own come
		// back).
		t.r.metrics.refusedOwn.Inc()
		t.r.log.Warn("refused a peer's newer view of our own "+k.what, k.logKey, name)
		return false, nil
	}
	t.r.clock.Observe(in.HLC)
	if !s.cur.Merge(in) {
		return false, nil
	}
	s.dirty = true
	return true, nil
}

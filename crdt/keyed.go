package crdt

import "strings"

// KeyedRecord is one idempotency key of a counter: the lattice of a like
// record for one idempotent increment, (counter, idempotency key) instead
// of (item, user). The register {HLC, Origin, Amount, Asked, At} says the
// key was applied, when and by how much, and the contributions must add up
// to Amount (a like record's add up to 1 while liked). A record without a
// register (HLC zero) holds contributions only, a portion of some
// replica's view.
//
// On an approximate counter the replica counts another amount than the
// client asked for (a multiple of its step, or nothing). Amount is then
// what it counted, the target every replica reconciles to, and Asked keeps
// what the client asked for, so a retry with another amount is still told
// apart from a retry.
type KeyedRecord struct {
	HLC     HLC
	Origin  string // replica that applied the key in the winning application
	Contrib Vector // Contrib[r]: what replica r added/removed for this key
	Amount  int64  // the increment counted; a register field
	// Asked is the amount the client asked for, if it is not Amount (an
	// approximate counter counted another); zero otherwise. A register
	// field.
	Asked int64
	// At is when the client applied the key (unix ms), if it said so; zero
	// means at the register's HLC. A register field: time windows book the
	// record's reconciliation there.
	At int64
	// Fenced: the register is a fence (Fence), not an application: the
	// key was called off, nothing counts under it (Amount and Asked are
	// zero). A register field. A fence beats every register that is not
	// one, whatever their stamps: a purchase called off anywhere is
	// called off everywhere, and what any replica applied under its key
	// is given back (Excess), so undoing it never spends anything.
	Fenced bool
}

// Applied reports whether the register holds an application of the key.
func (r *KeyedRecord) Applied() bool { return r.HLC != 0 }

// BookedMs is the time the winning application is booked at in time
// windows: At if the client gave one, else the register's wall time.
func (r *KeyedRecord) BookedMs() int64 { return bookedMs(r.At, r.HLC) }

// Wins reports whether r's register beats o's: a fence beats a register
// that is not one; then the larger HLC, ties broken by origin id. Equal
// (HLC, Origin) is the same write; the last tie-breaks only keep Merge
// commutative should corrupt input ever disagree.
func (r *KeyedRecord) Wins(o *KeyedRecord) bool {
	if r.Fenced != o.Fenced {
		return r.Fenced
	}
	if r.HLC != o.HLC {
		return r.HLC > o.HLC
	}
	if r.Origin != o.Origin {
		return r.Origin > o.Origin
	}
	if r.Amount != o.Amount {
		return r.Amount > o.Amount
	}
	if r.Asked != o.Asked {
		return r.Asked > o.Asked
	}
	return r.At > o.At
}

// Merge folds o into r: the register by (HLC, Origin), Contrib entry-wise
// max. It reports whether r changed. o is not modified.
func (r *KeyedRecord) Merge(o *KeyedRecord) bool {
	changed := false
	if o.Wins(r) {
		r.HLC, r.Origin, r.Amount, r.Asked, r.At, r.Fenced = o.HLC, o.Origin, o.Amount, o.Asked, o.At, o.Fenced
		changed = true
	}
	var c bool
	r.Contrib, c = r.Contrib.Merge(o.Contrib)
	return changed || c
}

// Excess is Σ(P − N) over Contrib minus Amount if applied: how far the
// key's contribution to the counter is from what it should be.
func (r *KeyedRecord) Excess() int64 {
	if !r.Applied() {
		return r.Contrib.Value()
	}
	return r.Contrib.Value() - r.Amount
}

// Reconcile applies the winner's duty, as LikeRecord.Reconcile does: if
// self is the record's Origin, it brings the excess to zero through its
// own entry, and returns the change to self's counter-vector entry.
func (r *KeyedRecord) Reconcile(self string) (delta int64) {
	if r.Origin != self {
		return 0
	}
	return reconcile(&r.Contrib, self, r.Excess())
}

// ApplyCounted records the local application of an increment at replica
// self, stamped hlc, on a keyed record that holds no earlier application
// (the caller checks: an applied key is a duplicate). The client asked by
// asked and the replica counts counted (an approximate counter's decision;
// an exact one counts what was asked): counted is the record's Amount, and
// asked is kept beside it for telling a retry from a reuse of the key. The
// application takes At zero (booked at hlc); a caller with a client's time
// sets At afterwards. It returns the change to self's counter-vector
// entry: counted, less whatever the record's earlier contributions already
// count.
func (r *KeyedRecord) ApplyCounted(self string, asked, counted int64, hlc HLC) (delta int64) {
	r.HLC, r.Origin, r.Amount, r.Asked, r.At, r.Fenced = hlc, self, counted, 0, 0, false
	if asked != counted {
		r.Asked = asked
	}
	return r.Reconcile(self)
}

// Fence makes r's register a fence by replica self, stamped hlc, booked
// at at (unix ms; zero: at hlc): the key is called off, whatever was
// applied under it before or is merged later. The caller then brings the
// key's contributions to zero, as after a merge (Reconcile for a counter;
// a budget's record by its own rule, Spend.RefundLoser).
func (r *KeyedRecord) Fence(self string, hlc HLC, at int64) {
	r.HLC, r.Origin, r.Amount, r.Asked, r.At, r.Fenced = hlc, self, 0, 0, at, true
}

// IsFenced reports whether the register is a fence (Fence).
func (r *KeyedRecord) IsFenced() bool { return r.Fenced }

// Requested is the amount the client asked for when the key was applied:
// Asked if the replica counted another amount, else Amount.
func (r *KeyedRecord) Requested() int64 {
	if r.Asked != 0 {
		return r.Asked
	}
	return r.Amount
}

// Clone returns a deep copy.
func (r *KeyedRecord) Clone() *KeyedRecord {
	c := *r
	c.Contrib = r.Contrib.Clone()
	return &c
}

// Equal reports whether r and o are the same state.
func (r *KeyedRecord) Equal(o *KeyedRecord) bool {
	return r.HLC == o.HLC && r.Origin == o.Origin && r.Amount == o.Amount && r.Asked == o.Asked && r.At == o.At &&
		r.Fenced == o.Fenced && r.Contrib.Equal(o.Contrib)
}

// Restrict returns a copy of r keeping only the Contrib entries of the
// replicas keep accepts, and the register only if keep accepts its Origin.
// It reports whether anything was left out.
func (r *KeyedRecord) Restrict(keep func(replica string) bool) (*KeyedRecord, bool) {
	p := &KeyedRecord{}
	regCut := false
	if r.Origin != "" || r.HLC != 0 {
		if keep(r.Origin) {
			p.HLC, p.Origin, p.Amount, p.Asked, p.At, p.Fenced = r.HLC, r.Origin, r.Amount, r.Asked, r.At, r.Fenced
		} else {
			regCut = true
		}
	}
	var cut bool
	p.Contrib, cut = restrictContrib(r.Contrib, keep)
	return p, regCut || cut
}

// Empty reports whether r holds nothing: no register, no contribution.
func (r *KeyedRecord) Empty() bool { return r.HLC == 0 && len(r.Contrib) == 0 }

// Stamp is the register's HLC and Origin.
func (r *KeyedRecord) Stamp() (HLC, string) { return r.HLC, r.Origin }

// Contributions is Contrib.
func (r *KeyedRecord) Contributions() Vector { return r.Contrib }

func (*KeyedRecord) isRecord() {}

// toggleSep joins an item and a user in the name a like action's
// idempotency key is kept under (ToggleName). It is not an id byte, and a
// budget's spend names start with it rather than holding it inside, so
// the name meets no counter key and no spend.
const toggleSep = "~"

// ToggleName is the name the idempotency keys of (item, user)'s keyed
// like actions (toggles, likes and unlikes with a key) are kept under as
// keyed records, in the place of a counter key: one record per (item,
// user, idempotency key), whose register says the action was applied
// and the state it left (ToggleOutcome), so that a retry answers that
// state for as long as keyed records are kept, whatever the user did
// since. Such a record counts in no vector: it has no contributions and
// Amount zero. Its shard is the item's (the part before toggleSep).
func ToggleName(item, user string) string { return item + toggleSep + user }

// ToggleItem splits a ToggleName into its item and user; ok is false for
// any other name.
func ToggleItem(name string) (item, user string, ok bool) {
	item, user, ok = strings.Cut(name, toggleSep)
	return item, user, ok && ValidItemName(item) && ValidID(user)
}

// SetToggleOutcome makes r's register the application, by replica self
// at hlc, of a keyed like action that left the user's state liked.
func (r *KeyedRecord) SetToggleOutcome(self string, hlc HLC, liked bool) {
	r.HLC, r.Origin, r.Amount, r.At, r.Fenced = hlc, self, 0, 0, false
	r.Asked = -1
	if liked {
		r.Asked = 1
	}
}

// ToggleOutcome is the state a keyed like action left (a register set by
// SetToggleOutcome); ok is false if r holds no application.
func (r *KeyedRecord) ToggleOutcome() (liked, ok bool) {
	return r.Asked > 0, r.Applied()
}

// ValidToggleRecord reports whether r is the shape of a toggle's keyed
// record: a register alone (Amount zero, Asked ±1, no contribution), so
// that it never moves a count.
func (r *KeyedRecord) ValidToggleRecord() bool {
	return r.Amount == 0 && len(r.Contrib) == 0 && (r.HLC == 0 || r.Asked == 1 || r.Asked == -1)
}

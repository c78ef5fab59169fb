package crdt

// LikeRecord is one user's like state for one item: a last-writer-wins
// register {Liked, HLC, Origin} and the per-user contribution vector. See the
// package documentation for the rules.
//
// A keyed record (Keyed set) is the same lattice for one idempotent
// increment: (counter, idempotency key) instead of (item, user). Liked means
// "applied", and the register also carries the increment's Amount, which
// the contributions must add up to instead of 1. Keyed is the record's kind,
// not part of the register: every portion of a keyed record says so.
//
// On an approximate counter the replica counts another amount than the
// client asked for (a multiple of its step, or nothing). Amount is then
// what it counted, the target every replica reconciles to, and Asked keeps
// what the client asked for, so a retry with another amount is still told
// apart from a retry.
type LikeRecord struct {
	Liked   bool
	HLC     HLC
	Origin  string // replica that wrote the winning action
	Contrib Vector // Contrib[r]: what replica r added/removed for this user
	Keyed   bool   // an increment-key record, see above
	Amount  int64  // a keyed record's increment; register field, zero otherwise
	// Asked is the amount the client asked for, if it is not Amount (an
	// approximate counter counted another); zero otherwise. A register
	// field.
	Asked int64
	// At is when the winning action happened by its client (unix ms), if
	// the client said so; zero means at the register's HLC. A register
	// field: time windows book the record's reconciliation there.
	At int64
}

// BookedMs is the time the record's winning action is booked at in time
// windows: At if the client gave one, else the register's wall time.
func (r *LikeRecord) BookedMs() int64 {
	if r.At != 0 {
		return r.At
	}
	return r.HLC.WallMs()
}

// target is what Contrib should add up to.
func (r *LikeRecord) target() int64 {
	switch {
	case !r.Liked:
		return 0
	case r.Keyed:
		return r.Amount
	}
	return 1
}

// Wins reports whether r's register beats o's: larger HLC, ties broken by
// origin id. Equal (HLC, Origin) is the same write; the last tie-break on
// Liked only keeps Merge commutative should corrupt input ever disagree.
func (r *LikeRecord) Wins(o *LikeRecord) bool {
	if r.HLC != o.HLC {
		return r.HLC > o.HLC
	}
	if r.Origin != o.Origin {
		return r.Origin > o.Origin
	}
	if r.Liked != o.Liked {
		return r.Liked
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
func (r *LikeRecord) Merge(o *LikeRecord) bool {
	changed := false
	if o.Wins(r) {
		r.Liked, r.HLC, r.Origin, r.Amount, r.Asked, r.At = o.Liked, o.HLC, o.Origin, o.Amount, o.Asked, o.At
		changed = true
	}
	if o.Keyed && !r.Keyed {
		r.Keyed, changed = true, true
	}
	var c bool
	r.Contrib, c = r.Contrib.Merge(o.Contrib)
	return changed || c
}

// Excess is d = Σ(P − N) over Contrib minus 1 if liked (minus Amount if
// applied, for a keyed record): how far the user's contribution to the item
// count is from what it should be.
func (r *LikeRecord) Excess() int64 {
	return r.Contrib.Value() - r.target()
}

// ExcessBlocked is Excess with the user's block flag (Flag) taken into
// account: a blocked user's like counts 0, so d = Σ(P − N) − (Liked &&
// !blocked ? 1 : 0). A keyed record belongs to no user; blocked does not
// change its target.
func (r *LikeRecord) ExcessBlocked(blocked bool) int64 {
	if blocked && !r.Keyed {
		return r.Contrib.Value()
	}
	return r.Contrib.Value() - r.target()
}

// Reconcile applies the winner's duty: if self is the record's Origin, it
// brings the excess to zero by raising self's own N (excess > 0) or P
// (excess < 0). It returns the change to self's item-vector entry, which the
// caller must add to the item's vector in the same durable write.
func (r *LikeRecord) Reconcile(self string) (delta int64) {
	return r.ReconcileBlocked(self, false)
}

// ReconcileBlocked is Reconcile against ExcessBlocked: the winner's duty
// when its view of the user's flag says blocked. It must run whenever the
// winner's view of the record or of the flag changes.
func (r *LikeRecord) ReconcileBlocked(self string, blocked bool) (delta int64) {
	if r.Origin != self {
		return 0
	}
	d := r.ExcessBlocked(blocked)
	if d == 0 {
		return 0
	}
	r.Contrib = r.Contrib.Add(self, -d)
	return -d
}

// Apply records a local like (liked = true) or unlike at replica self with a
// fresh timestamp hlc, which must exceed every HLC self has seen (Clock.Now
// after Observe). It reports whether the liked state changed in self's view
// and the change to self's item-vector entry. The action takes At zero
// (booked at hlc); a caller with a client's time sets At afterwards.
func (r *LikeRecord) Apply(self string, liked bool, hlc HLC) (changed bool, delta int64) {
	changed = r.Liked != liked
	r.Liked, r.HLC, r.Origin, r.At = liked, hlc, self, 0
	return changed, r.Reconcile(self)
}

// ApplyKeyedCounted records the local application of an increment at
// replica self, stamped hlc, on a keyed record that holds no earlier
// application (the caller checks: an applied key is a duplicate). The
// client asked by asked and the replica counts counted (an approximate
// counter's decision; an exact one counts what was asked): counted is the
// record's Amount, and asked is kept beside it for telling a retry from a
// reuse of the key. It returns the change to self's counter-vector entry:
// counted, less whatever the record's earlier contributions already count.
func (r *LikeRecord) ApplyKeyedCounted(self string, asked, counted int64, hlc HLC) (delta int64) {
	r.Keyed = true
	r.Liked, r.HLC, r.Origin, r.Amount, r.Asked, r.At = true, hlc, self, counted, 0, 0
	if asked != counted {
		r.Asked = asked
	}
	return r.Reconcile(self)
}

// Requested is the amount the client asked for when the key was applied:
// Asked if the replica counted another amount, else Amount.
func (r *LikeRecord) Requested() int64 {
	if r.Asked != 0 {
		return r.Asked
	}
	return r.Amount
}

// Additions is how many times, in all, replicas have added this user to the
// item's count (the sum of Contrib's P halves). It only grows: a user who
// likes, unlikes and likes again has 2, and 1 means the user's first like
// is the only one ever counted.
func (r *LikeRecord) Additions() uint64 {
	var n uint64
	for _, e := range r.Contrib {
		n += e.P
	}
	return n
}

// Clone returns a deep copy.
func (r *LikeRecord) Clone() *LikeRecord {
	c := *r
	c.Contrib = r.Contrib.Clone()
	return &c
}

// Equal reports whether r and o are the same state.
func (r *LikeRecord) Equal(o *LikeRecord) bool {
	return r.Liked == o.Liked && r.HLC == o.HLC && r.Origin == o.Origin && r.Keyed == o.Keyed &&
		r.Amount == o.Amount && r.Asked == o.Asked && r.At == o.At && r.Contrib.Equal(o.Contrib)
}

// Restrict returns a copy of r keeping only the Contrib entries of the
// replicas keep accepts, and the register only if keep accepts its Origin.
// It reports whether anything was left out.
func (r *LikeRecord) Restrict(keep func(replica string) bool) (*LikeRecord, bool) {
	p := &LikeRecord{Keyed: r.Keyed}
	cut := false
	if r.Origin != "" || r.HLC != 0 {
		if keep(r.Origin) {
			p.Liked, p.HLC, p.Origin, p.Amount, p.Asked, p.At = r.Liked, r.HLC, r.Origin, r.Amount, r.Asked, r.At
		} else {
			cut = true
		}
	}
	for _, e := range r.Contrib {
		if keep(e.Replica) {
			p.Contrib = append(p.Contrib, e)
		} else {
			cut = true
		}
	}
	return p, cut
}

package crdt

// LikeRecord is one user's like state for one item: a last-writer-wins
// register {Liked, HLC, Origin, At, Idem} and the per-user contribution
// vector. See the package documentation for the rules.
type LikeRecord struct {
	Liked   bool
	HLC     HLC
	Origin  string // replica that wrote the winning action
	Contrib Vector // Contrib[r]: what replica r added/removed for this user
	// At is when the winning action happened by its client (unix ms), if
	// the client said so; zero means at the register's HLC. A register
	// field: time windows book the record's reconciliation there, and it
	// orders the register (Wins).
	At int64
	// Idem is the idempotency key of the toggle that wrote the register,
	// if one did ("" otherwise): a retried toggle that finds its key here
	// is a duplicate. A register field, so it travels with the state it
	// decided.
	Idem string
}

// BookedMs is the time the record's winning action is booked at in time
// windows: At if the client gave one, else the register's wall time.
func (r *LikeRecord) BookedMs() int64 { return bookedMs(r.At, r.HLC) }

func bookedMs(at int64, hlc HLC) int64 {
	if at != 0 {
		return at
	}
	return hlc.WallMs()
}

// Wins reports whether r's register beats o's. Registers are ordered by
// the time of their action (BookedMs: the client's time if it gave one,
// else the HLC's wall time), then by HLC, then by origin id; the last
// tie-breaks (liked, At, Idem) only keep Merge commutative should corrupt
// input ever disagree on one write. It is a total order on registers, and
// the writer decides a local action by the same order (Decide), so every
// replica keeps the same winner. Without client times it is the HLC order.
func (r *LikeRecord) Wins(o *LikeRecord) bool {
	if a, b := r.BookedMs(), o.BookedMs(); a != b {
		return a > b
	}
	if r.HLC != o.HLC {
		return r.HLC > o.HLC
	}
	if r.Origin != o.Origin {
		return r.Origin > o.Origin
	}
	if r.Liked != o.Liked {
		return r.Liked
	}
	if r.At != o.At {
		return r.At > o.At
	}
	return r.Idem > o.Idem
}

// Merge folds o into r: the register by Wins, Contrib entry-wise max. It
// reports whether r changed. o is not modified.
func (r *LikeRecord) Merge(o *LikeRecord) bool {
	changed := false
	if o.Wins(r) {
		r.setRegister(o)
		changed = true
	}
	var c bool
	r.Contrib, c = r.Contrib.Merge(o.Contrib)
	return changed || c
}

// Excess is d = Σ(P − N) over Contrib minus 1 if liked: how far the user's
// contribution to the item count is from what it should be.
func (r *LikeRecord) Excess() int64 { return r.ExcessBlocked(false) }

// ExcessBlocked is Excess with the user's block flag (Flag) taken into
// account: a blocked user's like counts 0, so d = Σ(P − N) − (Liked &&
// !blocked ? 1 : 0).
func (r *LikeRecord) ExcessBlocked(blocked bool) int64 {
	if r.Liked && !blocked {
		return r.Contrib.Value() - 1
	}
	return r.Contrib.Value()
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
	return reconcile(&r.Contrib, self, r.ExcessBlocked(blocked))
}

// reconcile brings excess d of contributions v to zero through self's own
// entry, and returns the change to self's vector entry.
func reconcile(v *Vector, self string, d int64) (delta int64) {
	if d == 0 {
		return 0
	}
	*v = v.Add(self, -d)
	return -d
}

// setRegister copies o's register into r.
func (r *LikeRecord) setRegister(o *LikeRecord) {
	r.Liked, r.HLC, r.Origin, r.At, r.Idem = o.Liked, o.HLC, o.Origin, o.At, o.Idem
}

// Apply records a local like (liked = true) or unlike at replica self with a
// fresh timestamp hlc, which must exceed every HLC self has seen (Clock.Now
// after Observe). It reports whether the liked state changed in self's view
// and the change to self's item-vector entry. The action takes At zero
// (booked at hlc) and no Idem, and always wins: a caller with a client's
// time uses Decide.
func (r *LikeRecord) Apply(self string, liked bool, hlc HLC) (changed bool, delta int64) {
	changed = r.Liked != liked
	r.Liked, r.HLC, r.Origin, r.At, r.Idem = liked, hlc, self, 0, ""
	return changed, r.Reconcile(self)
}

// Action is a local like or unlike as the writer decides it: the state,
// a fresh HLC (above every HLC the replica has seen), the client's time of
// the action (unix ms, 0: none) and the idempotency key of a toggle.
type Action struct {
	Liked bool
	HLC   HLC
	At    int64
	Idem  string
}

// Decide applies a local action at replica self if its register wins over
// r's (Wins): the same order every replica merges by, so an action that
// loses here, an action older by its client's time than the state it
// finds, would lose everywhere and is dropped (applied false: r is
// unchanged). It reports whether the action was applied, whether the liked
// state changed in self's view, and the change to self's item-vector
// entry.
func (r *LikeRecord) Decide(self string, a Action) (applied, changed bool, delta int64) {
	in := LikeRecord{Liked: a.Liked, HLC: a.HLC, Origin: self, At: a.At, Idem: a.Idem}
	if !in.Wins(r) {
		return false, false, 0
	}
	changed = r.Liked != a.Liked
	r.setRegister(&in)
	return true, changed, r.Reconcile(self)
}

// ToggleAt is the client time a toggle at hlc takes so that it is ordered
// right after r's register, whose state it flips: 0 (none: its HLC orders
// it) unless r's action is booked later than hlc's wall time (a client's
// time ahead of this replica's clock), when it is that time, and the
// larger HLC breaks the tie.
func (r *LikeRecord) ToggleAt(hlc HLC) int64 {
	if b := r.BookedMs(); b > hlc.WallMs() {
		return b
	}
	return 0
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
	return r.Liked == o.Liked && r.HLC == o.HLC && r.Origin == o.Origin && r.At == o.At && r.Idem == o.Idem &&
		r.Contrib.Equal(o.Contrib)
}

// Restrict returns a copy of r keeping only the Contrib entries of the
// replicas keep accepts, and the register only if keep accepts its Origin.
// It reports whether anything was left out.
func (r *LikeRecord) Restrict(keep func(replica string) bool) (*LikeRecord, bool) {
	p := &LikeRecord{}
	regCut := false
	if r.Origin != "" || r.HLC != 0 {
		if keep(r.Origin) {
			p.setRegister(r)
		} else {
			regCut = true
		}
	}
	var cut bool
	p.Contrib, cut = restrictContrib(r.Contrib, keep)
	return p, regCut || cut
}

// restrictContrib keeps the entries of v whose replica keep accepts, and
// reports whether any was left out.
func restrictContrib(v Vector, keep func(replica string) bool) (Vector, bool) {
	var out Vector
	cut := false
	for _, e := range v {
		if keep(e.Replica) {
			out = append(out, e)
		} else {
			cut = true
		}
	}
	return out, cut
}

// Empty reports whether r holds nothing: no register, no contribution.
func (r *LikeRecord) Empty() bool { return r.HLC == 0 && len(r.Contrib) == 0 }

// Stamp is the register's HLC and Origin.
func (r *LikeRecord) Stamp() (HLC, string) { return r.HLC, r.Origin }

// Contributions is Contrib.
func (r *LikeRecord) Contributions() Vector { return r.Contrib }

func (*LikeRecord) isRecord() {}

package crdt

// LikeRecord is one user's like state for one item: a last-writer-wins
// register {Liked, HLC, Origin, At} and the per-user contribution vector.
// See the package documentation for the rules.
type LikeRecord struct {
	Liked   bool
	HLC     HLC
	Origin  string // replica that wrote the winning action
	Contrib Vector // Contrib[r]: what replica r added/removed for this user
	// At is when the winning action happened by its client (unix ms), if
	// the client said so; zero means at the register's HLC. A register
	// field: time windows book the record's reconciliation there.
	At int64
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

// Wins reports whether r's register beats o's: larger HLC, ties broken by
// origin id. Equal (HLC, Origin) is the same write; the last tie-breaks
// only keep Merge commutative should corrupt input ever disagree.
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
	return r.At > o.At
}

// Merge folds o into r: the register by (HLC, Origin), Contrib entry-wise
// max. It reports whether r changed. o is not modified.
func (r *LikeRecord) Merge(o *LikeRecord) bool {
	changed := false
	if o.Wins(r) {
		r.Liked, r.HLC, r.Origin, r.At = o.Liked, o.HLC, o.Origin, o.At
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
	return r.Liked == o.Liked && r.HLC == o.HLC && r.Origin == o.Origin && r.At == o.At && r.Contrib.Equal(o.Contrib)
}

// Restrict returns a copy of r keeping only the Contrib entries of the
// replicas keep accepts, and the register only if keep accepts its Origin.
// It reports whether anything was left out.
func (r *LikeRecord) Restrict(keep func(replica string) bool) (*LikeRecord, bool) {
	p := &LikeRecord{}
	regCut := false
	if r.Origin != "" || r.HLC != 0 {
		if keep(r.Origin) {
			p.Liked, p.HLC, p.Origin, p.At = r.Liked, r.HLC, r.Origin, r.At
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

package crdt

// What only the tests use.

import "strings"

// IsSlotName reports whether name is a slot's name rather than an
// id: it contains '#'.
func IsSlotName(name string) bool { return strings.IndexByte(name, '#') >= 0 }

// Apply is ApplyCounted for an exact counter: it counts the amount asked.
func (r *KeyedRecord) Apply(self string, amount int64, hlc HLC) (delta int64) {
	return r.ApplyCounted(self, amount, amount, hlc)
}

// Merge folds o into b by element-wise max of every vector; it reports
// whether b changed. o is not modified.
func (b *Budget) Merge(o *Budget) bool {
	var changed, c bool
	b.Main, c = b.Main.Merge(o.Main)
	changed = changed || c
	for to, v := range o.Inbox {
		if b.Inbox == nil {
			b.Inbox = make(map[string]Vector)
		}
		b.Inbox[to], c = b.Inbox[to].Merge(v)
		changed = changed || c
	}
	return changed
}

// Equal reports whether b and o hold the same state.
func (b *Budget) Equal(o *Budget) bool {
	if !b.Main.Equal(o.Main) {
		return false
	}
	for k, v := range b.Inbox {
		if !v.Equal(o.Inbox[k]) {
			return false
		}
	}
	for k, v := range o.Inbox {
		if !v.Equal(b.Inbox[k]) {
			return false
		}
	}
	return true
}

// AppendVector appends the encoding of v to dst.
func AppendVector(dst []byte, v Vector) []byte {
	dst = append(dst, formatV1)
	return appendVectorBody(dst, v)
}

// DecodeVector decodes an AppendVector encoding.
func DecodeVector(b []byte) (Vector, error) {
	d := decoder{b: b}
	d.version()
	v := d.vector()
	return v, d.finish("vector")
}

// Portion returns the part of r that replica id speaks for: all of it if id
// set it, else the zero register.
func (r Register[V]) Portion(id string) Register[V] {
	if r.Origin == id {
		return r
	}
	return Register[V]{}
}

// IsZero reports whether h is empty (every register zero).
func (h *HLL) IsZero() bool {
	for i := range h.pages {
		if !h.pages[i].IsZero() {
			return false
		}
	}
	return true
}

// Portion returns the part of r that replica id speaks for: id's own
// Contrib entry, and the register if id is its Origin (otherwise the zero
// register, which loses to every real one). Merging only portions, each
// received from its owner, converges to the same state as merging whole
// records (TestLikeConvergence's provenance runs); a relay cannot then
// forge another replica's part.
func (r *LikeRecord) Portion(id string) *LikeRecord {
	p := &LikeRecord{}
	if r.Origin == id {
		p.setRegister(r)
	}
	if e := r.Contrib.Get(id); e != (PN{}) {
		p.Contrib = Vector{{Replica: id, PN: e}}
	}
	return p
}

// Portion is LikeRecord.Portion for a keyed record.
func (r *KeyedRecord) Portion(id string) *KeyedRecord {
	p := &KeyedRecord{}
	if r.Origin == id {
		p.HLC, p.Origin, p.Amount, p.Asked, p.At = r.HLC, r.Origin, r.Amount, r.Asked, r.At
	}
	if e := r.Contrib.Get(id); e != (PN{}) {
		p.Contrib = Vector{{Replica: id, PN: e}}
	}
	return p
}

// Covers reports whether v is at least o in every entry (v = v.Merge(o)).
func (v Vector) Covers(o Vector) bool {
	for _, e := range o {
		if !v.Get(e.Replica).Covers(e.PN) {
			return false
		}
	}
	return true
}

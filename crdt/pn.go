package crdt

import (
	"math"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// PN is one replica's entry of a PN-counter: how much it has added (P) and
// removed (N). Both halves only grow.
type PN struct {
	P, N uint64
}

// Merge returns the element-wise max of a and b.
func (a PN) Merge(b PN) PN {
	return PN{P: max(a.P, b.P), N: max(a.N, b.N)}
}

// Covers reports whether a is at least b in both halves (a = a.Merge(b)).
func (a PN) Covers(b PN) bool { return a.P >= b.P && a.N >= b.N }

// Value is P − N. It saturates rather than wrapping, which only matters for
// values no caller can reach through the bounded API.
func (a PN) Value() int64 { return subSat(a.P, a.N) }

// Add returns a with d added to P (d > 0) or to N (d < 0).
func (a PN) Add(d int64) PN {
	if d >= 0 {
		a.P += uint64(d)
	} else {
		a.N += uint64(-d)
	}
	return a
}

// Entry is one replica's PN entry inside a Vector.
type Entry struct {
	Replica string
	PN
}

// Vector is a PN-counter: one entry per replica, sorted by replica id, with
// no duplicate ids and no zero entries. The zero value is an empty counter.
//
// A slice rather than a map keeps the common case (a handful of replicas)
// allocation-light and makes the encoding deterministic.
type Vector []Entry

// Get returns replica r's entry (zero if absent).
func (v Vector) Get(r string) PN {
	if i, ok := v.find(r); ok {
		return v[i].PN
	}
	return PN{}
}

func (v Vector) find(r string) (int, bool) {
	// Vectors are short; a linear scan beats sort.Search below ~16 entries.
	if len(v) <= 16 {
		for i := range v {
			if v[i].Replica >= r {
				return i, v[i].Replica == r
			}
		}
		return len(v), false
	}
	i := sort.Search(len(v), func(i int) bool { return v[i].Replica >= r })
	return i, i < len(v) && v[i].Replica == r
}

// Set returns v with replica r's entry replaced by e (removed if e is zero).
// It is a local write primitive: callers must only Set entries they own, or
// values that are a Merge of what is there.
func (v Vector) Set(r string, e PN) Vector {
	i, ok := v.find(r)
	switch {
	case ok && e == (PN{}):
		return append(v[:i], v[i+1:]...)
	case ok:
		v[i].PN = e
		return v
	case e == (PN{}):
		return v
	}
	v = append(v, Entry{})
	copy(v[i+1:], v[i:])
	v[i] = Entry{Replica: r, PN: e}
	return v
}

// Add returns v with d added to replica r's entry (to P if d > 0, N if d < 0).
func (v Vector) Add(r string, d int64) Vector {
	if d == 0 {
		return v
	}
	return v.Set(r, v.Get(r).Add(d))
}

// Merge returns the element-wise max of v and o, and whether the result
// differs from v. v may be modified in place; o is never modified.
func (v Vector) Merge(o Vector) (Vector, bool) {
	changed := false
	for _, e := range o {
		cur := v.Get(e.Replica)
		if cur.Covers(e.PN) {
			continue
		}
		v = v.Set(e.Replica, cur.Merge(e.PN))
		changed = true
	}
	return v, changed
}

// Value is ΣP − ΣN, saturating at the int64 range. The sums are kept in 128
// bits (a vector has far fewer than 2^64 entries), so only the difference
// saturates: saturating each sum first would lose a small difference
// between two huge sums.
func (v Vector) Value() int64 {
	var pHi, pLo, nHi, nLo, c uint64
	for _, e := range v {
		pLo, c = bits.Add64(pLo, e.P, 0)
		pHi += c
		nLo, c = bits.Add64(nLo, e.N, 0)
		nHi += c
	}
	if pHi > nHi || pHi == nHi && pLo >= nLo {
		lo, b := bits.Sub64(pLo, nLo, 0)
		if pHi-nHi-b != 0 {
			return math.MaxInt64
		}
		return subSat(lo, 0)
	}
	lo, b := bits.Sub64(nLo, pLo, 0)
	if nHi-pHi-b != 0 {
		return math.MinInt64
	}
	return subSat(0, lo)
}

// String shows the entries sorted by replica, as in test scripts and logs:
// {eu:+1-0 us:+2-1}.
func (v Vector) String() string {
	parts := make([]string, 0, len(v))
	for _, e := range v {
		parts = append(parts, e.Replica+":+"+strconv.FormatUint(e.PN.P, 10)+"-"+strconv.FormatUint(e.PN.N, 10))
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, " ") + "}"
}

// Clone returns a copy that shares no memory with v.
func (v Vector) Clone() Vector {
	if v == nil {
		return nil
	}
	return append(Vector(make([]Entry, 0, len(v))), v...)
}

// Equal reports whether v and o hold the same entries.
func (v Vector) Equal(o Vector) bool {
	if len(v) != len(o) {
		return false
	}
	for i := range v {
		if v[i] != o[i] {
			return false
		}
	}
	return true
}

func subSat(p, n uint64) int64 {
	if p >= n {
		if d := p - n; d <= math.MaxInt64 {
			return int64(d)
		}
		return math.MaxInt64
	}
	if d := n - p; d <= math.MaxInt64 {
		return -int64(d)
	}
	return math.MinInt64
}

package crdt

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	mrand "math/rand"
	"reflect"
	"testing"
	"testing/quick"
)

const trials = 3000

func TestPNMergeLaws(t *testing.T) {
	rng := newRand(1)
	for i := range trials {
		a, b, c := randPN(rng, true), randPN(rng, true), randPN(rng, true)
		if ab, ba := a.Merge(b), b.Merge(a); ab != ba {
			t.Fatalf("#%d commutativity: %v.Merge(%v) = %v, reverse = %v", i, a, b, ab, ba)
		}
		if l, r := a.Merge(b).Merge(c), a.Merge(b.Merge(c)); l != r {
			t.Fatalf("#%d associativity: (%v+%v)+%v = %v, %v+(%v+%v) = %v", i, a, b, c, l, a, b, c, r)
		}
		if aa := a.Merge(a); aa != a {
			t.Fatalf("#%d idempotence: %v.Merge(itself) = %v", i, a, aa)
		}
		m := a.Merge(b)
		if !m.Covers(a) || !m.Covers(b) {
			t.Fatalf("#%d %v does not cover both %v and %v", i, m, a, b)
		}
		if want := (PN{P: max(a.P, b.P), N: max(a.N, b.N)}); m != want {
			t.Fatalf("#%d %v.Merge(%v) = %v, want least upper bound %v", i, a, b, m, want)
		}
		// Covers is exactly "merging adds nothing".
		if got, want := a.Covers(b), a.Merge(b) == a; got != want {
			t.Fatalf("#%d %v.Covers(%v) = %v, but Merge is identity = %v", i, a, b, got, want)
		}
	}
}

func TestPNValueAndAdd(t *testing.T) {
	rng := newRand(2)
	for i := range trials {
		a := randPN(rng, true)
		want := new(big.Int).Sub(new(big.Int).SetUint64(a.P), new(big.Int).SetUint64(a.N))
		if got := a.Value(); got != clampBig(want) {
			t.Fatalf("#%d %+v.Value() = %d, want %d", i, a, got, clampBig(want))
		}

		b := PN{P: uint64(rng.IntN(1 << 30)), N: uint64(rng.IntN(1 << 30))}
		d := rng.Int64N(1<<31) - 1<<30
		got := b.Add(d)
		wantP, wantN := b.P, b.N
		if d >= 0 {
			wantP += uint64(d)
		} else {
			wantN += uint64(-d)
		}
		if got != (PN{P: wantP, N: wantN}) {
			t.Fatalf("#%d %+v.Add(%d) = %+v, want {%d %d}", i, b, d, got, wantP, wantN)
		}
		if got.Value() != b.Value()+d {
			t.Fatalf("#%d Value after Add(%d): %d, want %d", i, d, got.Value(), b.Value()+d)
		}
		if !got.Covers(b) {
			t.Fatalf("#%d Add(%d) made the entry shrink: %+v -> %+v", i, d, b, got)
		}
	}
}

func TestPNExtremes(t *testing.T) {
	cases := []struct {
		pn   PN
		want int64
	}{
		{PN{}, 0},
		{PN{P: math.MaxInt64}, math.MaxInt64},
		{PN{P: math.MaxInt64 + 1}, math.MaxInt64},
		{PN{P: math.MaxUint64}, math.MaxInt64},
		{PN{N: math.MaxInt64}, -math.MaxInt64},
		{PN{N: 1 << 63}, math.MinInt64}, // exactly representable
		{PN{N: 1<<63 + 1}, math.MinInt64},
		{PN{N: math.MaxUint64}, math.MinInt64},
		{PN{P: math.MaxUint64, N: math.MaxUint64}, 0},
		{PN{P: math.MaxUint64, N: math.MaxUint64 - 5}, 5},
		{PN{P: 3, N: math.MaxUint64}, math.MinInt64},
	}
	for _, c := range cases {
		if got := c.pn.Value(); got != c.want {
			t.Errorf("%+v.Value() = %d, want %d", c.pn, got, c.want)
		}
	}
	// Add of the most negative delta puts exactly 2^63 into N.
	if got := (PN{}).Add(math.MinInt64); got != (PN{N: 1 << 63}) {
		t.Errorf("Add(MinInt64) = %+v, want N = 2^63", got)
	}
	if got := (PN{}).Add(math.MaxInt64); got != (PN{P: math.MaxInt64}) {
		t.Errorf("Add(MaxInt64) = %+v", got)
	}
}

// vectorsEqualModel compares a Vector with a map model, including the
// invariants the model cannot express.
func vectorsEqualModel(v Vector, m map[string]PN) error {
	if err := checkVector(v); err != nil {
		return err
	}
	if want := fromMap(m); !reflect.DeepEqual(toMap(v), toMap(want)) {
		return fmt.Errorf("vector %v, model %v", v, want)
	}
	return nil
}

func TestVectorMergeLaws(t *testing.T) {
	rng := newRand(3)
	for i := range trials {
		pool := replicaPool(1 + rng.IntN(24)) // > 16 exercises the binary search path
		a := randVector(rng, pool, i%2 == 0)
		b := randVector(rng, pool, i%2 == 0)
		c := randVector(rng, pool, i%2 == 0)
		merge := func(x, y Vector) Vector {
			r, _ := x.Clone().Merge(y)
			return r
		}

		ab, ba := merge(a, b), merge(b, a)
		if !ab.Equal(ba) {
			t.Fatalf("#%d commutativity:\n a=%v\n b=%v\n a+b=%v\n b+a=%v", i, a, b, ab, ba)
		}
		if l, r := merge(merge(a, b), c), merge(a, merge(b, c)); !l.Equal(r) {
			t.Fatalf("#%d associativity:\n a=%v\n b=%v\n c=%v\n (a+b)+c=%v\n a+(b+c)=%v", i, a, b, c, l, r)
		}
		aa, changed := a.Clone().Merge(a)
		if changed || !aa.Equal(a) {
			t.Fatalf("#%d idempotence: a=%v, a+a=%v changed=%v", i, a, aa, changed)
		}

		// The result is the least upper bound: it covers both inputs and
		// every entry is the max of the inputs' entries (nothing more).
		if err := vectorsEqualModel(ab, maxMap(toMap(a), toMap(b))); err != nil {
			t.Fatalf("#%d a=%v b=%v: %v", i, a, b, err)
		}
		if !ab.Covers(a) || !ab.Covers(b) {
			t.Fatalf("#%d %v does not cover %v and %v", i, ab, a, b)
		}

		// changed reports exactly whether the result differs from v.
		_, changed = a.Clone().Merge(b)
		if changed == ab.Equal(a) {
			t.Fatalf("#%d a=%v b=%v: changed=%v but result equal to a is %v", i, a, b, changed, ab.Equal(a))
		}
		// Covers agrees with Merge.
		if a.Covers(b) != ab.Equal(a) {
			t.Fatalf("#%d a=%v b=%v: Covers=%v, merge-is-identity=%v", i, a, b, a.Covers(b), ab.Equal(a))
		}
	}
}

// qVec is a Vector generator for testing/quick (which hands out a math/rand
// v1 source; it seeds the v2 generator the other tests use).
type qVec struct{ V Vector }

func (qVec) Generate(r *mrand.Rand, _ int) reflect.Value {
	rng := newRand(r.Uint64())
	return reflect.ValueOf(qVec{randVector(rng, replicaPool(6), rng.IntN(2) == 0)})
}

func TestVectorMergeQuick(t *testing.T) {
	comm := func(a, b qVec) bool {
		x, _ := a.V.Clone().Merge(b.V)
		y, _ := b.V.Clone().Merge(a.V)
		return x.Equal(y) && checkVector(x) == nil
	}
	assoc := func(a, b, c qVec) bool {
		ab, _ := a.V.Clone().Merge(b.V)
		l, _ := ab.Merge(c.V)
		bc, _ := b.V.Clone().Merge(c.V)
		r, _ := a.V.Clone().Merge(bc)
		return l.Equal(r)
	}
	idem := func(a, b qVec) bool {
		ab, _ := a.V.Clone().Merge(b.V)
		again, changed := ab.Clone().Merge(b.V)
		self, changedSelf := ab.Clone().Merge(ab)
		return !changed && again.Equal(ab) && !changedSelf && self.Equal(ab)
	}
	for i, f := range []any{comm, assoc, idem} {
		cfg := &quick.Config{MaxCount: 2000, Rand: mrand.New(mrand.NewSource(int64(8 + i)))}
		if err := quick.Check(f, cfg); err != nil {
			t.Errorf("law %d: %v", i, err)
		}
	}
}

func TestVectorValueModel(t *testing.T) {
	rng := newRand(4)
	for i := range trials {
		pool := replicaPool(1 + rng.IntN(20))
		m := randVectorMap(rng, pool, i%3 != 0)
		v := fromMap(m)
		if got, want := v.Value(), modelValue(m); got != want {
			t.Fatalf("#%d %v.Value() = %d, want %d", i, v, got, want)
		}
	}
}

func TestVectorValueSaturation(t *testing.T) {
	const M = math.MaxUint64
	cases := []struct {
		v    Vector
		want int64
	}{
		{nil, 0},
		{Vector{{"a", PN{P: M}}, {"b", PN{P: M}}}, math.MaxInt64},
		{Vector{{"a", PN{N: M}}, {"b", PN{N: M}}}, math.MinInt64},
		{Vector{{"a", PN{P: math.MaxInt64}}, {"b", PN{P: 1}}}, math.MaxInt64},
		{Vector{{"a", PN{N: 1 << 62}}, {"b", PN{N: 1 << 62}}}, math.MinInt64},
		{Vector{{"a", PN{N: 1 << 62}}, {"b", PN{N: 1<<62 + 1}}}, math.MinInt64},
		// ΣP and ΣN both exceed 2^64 but their difference is small: the
		// result must be that difference, not whatever saturated sums give.
		{Vector{{"a", PN{P: M}}, {"b", PN{P: 5, N: M}}}, 5},
		{Vector{{"a", PN{P: M, N: M}}, {"b", PN{P: M, N: M - 7}}}, 7},
		{Vector{{"a", PN{P: 2, N: M}}, {"b", PN{P: M}}}, 2},
		{Vector{{"a", PN{P: M}}, {"b", PN{N: M}}, {"c", PN{N: 3}}}, -3},
		{Vector{{"a", PN{P: M}}, {"b", PN{P: M}}, {"c", PN{N: M}}}, math.MaxInt64},
	}
	for _, c := range cases {
		if got := c.v.Value(); got != c.want {
			t.Errorf("%v.Value() = %d, want %d", c.v, got, c.want)
		}
		if want := modelValue(toMap(c.v)); want != c.want {
			t.Fatalf("test case disagrees with model: %v: %d vs %d", c.v, c.want, want)
		}
	}
}

func TestVectorSetAddGet(t *testing.T) {
	rng := newRand(5)
	for round := range 300 {
		pool := replicaPool(1 + rng.IntN(40))
		var v Vector
		m := map[string]PN{}
		for op := range 60 {
			r := pool[rng.IntN(len(pool))]
			switch rng.IntN(4) {
			case 0: // Set to a random, possibly zero, entry
				e := randPN(rng, false)
				v = v.Set(r, e)
				if e == (PN{}) {
					delete(m, r)
				} else {
					m[r] = e
				}
			case 1: // Set to zero removes
				v = v.Set(r, PN{})
				delete(m, r)
			default: // Add, including 0
				d := rng.Int64N(7) - 3
				v = v.Add(r, d)
				e := m[r]
				if d > 0 {
					e.P += uint64(d)
				} else {
					e.N += uint64(-d)
				}
				if e != (PN{}) {
					m[r] = e
				}
			}
			if err := vectorsEqualModel(v, m); err != nil {
				t.Fatalf("round %d op %d: %v", round, op, err)
			}
			for _, q := range pool {
				if got := v.Get(q); got != m[q] {
					t.Fatalf("round %d op %d: Get(%q) = %v, model %v", round, op, q, got, m[q])
				}
			}
			if v.Get("~absent") != (PN{}) || v.Get("") != (PN{}) {
				t.Fatalf("Get of an absent replica is not zero")
			}
			if got, want := v.Value(), modelValue(m); got != want {
				t.Fatalf("round %d op %d: Value = %d, model %d", round, op, got, want)
			}
		}
	}
}

func TestVectorMergeDoesNotModifyArg(t *testing.T) {
	rng := newRand(6)
	for i := range trials {
		pool := replicaPool(1 + rng.IntN(24))
		v := randVector(rng, pool, false)
		o := randVector(rng, pool, false)
		// Give v spare capacity so in-place growth is possible.
		v = append(make(Vector, 0, len(v)+len(pool)), v...)
		snap := toMap(o)
		snapSlice := append(Vector(nil), o...)
		got, _ := v.Merge(o)
		if !reflect.DeepEqual(toMap(o), snap) || !o.Equal(snapSlice) {
			t.Fatalf("#%d Merge modified its argument: before %v, after %v", i, snapSlice, o)
		}
		// The result must not share memory with o either: writing it must
		// leave o alone.
		for j := range got {
			got[j].P += 100
		}
		if !o.Equal(snapSlice) {
			t.Fatalf("#%d result of Merge aliases its argument", i)
		}
	}
	// Merge into nil and into empty.
	o := Vector{{"a", PN{1, 2}}, {"b", PN{3, 0}}}
	for _, v := range []Vector{nil, {}} {
		got, changed := v.Merge(o)
		if !changed || !got.Equal(o) {
			t.Errorf("%#v.Merge(%v) = %v, %v", v, o, got, changed)
		}
		got[0].P = 99
		if o[0].P != 1 {
			t.Errorf("result of merging into %#v aliases the argument", v)
		}
	}
	if got, changed := o.Clone().Merge(nil); changed || !got.Equal(o) {
		t.Errorf("Merge(nil) = %v, %v", got, changed)
	}
}

func TestVectorCloneEqualCovers(t *testing.T) {
	if Vector(nil).Clone() != nil {
		t.Errorf("Clone(nil) is not nil")
	}
	rng := newRand(7)
	for i := range 500 {
		pool := replicaPool(1 + rng.IntN(10))
		v := randVector(rng, pool, false)
		c := v.Clone()
		if !c.Equal(v) {
			t.Fatalf("#%d clone %v != %v", i, c, v)
		}
		if len(v) > 0 {
			c[0].N += 1
			if c.Equal(v) || v[0].N == c[0].N {
				t.Fatalf("#%d clone shares memory with the original", i)
			}
			c = c.Add(pool[rng.IntN(len(pool))], 1)
			c = c.Add("zz-new", 1)
			if v.Get("zz-new") != (PN{}) || c.Get("zz-new") != (PN{P: 1}) {
				t.Fatalf("#%d growing the clone changed the original", i)
			}
		}
		w := randVector(rng, pool, false)
		if got, want := v.Equal(w), maps.Equal(toMap(v), toMap(w)); got != want {
			t.Fatalf("#%d %v.Equal(%v) = %v, want %v", i, v, w, got, want)
		}
		covers := true
		for r, e := range toMap(w) {
			ve := toMap(v)[r]
			if ve.P < e.P || ve.N < e.N {
				covers = false
			}
		}
		if got := v.Covers(w); got != covers {
			t.Fatalf("#%d %v.Covers(%v) = %v, want %v", i, v, w, got, covers)
		}
	}
	if !Vector(nil).Equal(Vector{}) {
		t.Errorf("nil and empty vectors differ")
	}
}

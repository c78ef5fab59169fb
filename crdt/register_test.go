package crdt

import (
	"math/rand/v2"
	"testing"
)

// randTypeMeta draws type metadata from a small space, so that ties in
// HLC and origin, and corrupt pairs (two values under one stamp), happen
// often.
func randTypeMeta(rng *rand.Rand) TypeMeta {
	if rng.IntN(5) == 0 {
		return TypeMeta{}
	}
	return TypeMeta{Value: TypeInfo{Owner: []string{"", "a", "b"}[rng.IntN(3)], Status: []string{TypeActive, TypeInactive}[rng.IntN(2)],
		Description: []string{"", "x"}[rng.IntN(2)]}, HLC: MakeHLC(1_700_000_000_000+rng.Int64N(3), uint16(rng.IntN(2))),
		Origin: []string{"a", "b", "c"}[rng.IntN(3)]}
}

// checkRegisterLaws checks the lattice laws of Register.Merge over values
// drawn by draw: commutative, associative, idempotent, the merge is one of
// its inputs and never the one with the smaller stamp, and Merge reports a
// change exactly when the register changed.
func checkRegisterLaws[V RegisterValue[V]](t *testing.T, rng *rand.Rand, draw func(*rand.Rand) Register[V]) {
	t.Helper()
	merged := func(a, b Register[V]) Register[V] {
		a.Merge(b)
		return a
	}
	for range 20000 {
		a, b, c := draw(rng), draw(rng), draw(rng)
		if ab, ba := merged(a, b), merged(b, a); ab != ba {
			t.Fatalf("not commutative: %+v ⊔ %+v = %+v, reversed %+v", a, b, ab, ba)
		}
		if l, r := merged(merged(a, b), c), merged(a, merged(b, c)); l != r {
			t.Fatalf("not associative: %+v %+v %+v: %+v vs %+v", a, b, c, l, r)
		}
		if aa := merged(a, a); aa != a {
			t.Fatalf("not idempotent: %+v ⊔ itself = %+v", a, aa)
		}
		m := merged(a, b)
		if m != a && m != b {
			t.Fatalf("merge %+v of %+v and %+v is neither", m, a, b)
		}
		if a.HLC > b.HLC && m != a || b.HLC > a.HLC && m != b {
			t.Fatalf("merge of %+v and %+v kept %+v, not the later stamp", a, b, m)
		}
		if !a.IsZero() && merged(a, Register[V]{}) != a {
			t.Fatalf("the zero register beat %+v", a)
		}
		x := a
		if changed := x.Merge(b); changed != (x != a) {
			t.Fatalf("Merge(%+v, %+v) changed=%v, value %+v", a, b, changed, x)
		}
	}
}

func TestRegisterMergeLaws(t *testing.T) {
	t.Run("flag", func(t *testing.T) { checkRegisterLaws(t, newRand(73), randFlag) })
	t.Run("type", func(t *testing.T) { checkRegisterLaws(t, newRand(74), randTypeMeta) })
}

// TestRegisterRecord: a register is a Record with no contributions, which
// AppendRecord encodes as its own encoding, and a provenance cut keeps
// only what the origin may speak for.
func TestRegisterRecord(t *testing.T) {
	m := TypeMeta{Value: TypeInfo{Owner: "o", Status: TypeActive}, HLC: 7, Origin: "a"}
	var rec Record = &m
	if rec.Excess() != 0 || rec.Contributions() != nil || rec.Empty() {
		t.Fatalf("register as a record: excess %d, contributions %v, empty %v", rec.Excess(), rec.Contributions(), rec.Empty())
	}
	if h, o := rec.Stamp(); h != 7 || o != "a" {
		t.Fatalf("stamp %v %q", h, o)
	}
	if got, want := AppendRecord(nil, rec), AppendTypeMeta(nil, m); string(got) != string(want) {
		t.Fatalf("AppendRecord % x, AppendTypeMeta % x", got, want)
	}
	f := Flag{Value: Block{Blocked: true}, HLC: 7, Origin: "a"}
	if got, want := AppendRecord(nil, &f), AppendFlag(nil, f); string(got) != string(want) {
		t.Fatalf("AppendRecord % x, AppendFlag % x", got, want)
	}
	if out, cut := m.Restrict(func(id string) bool { return id == "a" }); cut || *out != m {
		t.Fatalf("restrict to its origin: %+v, cut %v", out, cut)
	}
	if out, cut := m.Restrict(func(id string) bool { return id == "b" }); !cut || !out.IsZero() {
		t.Fatalf("restrict to another replica: %+v, cut %v", out, cut)
	}
}

// The generic decoder, for both value types: fuzzRegister's checks, and a
// register decodes only with a stamp consistent with its value.
func FuzzDecodeRegisterFlag(f *testing.F) {
	rng := newRand(75)
	for range 8 {
		f.Add(AppendRegister(nil, randFlag(rng)))
	}
	f.Add([]byte{1, 1, 0, 0})
	f.Add([]byte{1, 0, 1, 0})
	fuzzRegister(f, decodeRegisterPtr[Block], appendRegisterPtr[Block], registerEqual[Block], func(r *Flag) (Vector, bool) {
		return nil, (r.Origin == "") != (r.HLC == 0) || r.Value.Blocked && r.HLC == 0 || r.Origin != "" && !ValidID(r.Origin)
	})
}

func FuzzDecodeRegisterType(f *testing.F) {
	rng := newRand(76)
	for range 8 {
		if m := randTypeMeta(rng); !m.IsZero() {
			f.Add(AppendRegister(nil, m))
		}
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	fuzzRegister(f, decodeRegisterPtr[TypeInfo], appendRegisterPtr[TypeInfo], registerEqual[TypeInfo], func(r *TypeMeta) (Vector, bool) {
		return nil, r.HLC == 0 || !ValidID(r.Origin) || ValidTypeTexts(r.Value.Owner, r.Value.Status, r.Value.Description) != ""
	})
}

func decodeRegisterPtr[V RegisterValue[V]](b []byte) (*Register[V], error) {
	r, err := DecodeRegister[V](b)
	return &r, err
}

func appendRegisterPtr[V RegisterValue[V]](dst []byte, r *Register[V]) []byte {
	return AppendRegister(dst, *r)
}

func registerEqual[V RegisterValue[V]](a, b *Register[V]) bool { return *a == *b }

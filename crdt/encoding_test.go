package crdt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// Byte-building helpers for hand-made encodings.
func uv(x uint64) []byte { return binary.AppendUvarint(nil, x) }

func str(s string) []byte { return append(uv(uint64(len(s))), s...) }

func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case int:
			b = append(b, byte(p))
		case rune:
			b = append(b, byte(p))
		case []byte:
			b = append(b, p...)
		case string:
			b = append(b, str(p)...)
		default:
			panic(fmt.Sprintf("cat: %T", p))
		}
	}
	return b
}

// randEncVector draws vectors for encoding tests: random valid ids of any
// length up to MaxIDLen, sometimes more than 16 entries, extreme values.
func randEncVector(rng *rand.Rand) Vector {
	n := rng.IntN(6)
	if rng.IntN(8) == 0 {
		n = 17 + rng.IntN(30)
	}
	m := map[string]PN{}
	for range n {
		maxLen := 4
		if rng.IntN(4) == 0 {
			maxLen = MaxIDLen
		}
		e := randPN(rng, true)
		if e == (PN{}) {
			e.N = 1
		}
		m[randID(rng, maxLen)] = e
	}
	return fromMap(m)
}

func randEncRecord(rng *rand.Rand) *LikeRecord {
	r := &LikeRecord{Contrib: randEncVector(rng)}
	if rng.IntN(6) != 0 {
		r.Liked = rng.IntN(2) == 0
		r.HLC = HLC(randUint(rng, true))
		if r.HLC == 0 {
			r.HLC = 1
		}
		r.Origin = randID(rng, []int{3, MaxIDLen}[rng.IntN(2)])
		if rng.IntN(3) == 0 {
			r.At = int64(1 + rng.Uint64N(1<<47))
		}
		if rng.IntN(3) == 0 {
			r.Idem = randID(rng, []int{3, MaxIDLen}[rng.IntN(2)])
		}
	}
	return r
}

func randEncKeyed(rng *rand.Rand) *KeyedRecord {
	r := &KeyedRecord{Contrib: randEncVector(rng)}
	if rng.IntN(6) != 0 {
		r.HLC = HLC(randUint(rng, true))
		if r.HLC == 0 {
			r.HLC = 1
		}
		r.Origin = randID(rng, []int{3, MaxIDLen}[rng.IntN(2)])
		r.Amount = int64(randUint(rng, true))
		if a := int64(randUint(rng, true)); rng.IntN(2) == 0 && a != 0 && a != r.Amount {
			r.Asked = a // an approximate counter's decision
		}
		if rng.IntN(3) == 0 {
			r.At = int64(1 + rng.Uint64N(1<<47))
		}
		if rng.IntN(5) == 0 {
			r.Amount, r.Asked, r.Fenced = 0, 0, true // a fence
		}
	}
	return r
}

func TestEncodingLayout(t *testing.T) {
	// The documented wire layout, pinned byte for byte: changing it needs a
	// new format version.
	cases := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"pn zero", AppendPN(nil, PN{}), []byte{1, 0, 0}},
		{"pn", AppendPN(nil, PN{P: 1, N: 300}), []byte{1, 1, 0xac, 0x02}},
		{"vector empty", AppendVector(nil, nil), []byte{1, 0}},
		{"vector", AppendVector(nil, Vector{{"a", PN{P: 2}}, {"bc", PN{N: 1}}}),
			[]byte{1, 2, 1, 'a', 2, 0, 2, 'b', 'c', 0, 1}},
		{"record zero", AppendLikeRecord(nil, &LikeRecord{}), []byte{1, 0, 0, 0, 0}},
		{"record", AppendLikeRecord(nil, &LikeRecord{Liked: true, HLC: MakeHLC(1, 2), Origin: "us", Contrib: Vector{{"us", PN{P: 1}}}}),
			cat(1, 1, uv(1<<16|2), "us", 1, "us", 1, 0)},
		{"keyed record, approximate", AppendKeyedRecord(nil, &KeyedRecord{HLC: MakeHLC(1, 2), Origin: "us",
			Amount: 64, Asked: 1, Contrib: Vector{{"us", PN{P: 64}}}}),
			cat(1, 1|2|8, uv(1<<16|2), "us", uv(128), 2, 1, "us", uv(64), 0)},
		{"keyed record, no register", AppendKeyedRecord(nil, &KeyedRecord{Contrib: Vector{{"us", PN{P: 1}}}}),
			cat(1, 2, 0, "", 1, "us", 1, 0)},
		{"spend", AppendSpend(nil, &Spend{HLC: MakeHLC(1, 2), Origin: "us", Amount: -3, Contrib: Vector{{"us", PN{N: 3}}}}),
			cat(1, 1|2, uv(1<<16|2), "us", uv(5), 1, "us", 0, 3)},
	}
	for _, c := range cases {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: % x, want % x", c.name, c.got, c.want)
		}
	}
}

func TestRoundTripPN(t *testing.T) {
	rng := newRand(40)
	for i := range 5000 {
		e := randPN(rng, true)
		prefix := []byte(strings.Repeat("x", rng.IntN(4)))
		b := AppendPN(bytes.Clone(prefix), e)
		if !bytes.HasPrefix(b, prefix) {
			t.Fatalf("#%d AppendPN clobbered dst", i)
		}
		got, err := DecodePN(b[len(prefix):])
		if err != nil || got != e {
			t.Fatalf("#%d DecodePN(AppendPN(%+v)) = %+v, %v", i, e, got, err)
		}
	}
}

func TestRoundTripVector(t *testing.T) {
	rng := newRand(41)
	for i := range 3000 {
		v := randEncVector(rng)
		prefix := []byte(strings.Repeat("x", rng.IntN(4)))
		b := AppendVector(bytes.Clone(prefix), v)
		if !bytes.HasPrefix(b, prefix) {
			t.Fatalf("#%d AppendVector clobbered dst", i)
		}
		got, err := DecodeVector(b[len(prefix):])
		if err != nil || !got.Equal(v) {
			t.Fatalf("#%d DecodeVector(AppendVector(%v)) = %v, %v", i, v, got, err)
		}
		if err := checkVector(got); err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
	}
}

func TestRoundTripLikeRecord(t *testing.T) {
	rng := newRand(42)
	for i := range 3000 {
		r := randEncRecord(rng)
		prefix := []byte(strings.Repeat("x", rng.IntN(4)))
		b := AppendLikeRecord(bytes.Clone(prefix), r)
		if !bytes.HasPrefix(b, prefix) {
			t.Fatalf("#%d AppendLikeRecord clobbered dst", i)
		}
		got, err := DecodeLikeRecord(b[len(prefix):])
		if err != nil || !got.Equal(r) {
			t.Fatalf("#%d DecodeLikeRecord(AppendLikeRecord(%+v)) = %+v, %v", i, r, got, err)
		}
	}
}

func TestRoundTripKeyedRecordAndSpend(t *testing.T) {
	rng := newRand(45)
	for i := range 3000 {
		r := randEncKeyed(rng)
		b := AppendKeyedRecord(nil, r)
		got, err := DecodeKeyedRecord(b)
		if err != nil || !got.Equal(r) {
			t.Fatalf("#%d DecodeKeyedRecord(AppendKeyedRecord(%+v)) = %+v, %v", i, r, got, err)
		}
		// A spend is the same lattice and the same bytes.
		s := (*Spend)(r)
		if sb := AppendSpend(nil, s); !bytes.Equal(sb, b) {
			t.Fatalf("#%d spend encodes as % x, keyed record as % x", i, sb, b)
		}
		if got, err := DecodeSpend(b); err != nil || !got.Equal(s) {
			t.Fatalf("#%d DecodeSpend(AppendSpend(%+v)) = %+v, %v", i, s, got, err)
		}
	}
}

func TestEncodingDeterministic(t *testing.T) {
	rng := newRand(43)
	pool := replicaPool(20)
	for i := range 2000 {
		// The same contents reached by different routes: Set in shuffled
		// orders, and merges of overlapping parts in either order.
		m := randVectorMap(rng, pool, true)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		var x, y Vector
		for _, j := range rng.Perm(len(keys)) {
			x = x.Set(keys[j], m[keys[j]])
		}
		for _, j := range rng.Perm(len(keys)) {
			y = y.Set(keys[j], PN{P: 1}) // overwritten below
			y = y.Set(keys[j], m[keys[j]])
		}
		half1, half2 := Vector(nil), Vector(nil)
		for j, k := range keys {
			if j%2 == 0 || rng.IntN(3) == 0 {
				half1 = half1.Set(k, m[k])
			}
			if j%2 == 1 || rng.IntN(3) == 0 {
				half2 = half2.Set(k, m[k])
			}
		}
		z, _ := half2.Clone().Merge(half1)
		want := AppendVector(nil, fromMap(m))
		for name, v := range map[string]Vector{"set": x, "set twice": y, "merge": z} {
			if got := AppendVector(nil, v); !bytes.Equal(got, want) {
				t.Fatalf("#%d %s: % x, want % x", i, name, got, want)
			}
		}

		// Equal records give equal bytes; different ones different bytes.
		a, b := randRecord(rng, pool[:3]), randRecord(rng, pool[:3])
		ea, eb := AppendLikeRecord(nil, a), AppendLikeRecord(nil, b)
		if a.Equal(b) != bytes.Equal(ea, eb) {
			t.Fatalf("#%d records %+v / %+v: equal=%v but bytes equal=%v", i, a, b, a.Equal(b), bytes.Equal(ea, eb))
		}
		if !bytes.Equal(ea, AppendLikeRecord(nil, a.Clone())) {
			t.Fatalf("#%d clone encodes differently", i)
		}
		ka, kb := randKeyedRecord(rng, pool[:3]), randKeyedRecord(rng, pool[:3])
		eka, ekb := AppendKeyedRecord(nil, ka), AppendKeyedRecord(nil, kb)
		if ka.Equal(kb) != bytes.Equal(eka, ekb) {
			t.Fatalf("#%d keyed records %+v / %+v: equal=%v but bytes equal=%v", i, ka, kb, ka.Equal(kb), bytes.Equal(eka, ekb))
		}
		if !bytes.Equal(eka, AppendKeyedRecord(nil, ka.Clone())) {
			t.Fatalf("#%d keyed clone encodes differently", i)
		}
		va, vb := randVector(rng, pool[:4], false), randVector(rng, pool[:4], false)
		if va.Equal(vb) != bytes.Equal(AppendVector(nil, va), AppendVector(nil, vb)) {
			t.Fatalf("#%d vectors %v / %v: equality and byte equality disagree", i, va, vb)
		}
	}
	if !bytes.Equal(AppendVector(nil, nil), AppendVector(nil, Vector{})) {
		t.Errorf("nil and empty vectors encode differently")
	}
}

type decodeFn func([]byte) error

var (
	decPN       decodeFn = func(b []byte) error { _, err := DecodePN(b); return err }
	decVector   decodeFn = func(b []byte) error { _, err := DecodeVector(b); return err }
	decRecord   decodeFn = func(b []byte) error { _, err := DecodeLikeRecord(b); return err }
	decKeyed    decodeFn = func(b []byte) error { _, err := DecodeKeyedRecord(b); return err }
	decSpend    decodeFn = func(b []byte) error { _, err := DecodeSpend(b); return err }
	decAnySpend decodeFn = func(b []byte) error { _, err := DecodeRecord(b, true); return err }
)

func TestDecodeRejects(t *testing.T) {
	long := strings.Repeat("a", MaxIDLen+1)
	overflow := cat(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02) // > 64 bits
	tooLong := cat(0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01)
	var many []byte // maxEntries+1 entries, sorted and valid apart from the count
	for i := range maxEntries + 1 {
		many = append(many, cat(fmt.Sprintf("%05d", i), 1, 0)...)
	}
	cases := []struct {
		name string
		dec  decodeFn
		in   []byte
	}{
		{"pn empty", decPN, nil},
		{"pn version 0", decPN, cat(0, 0, 0)},
		{"pn version 2", decPN, cat(2, 0, 0)},
		{"pn version 255", decPN, cat(255, 0, 0)},
		{"pn no N", decPN, cat(1, 5)},
		{"pn cut varint", decPN, cat(1, 0x80)},
		{"pn trailing", decPN, cat(1, 0, 0, 0)},
		{"pn varint overflow", decPN, cat(1, overflow, 0)},
		{"pn varint too long", decPN, cat(1, tooLong, 0)},
		{"pn overlong zero", decPN, cat(1, 0x80, 0x00, 0)},
		{"pn overlong one", decPN, cat(1, 1, 0x81, 0x80, 0x00)},

		{"vector empty", decVector, nil},
		{"vector version 0", decVector, cat(0, 0)},
		{"vector version 2", decVector, cat(2, 0)},
		{"vector no count", decVector, cat(1)},
		{"vector trailing", decVector, cat(1, 0, 0)},
		{"vector trailing after entry", decVector, cat(1, 1, "a", 1, 0, 7)},
		{"vector truncated entry", decVector, cat(1, 1, "a", 1)},
		{"vector truncated id", decVector, cat(1, 1, 3, 'a', 'b')},
		{"vector unsorted", decVector, cat(1, 2, "b", 1, 0, "a", 1, 0)},
		{"vector duplicate", decVector, cat(1, 2, "a", 1, 0, "a", 2, 0)},
		{"vector zero entry", decVector, cat(1, 1, "a", 0, 0)},
		{"vector zero entry after valid", decVector, cat(1, 2, "a", 1, 0, "b", 0, 0)},
		{"vector empty id", decVector, cat(1, 1, "", 1, 0, 0)},
		{"vector id slash", decVector, cat(1, 1, "a/b", 1, 0)},
		{"vector id space", decVector, cat(1, 1, "a b", 1, 0)},
		{"vector id NUL", decVector, cat(1, 1, "a\x00", 1, 0)},
		{"vector id unicode", decVector, cat(1, 1, "é", 1, 0)},
		{"vector id invalid utf8", decVector, cat(1, 1, "\xff", 1, 0)},
		{"vector id too long", decVector, cat(1, 1, long, 1, 0)},
		{"vector count more than bytes", decVector, cat(1, 2, "a", 1, 0)},
		{"vector count huge", decVector, cat(1, uv(1<<62), "a", 1, 0)},
		{"vector count max", decVector, cat(1, uv(math.MaxUint64), "a", 1, 0)},
		{"vector count over maxEntries", decVector, cat(1, uv(maxEntries+1), many)},
		{"vector id length huge", decVector, cat(1, 1, uv(1<<40), "abcdefgh")},
		{"vector id length max", decVector, cat(1, 1, uv(math.MaxUint64), "abcdefgh")},
		{"vector overlong count", decVector, cat(1, 0x81, 0x00, "a", 1, 0)},
		{"vector overlong P", decVector, cat(1, 1, "a", 0x81, 0x00, 0)},

		{"record empty", decRecord, nil},
		{"record version 0", decRecord, cat(0, 0, 0, 0, 0)},
		{"record version 2", decRecord, cat(2, 0, 0, 0, 0)},
		{"record no flags", decRecord, cat(1)},
		{"record no hlc", decRecord, cat(1, 0)},
		{"record no origin", decRecord, cat(1, 0, 0)},
		{"record no contrib", decRecord, cat(1, 0, 0, 0)},
		{"record trailing", decRecord, cat(1, 0, 0, 0, 0, 0)},
		{"record unknown flag", decRecord, cat(1, 2, 5, "a", 0)},
		{"record unknown high flag", decRecord, cat(1, 0x81, 5, "a", 0)},
		{"record origin without hlc", decRecord, cat(1, 1, 0, "a", 0)},
		{"record hlc without origin", decRecord, cat(1, 1, 5, "", 0)},
		{"record bad origin", decRecord, cat(1, 1, 5, "a/b", 0)},
		{"record origin space", decRecord, cat(1, 1, 5, " ", 0)},
		{"record origin too long", decRecord, cat(1, 1, 5, long, 0)},
		{"record origin length huge", decRecord, cat(1, 1, 5, uv(1<<50), "abc", 0)},
		{"record hlc overflow", decRecord, cat(1, 1, overflow, "a", 0)},
		{"record overlong hlc", decRecord, cat(1, 1, 0x85, 0x00, "a", 0)},
		{"record contrib unsorted", decRecord, cat(1, 1, 5, "a", 2, "b", 1, 0, "a", 1, 0)},
		{"record contrib zero", decRecord, cat(1, 1, 5, "a", 1, "a", 0, 0)},
		{"record contrib count huge", decRecord, cat(1, 1, 5, "a", uv(1<<60), "a", 1, 0)},

		// Each kind's decoder takes its own kind only; a spend's name on a
		// like record is corrupt.
		{"keyed as like record", decRecord, cat(1, 1|2, 5, "a", 2, 1, "a", 1, 0)},
		{"keyed portion as like record", decRecord, cat(1, 2, 0, "", 1, "a", 1, 0)},
		{"like as keyed record", decKeyed, cat(1, 1, 5, "a", 1, "a", 1, 0)},
		{"zero like as keyed record", decKeyed, cat(1, 0, 0, 0, 0)},
		{"like as spend", decSpend, cat(1, 1, 5, "a", 1, "a", 1, 0)},
		{"like under a spend's name", decAnySpend, cat(1, 1, 5, "a", 1, "a", 1, 0)},
		{"keyed not applied", decKeyed, cat(1, 2, 5, "a", 2, 0)},
		{"asked on a like record", decRecord, cat(1, 1|8, 5, "a", 2, 0)},
		// A toggle's key: a like record's register field, an id.
		{"idem without a register", decRecord, cat(1, 16, 0, "", "k", 0)},
		{"idem on a keyed record", decRecord, cat(1, 1|2|16, 5, "a", 2, "k", 0)},
		{"idem empty", decRecord, cat(1, 1|16, 5, "a", "", 0)},
		{"idem bad id", decRecord, cat(1, 1|16, 5, "a", "a/b", 0)},
		{"idem too long", decRecord, cat(1, 1|16, 5, "a", long, 0)},
		{"idem truncated", decRecord, cat(1, 1|16, 5, "a")},
	}
	for _, c := range cases {
		err := c.dec(c.in)
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s (% x): err = %v, want ErrCorrupt", c.name, c.in, err)
		}
	}
}

func TestDecodeAcceptsBoundaries(t *testing.T) {
	maxID := strings.Repeat("Z", MaxIDLen)
	var full Vector // exactly maxEntries entries
	for i := range maxEntries {
		full = append(full, Entry{Replica: fmt.Sprintf("%05d", i), PN: PN{P: 1}})
	}
	cases := []struct {
		name string
		in   []byte
		dec  func([]byte) (any, error)
		want any
	}{
		{"empty vector", cat(1, 0), vecAny, Vector(nil)},
		{"max id", cat(1, 1, maxID, 1, 0), vecAny, Vector{{maxID, PN{P: 1}}}},
		{"maxEntries", AppendVector(nil, full), vecAny, full},
		{"max uvarint", cat(1, uv(math.MaxUint64), uv(math.MaxUint64)), pnAny, PN{P: math.MaxUint64, N: math.MaxUint64}},
		{"zero record", cat(1, 0, 0, 0, 0), recAny, LikeRecord{}},
		{"zero hlc with contrib", cat(1, 0, 0, 0, 1, "a", 0, 1), recAny, LikeRecord{Contrib: Vector{{"a", PN{N: 1}}}}},
		{"max origin", cat(1, 1, uv(math.MaxUint64), maxID, 0), recAny, LikeRecord{Liked: true, HLC: math.MaxUint64, Origin: maxID}},
	}
	for _, c := range cases {
		got, err := c.dec(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func vecAny(b []byte) (any, error) { return DecodeVector(b) }
func pnAny(b []byte) (any, error)  { return DecodePN(b) }
func recAny(b []byte) (any, error) {
	r, err := DecodeLikeRecord(b)
	if err != nil {
		return nil, err
	}
	return *r, nil
}

// TestDecodeRejectsTruncationAndTrailing cuts random valid encodings at
// every length and appends every kind of trailing byte.
func TestDecodeRejectsTruncationAndTrailing(t *testing.T) {
	rng := newRand(44)
	for i := range raceTrials(300) {
		encs := []struct {
			name string
			dec  decodeFn
			b    []byte
		}{
			{"pn", decPN, AppendPN(nil, randPN(rng, true))},
			{"vector", decVector, AppendVector(nil, randEncVector(rng))},
			{"record", decRecord, AppendLikeRecord(nil, randEncRecord(rng))},
			{"keyed record", decKeyed, AppendKeyedRecord(nil, randEncKeyed(rng))},
			{"spend", decSpend, AppendSpend(nil, (*Spend)(randEncKeyed(rng)))},
		}
		for _, e := range encs {
			if err := e.dec(e.b); err != nil {
				t.Fatalf("#%d %s: valid encoding rejected: %v", i, e.name, err)
			}
			for n := range len(e.b) {
				if err := e.dec(e.b[:n]); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("#%d %s cut to %d of %d bytes: err = %v", i, e.name, n, len(e.b), err)
				}
			}
			extra := append(bytes.Clone(e.b), byte(rng.IntN(256)))
			if err := e.dec(extra); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("#%d %s with a trailing byte: err = %v", i, e.name, err)
			}
			// Any other version byte is rejected.
			bad := bytes.Clone(e.b)
			bad[0] = byte(2 + rng.IntN(254))
			if rng.IntN(2) == 0 {
				bad[0] = 0
			}
			if err := e.dec(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("#%d %s with version %d: err = %v", i, e.name, bad[0], err)
			}
		}
	}
}

func TestDecodeLikeRecordRejectsLikedWithoutTimestamp(t *testing.T) {
	// version 1, flags liked, hlc 0, empty origin, empty contrib
	if _, err := DecodeLikeRecord([]byte{1, 1, 0, 0, 0}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	// The same record not liked is the zero record and decodes.
	if _, err := DecodeLikeRecord([]byte{1, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
}

package milestone

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in   string
		hits []uint64
		miss []uint64
		str  string
	}{
		{"", nil, []uint64{1, 10, 1000}, ""},
		{"1000, 1_000_000", []uint64{1000, 1000000}, []uint64{10, 100, 999, 1001, 10000}, "1000,1000000"},
		{"10^k", []uint64{10, 100, 1000, 1e12}, []uint64{1, 20, 110, 1001, 99}, "10^k"},
		{"every:500,7", []uint64{7, 500, 1000, 1500}, []uint64{1, 499, 501, 14}, "7,every:500"},
	} {
		r, err := ParseRule(tc.in)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", tc.in, err)
		}
		for _, n := range tc.hits {
			if !r.Hit(n) {
				t.Errorf("%q: %d should be a milestone", tc.in, n)
			}
		}
		for _, n := range tc.miss {
			if r.Hit(n) {
				t.Errorf("%q: %d should not be a milestone", tc.in, n)
			}
		}
		if r.String() != tc.str || r.Empty() != (tc.str == "") {
			t.Errorf("%q: String %q Empty %v", tc.in, r.String(), r.Empty())
		}
	}
	for _, bad := range []string{"x", "0", "-5", "every:", "every:0", "10^j", "1e6"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) accepted", bad)
		}
	}
}

// TestUptoAgreesWithHit: Upto lists exactly the numbers Hit accepts.
func TestUptoAgreesWithHit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, in := range []string{"10^k", "every:37", "5,99,1000,10^k,every:250"} {
		r, _ := ParseRule(in)
		n := uint64(1 + rng.IntN(20000))
		var want []uint64
		for i := uint64(1); i <= n; i++ {
			if r.Hit(i) {
				want = append(want, i)
			}
		}
		if got := r.Upto(n); !slices.Equal(got, want) {
			t.Fatalf("%q Upto(%d) = %v, want %v", in, n, got, want)
		}
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(encodeEvent(Event{Sequence: "likes", Number: 1000, Item: "p", User: "u", Region: "us", Replica: "us-1"}))
	f.Add([]byte(`{"sequence":"likes","number":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEvent(b)
		if err != nil {
			return
		}
		back, err := DecodeEvent(encodeEvent(e))
		if err == nil && back.Time.Equal(e.Time) {
			back.Time = e.Time // same instant; the zone may be a new pointer
		}
		if err != nil || back != e {
			t.Fatalf("round trip of %+v: %+v %v", e, back, err)
		}
	})
}

// Next is the first Hit at or above n: checked by scanning, for seeded
// random rules, and at the top of the range where a scan would overflow.
func TestRuleNextAgreesWithHit(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for range 300 {
		var spec []string
		if rng.IntN(2) == 0 {
			spec = append(spec, "10^k")
		}
		if rng.IntN(2) == 0 {
			spec = append(spec, "every:"+strconv.Itoa(1+rng.IntN(400)))
		}
		for range rng.IntN(4) {
			spec = append(spec, strconv.Itoa(1+rng.IntN(3000)))
		}
		r, err := ParseRule(strings.Join(spec, ","))
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			n := uint64(1 + rng.IntN(3000)) // ranks start at 1
			want, wantOK := uint64(0), false
			for m := n; m < 100000; m++ {
				if r.Hit(m) {
					want, wantOK = m, true
					break
				}
			}
			got, ok := r.Next(n)
			if wantOK && (got != want || !ok) || !wantOK && ok && got < 100000 {
				t.Fatalf("rule %q: Next(%d) = %d, %v; the first hit at or above it is %d, %v", r, n, got, ok, want, wantOK)
			}
		}
	}
	top := uint64(1<<64 - 1)
	for _, c := range []struct {
		rule string
		n    uint64
		want uint64
		ok   bool
	}{
		{"10^k", 1e19 + 1, 0, false},
		{"10^k", 1e19, 1e19, true},
		{"every:7", top, 0, false},
		{"every:5", top - 4, top, true},
		{"every:1", top, top, true},
		{"", 5, 0, false},
	} {
		r, _ := ParseRule(c.rule)
		if got, ok := r.Next(c.n); got != c.want || ok != c.ok {
			t.Errorf("%q: Next(%d) = %d, %v; want %d, %v", c.rule, c.n, got, ok, c.want, c.ok)
		}
	}
}

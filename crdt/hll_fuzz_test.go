package crdt

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// FuzzDecodeHLLPage: page bytes come from peers and from disk, and
// anti-entropy digests hash them. DecodeHLLPage must not panic, must fail
// only with ErrBadHLL (leaving the page zero), and whatever it accepts must
// be canonical: re-encoding gives back exactly the input, every register is
// in range, and decoding into a page that held something else gives the same
// page.
func FuzzDecodeHLLPage(f *testing.F) {
	rng := newRand(71)
	for _, n := range []int{0, 1, 2, 50, HLLSparseMax, HLLSparseMax + 1, 200, HLLPageSize} {
		f.Add(AppendHLLPage(nil, randHLLPage(rng, n)))
	}
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x05, 0x01, 0x03, 0x01})       // unsorted
	f.Add([]byte{0x00, 0x05, 0x01, 0x05, 0x02})       // duplicate offset
	f.Add([]byte{0x00, 0x05, HLLMaxRho + 1})          // rho too large
	f.Add(append([]byte{0x01}, make([]byte, 256)...)) // dense zero page
	f.Add([]byte{0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p HLLPage
		err := DecodeHLLPage(b, &p)
		if err != nil {
			if !errors.Is(err, ErrBadHLL) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrBadHLL", err)
			}
			if !p.IsZero() {
				t.Fatalf("rejected % x but left registers in the page", b)
			}
			return
		}
		for off, r := range p {
			if r > HLLMaxRho {
				t.Fatalf("accepted % x with register %d = %d", b, off, r)
			}
		}
		re := AppendHLLPage(nil, &p)
		if !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical input % x: re-encodes as % x", b, re)
		}
		var q HLLPage
		for i := range q {
			q[i] = HLLMaxRho
		}
		if err := DecodeHLLPage(re, &q); err != nil || q != p {
			t.Fatalf("second decode into a full page: %v, equal %v", err, q == p)
		}
	})
}

// sketchFromBytes builds a sketch with arbitrary (legal) registers: b's
// bytes, repeated to fill all HLLRegisters, each taken modulo HLLMaxRho+1;
// a byte of 0xff is HLLMaxRho, so runs of it saturate whole pages.
func sketchFromBytes(b []byte) *HLL {
	h := new(HLL)
	if len(b) == 0 {
		return h
	}
	for i := range HLLRegisters {
		r := b[i%len(b)]
		if r == 0xff {
			r = HLLMaxRho
		}
		h.Set(i, r%(HLLMaxRho+1))
	}
	return h
}

// checkEstimate fails t unless Estimate is finite and in [0, HLLMaxEstimate].
func checkEstimate(t *testing.T, what string, h *HLL) float64 {
	t.Helper()
	e := h.Estimate()
	if math.IsNaN(e) || math.IsInf(e, 0) || e < 0 || e > HLLMaxEstimate {
		t.Fatalf("%s: estimate %v, want a number in [0, %d]", what, e, int64(HLLMaxEstimate))
	}
	if int64(math.Round(e)) < 0 { // what the HTTP API answers
		t.Fatalf("%s: estimate %v does not round to an int64", what, e)
	}
	return e
}

// mergeMonotone fails t if merging a and b estimates less than either
// alone (beyond rounding): registers only rise in a merge.
func mergeMonotone(t *testing.T, a, b *HLL) {
	t.Helper()
	ea, eb := checkEstimate(t, "a", a), checkEstimate(t, "b", b)
	u := *a
	u.Merge(b)
	eu := checkEstimate(t, "a merged with b", &u)
	if lo := max(ea, eb); eu < lo*(1-1e-9) {
		t.Fatalf("merge lowered the estimate: %v and %v merge to %v", ea, eb, eu)
	}
}

// FuzzHLLEstimate: whatever registers a sketch holds (peers send pages,
// and every legal page must be readable), Estimate is a finite number in
// [0, HLLMaxEstimate], and a merge never estimates less than its inputs.
// Before the clamp, a sketch of saturated pages estimated +Inf, which no
// JSON encoder writes.
func FuzzHLLEstimate(f *testing.F) {
	f.Add([]byte{0xff}, []byte{0})
	f.Add([]byte{HLLMaxRho}, []byte{HLLMaxRho - 1})
	f.Add([]byte{HLLMaxRho - 1}, []byte{1, 2, 3})
	f.Add(bytes.Repeat([]byte{0xff}, HLLPageSize), []byte{0})
	f.Add(append(bytes.Repeat([]byte{0xff}, HLLRegisters-1), 0), []byte{})
	f.Add([]byte{0, 0, 0, 7}, []byte{50, 51})
	f.Fuzz(func(t *testing.T, a, b []byte) {
		mergeMonotone(t, sketchFromBytes(a), sketchFromBytes(b))
	})
}

// TestHLLEstimateFiniteProperty: the same properties on seeded sketches
// built as an attacker would, from saturated pages (every register at
// HLLMaxRho, a legal page) mixed with real ones, merged page by page as a
// replica merges a peer's pages.
func TestHLLEstimateFiniteProperty(t *testing.T) {
	rng := newRand(72)
	var sat HLLPage
	for i := range sat {
		sat[i] = HLLMaxRho
	}
	for i := range raceTrials(300) { // a multiple of 5: every share as often
		a := randHLLModel(rng).sketch()
		b := randHLLModel(rng).sketch()
		// A share of b's pages saturated: none, some, or all.
		share := []float64{0, 0.1, 0.5, 0.9, 1}[i%5]
		for pg := range HLLPages {
			if rng.Float64() < share {
				b.MergePage(pg, &sat)
			}
		}
		mergeMonotone(t, a, b)
		// Page by page, the estimate never falls.
		u := *a
		prev := checkEstimate(t, "a", &u)
		for pg := range HLLPages {
			u.MergePage(pg, b.Page(pg))
			e := checkEstimate(t, "a merging b's pages", &u)
			if e < prev*(1-1e-9) {
				t.Fatalf("#%d: merging page %d lowered the estimate %v to %v", i, pg, prev, e)
			}
			prev = e
		}
	}
}

package crdt

import (
	"bytes"
	"errors"
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

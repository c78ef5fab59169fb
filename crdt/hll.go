package crdt

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// HyperLogLog sketches: replicated unique counts ("how many distinct users
// viewed this video"). HLL says why they merge, HLLPage why they are paged,
// AppendHLLPage why the encoding is canonical and what it looks like.

// Sketch geometry.
const (
	HLLPrecision = 14                         // p: hash bits that pick a register
	HLLRegisters = 1 << HLLPrecision          // m = 16384 registers
	HLLPageSize  = 256                        // registers per page; an offset is one byte
	HLLPages     = HLLRegisters / HLLPageSize // 64 pages
	HLLMaxRho    = 64 - HLLPrecision + 1      // 51: rho of an all-zero rest of the hash

	// HLLSparseMax is the most nonzero registers a page encodes sparse. A
	// sparse page of c registers takes 1+2c bytes, a dense one 1+256: sparse
	// is shorter up to c = 127, and at c = 128 the two tie and dense wins.
	HLLSparseMax = 127
)

// HLLStdError is the relative standard error of an estimate, 1.04/√m, where
// 1.04 rounds the asymptotic constant √(3·ln 2 − 1) ≈ 1.039. p is even, so
// √m = 2^(p/2) = 128 and the constant is exact: 0.008125.
const HLLStdError = 1.04 / (1 << (HLLPrecision / 2))

// hllSparse and hllDense are the form bytes of a page encoding.
const (
	hllSparse = 0x00
	hllDense  = 0x01
)

// ErrBadHLL is returned (wrapped) by DecodeHLLPage for anything but a
// canonical page encoding. It wraps ErrCorrupt, so callers that check for
// any corrupt encoding need not know about sketches.
var ErrBadHLL = fmt.Errorf("%w: bad hll page", ErrCorrupt)

// HashUnique hashes a unique id for an HLL: xxhash64 of the id's bytes. Every
// replica must hash identically, forever, or their registers stop meaning
// the same thing; changing this function is a new sketch type.
func HashUnique(id string) uint64 { return xxhash.Sum64String(id) }

// HLLRegister maps a hash to its register: idx is the top HLLPrecision bits,
// rho is 1 + the number of leading zeros of the remaining 64−p bits, so rho
// is 1..50 for a nonzero rest and HLLMaxRho (51) for an all-zero rest.
func HLLRegister(h uint64) (idx int, rho uint8) {
	idx = int(h >> (64 - HLLPrecision))
	// Shifted up, the rest has p zeros below it, so an all-zero rest counts
	// 64 leading zeros; cap it where the rest runs out.
	rho = uint8(min(bits.LeadingZeros64(h<<HLLPrecision)+1, HLLMaxRho))
	return idx, rho
}

// HLLPage is one page of registers: page i holds registers i·HLLPageSize
// through i·HLLPageSize+HLLPageSize−1.
//
// A sketch is stored and replicated page by page, not whole. An Add touches
// one register, hence one page: only that page's digest changes and only it
// needs to be shipped, and a receiver merges page by page (HLL.MergePage)
// without holding the sender's whole sketch. A page that is still zero is
// not stored at all, and a page with few registers encodes sparse, so a
// small count costs two to three bytes per distinct id rather than 16 KiB.
//
// Every register is at most HLLMaxRho. Pages from an HLL or from
// DecodeHLLPage always are; the functions here panic on a hand-built page
// that is not, as it could not be encoded.
type HLLPage [HLLPageSize]uint8

// Merge raises each register of p to q's where q's is larger, and reports
// whether any register changed.
func (p *HLLPage) Merge(q *HLLPage) (changed bool) {
	for i, r := range q {
		if r > p[i] {
			if r > HLLMaxRho {
				panic(fmt.Sprintf("crdt: hll register %d above %d", r, HLLMaxRho))
			}
			p[i] = r
			changed = true
		}
	}
	return changed
}

// Count is the number of nonzero registers.
func (p *HLLPage) Count() int {
	n := 0
	for _, r := range p {
		if r != 0 {
			n++
		}
	}
	return n
}

// IsZero reports whether every register is zero.
func (p *HLLPage) IsZero() bool { return *p == HLLPage{} }

// AppendHLLPage appends p's canonical encoding to dst and returns the
// extended slice. It panics if a register is above HLLMaxRho.
//
// Anti-entropy compares digests of the stored bytes, so a page has exactly
// one encoding: equal registers ⇔ equal bytes. Two replicas holding the same
// page then never see a digest mismatch, so they do not re-ship it over and
// over, and a mismatch always means the registers differ. AppendHLLPage
// writes the shorter form, and DecodeHLLPage rejects every other byte string,
// so bytes from a peer or from disk cannot bring a second spelling of a page
// in:
//
//	sparse: 0x00 | (offset | rho)*    at most HLLSparseMax nonzero registers, in
//	                                  ascending offset order, rho in 1..HLLMaxRho
//	dense:  0x01 | rho × HLLPageSize  more than HLLSparseMax nonzero registers,
//	                                  each at most HLLMaxRho
//
// A zero page encodes as the single byte 0x00 (callers do not store zero
// pages). The first byte names the form; DecodeHLLPage rejects any other
// value, which leaves room for new forms later.
func AppendHLLPage(dst []byte, p *HLLPage) []byte {
	if p.Count() > HLLSparseMax {
		for _, r := range p {
			if r > HLLMaxRho {
				panic(fmt.Sprintf("crdt: hll register %d above %d", r, HLLMaxRho))
			}
		}
		dst = append(dst, hllDense)
		return append(dst, p[:]...)
	}
	dst = append(dst, hllSparse)
	for off, r := range p {
		if r == 0 {
			continue
		}
		if r > HLLMaxRho {
			panic(fmt.Sprintf("crdt: hll register %d above %d", r, HLLMaxRho))
		}
		dst = append(dst, byte(off), r)
	}
	return dst
}

// DecodeHLLPage decodes an AppendHLLPage encoding into *p, overwriting it. It
// accepts only the canonical encoding of a page (see the format above); on
// error *p is zero and the error wraps ErrBadHLL.
func DecodeHLLPage(b []byte, p *HLLPage) error {
	*p = HLLPage{}
	if err := decodeHLLPage(b, p); err != nil {
		*p = HLLPage{}
		return fmt.Errorf("decode hll page: %w", err)
	}
	return nil
}

func decodeHLLPage(b []byte, p *HLLPage) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty", ErrBadHLL)
	}
	form, body := b[0], b[1:]
	switch form {
	case hllSparse:
		if len(body)%2 != 0 {
			return fmt.Errorf("%w: sparse body of odd length %d", ErrBadHLL, len(body))
		}
		if n := len(body) / 2; n > HLLSparseMax {
			return fmt.Errorf("%w: %d sparse registers, more than %d", ErrBadHLL, n, HLLSparseMax)
		}
		prev := -1
		for i := 0; i < len(body); i += 2 {
			off, r := int(body[i]), body[i+1]
			if off <= prev {
				return fmt.Errorf("%w: offset %d after %d", ErrBadHLL, off, prev)
			}
			if r == 0 || r > HLLMaxRho {
				return fmt.Errorf("%w: rho %d at offset %d", ErrBadHLL, r, off)
			}
			p[off] = r
			prev = off
		}
		return nil
	case hllDense:
		if len(body) != HLLPageSize {
			return fmt.Errorf("%w: dense body of %d bytes, want %d", ErrBadHLL, len(body), HLLPageSize)
		}
		n := 0
		for off, r := range body {
			if r > HLLMaxRho {
				return fmt.Errorf("%w: rho %d at offset %d", ErrBadHLL, r, off)
			}
			if r != 0 {
				n++
			}
		}
		if n <= HLLSparseMax {
			return fmt.Errorf("%w: dense page with only %d nonzero registers", ErrBadHLL, n)
		}
		copy(p[:], body)
		return nil
	}
	return fmt.Errorf("%w: unknown form %#x", ErrBadHLL, form)
}

// HLL is a HyperLogLog sketch of a set of ids, dense in memory (HLLRegisters
// bytes, 16 KiB). The zero value is an empty sketch; an HLL is a plain value,
// so assignment copies it.
//
// An id is hashed (HashUnique) to 64 bits; the top HLLPrecision bits pick a
// register, and the register keeps the largest rho (1 + the leading zeros of
// the rest of the hash) it has seen (HLLRegister). Registers only grow, and
// sketches merge by taking the register-wise max. Max is a join, so Merge is
// commutative, associative and idempotent, and the merge of two sketches is,
// register for register, the sketch of the union of their ids. Replicas add
// ids on their own and exchange sketches (or single pages) late, twice or in
// any order, and all end with the same registers and the same Estimate.
type HLL struct {
	pages [HLLPages]HLLPage
}

// Add records a hash (from HashUnique) and reports whether a register grew.
func (h *HLL) Add(hash uint64) (changed bool) {
	return h.Set(HLLRegister(hash))
}

// AddID records an id: Add(HashUnique(id)).
func (h *HLL) AddID(id string) bool { return h.Add(HashUnique(id)) }

// Set raises register idx to rho if rho is larger, and reports whether it
// did. It panics if idx is not in [0, HLLRegisters) or rho is above
// HLLMaxRho.
func (h *HLL) Set(idx int, rho uint8) (changed bool) {
	if uint(idx) >= HLLRegisters {
		panic(fmt.Sprintf("crdt: hll register index %d out of range", idx))
	}
	if rho > HLLMaxRho {
		panic(fmt.Sprintf("crdt: hll register %d above %d", rho, HLLMaxRho))
	}
	r := &h.pages[idx/HLLPageSize][idx%HLLPageSize]
	if rho <= *r {
		return false
	}
	*r = rho
	return true
}

// Page returns page i, a pointer into h. Writers must keep every register at
// most HLLMaxRho and must only raise registers (merge), never lower them.
func (h *HLL) Page(i int) *HLLPage { return &h.pages[i] }

// MergePage merges p into page i and reports whether a register changed.
func (h *HLL) MergePage(i int, p *HLLPage) (changed bool) { return h.pages[i].Merge(p) }

// Merge raises every register of h to o's where o's is larger and reports
// whether any register changed. Afterwards h is the sketch of the union of
// both sketches' ids.
func (h *HLL) Merge(o *HLL) (changed bool) {
	for i := range h.pages {
		if h.pages[i].Merge(&o.pages[i]) {
			changed = true
		}
	}
	return changed
}

// Equal reports whether h and o hold the same registers.
func (h *HLL) Equal(o *HLL) bool { return h.pages == o.pages }

// HLLMaxEstimate is the largest estimate: 2^62, about 4.6·10^18. A 64-bit
// hash tells at most 2^64 ids apart, and its collisions bend the count well
// before that, so no real set of ids gets near it; registers that estimate
// more (every register at HLLMaxRho estimates +Inf) are saturated, forged
// or corrupt, and the estimate says so by being exactly this. It is a
// float64 and an int64 exactly, with room to spare for the standard error.
const HLLMaxEstimate = 1 << 62

// Estimate returns the estimated number of distinct ids added, using Otmar
// Ertl's improved raw estimator ("New cardinality estimation algorithms for
// HyperLogLog sketches", 2017, section 3.2). It needs no empirical bias
// tables and stays accurate from 0 to far beyond 10^9. An empty sketch
// estimates 0. The estimate is always finite, between 0 and
// HLLMaxEstimate: a sketch whose registers are all HLLMaxRho (about 2^64
// ids, or a forged page from a peer) would estimate +Inf, and one with all
// registers at HLLMaxRho−1 more than 2^63, past an int64; both estimate
// HLLMaxEstimate. Raising registers never lowers the estimate (up to
// rounding), so a merge never does either.
//
// With C[k] the number of registers holding k (k = 0..q+1, q = 64−p):
//
//	z = m·τ(1 − C[q+1]/m)
//	z = (z + C[k]) / 2        for k = q down to 1
//	z = z + m·σ(C[0]/m)
//	estimate = α∞·m²/z,       α∞ = 1/(2 ln 2)
func (h *HLL) Estimate() float64 {
	var c [HLLMaxRho + 1]int
	for i := range h.pages {
		for _, r := range &h.pages[i] {
			c[r]++
		}
	}
	const m = float64(HLLRegisters)
	z := m * hllTau(1-float64(c[HLLMaxRho])/m)
	for k := HLLMaxRho - 1; k >= 1; k-- {
		z = 0.5 * (z + float64(c[k]))
	}
	z += m * hllSigma(float64(c[0])/m)
	e := m * m / (2 * math.Ln2 * z)
	if !(e < HLLMaxEstimate) { // and NaN, which no sketch should give
		return HLLMaxEstimate
	}
	return e
}

// hllSigma is σ(x) = x + Σ_{k≥1} x^(2^k)·2^(k−1) for x in [0, 1], summed until
// the terms no longer change the float64 sum; σ(1) = +Inf. The terms fall
// doubly exponentially once x^(2^k) is small, so for x < 1 the loop ends
// within a few dozen rounds.
func hllSigma(x float64) float64 {
	if x == 1 {
		return math.Inf(1)
	}
	z, w := x, 1.0 // w = 2^(k−1)
	for {
		x *= x // x^(2^k)
		next := z + x*w
		if next == z {
			return z
		}
		z = next
		w += w
	}
}

// hllTau is τ(x) = (1 − x − Σ_{k≥1} (1 − x^(2^−k))²·2^−k) / 3 for x in [0, 1],
// summed until the terms no longer change the float64 sum; τ(0) = τ(1) = 0.
func hllTau(x float64) float64 {
	if x == 0 || x == 1 {
		return 0
	}
	z, w := 1-x, 1.0
	for {
		x = math.Sqrt(x) // x^(2^−k)
		w *= 0.5         // 2^−k
		next := z - (1-x)*(1-x)*w
		if next == z {
			return z / 3
		}
		z = next
	}
}

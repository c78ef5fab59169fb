package crdt

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"
)

var hllTable = flag.Bool("hll.table", false, "run TestHLLAccuracyTable: HLL error and encoded size up to 10^7 ids (slow)")

// hllTrials is the iteration count of the sketch-level property tests. Every
// iteration walks a few 16 KiB sketches, so it is smaller than trials.
const hllTrials = 400

// raceTrials is n, or a quarter of n in a race build (-race). It is for
// single-goroutine property tests whose iterations are loops over bytes and
// registers: the detector finds nothing in them and makes each iteration
// about 10x slower. For each test that uses it, a quarter of the seeded
// iterations reaches every block of the package that all of them reach
// (go test -coverprofile, compared block by block); a run without -race
// still does every iteration.
func raceTrials(n int) int {
	if testkit.Race {
		return n / 4
	}
	return n
}

// hllModel is the reference model of a sketch: a flat slice of registers
// indexed by register number, with no notion of pages.
type hllModel []uint8

func newHLLModel() hllModel { return make(hllModel, HLLRegisters) }

// randHLLRho draws a register value: mostly 1..3, so that random sketches
// tie and overlap often, sometimes anything up to the cap.
func randHLLRho(rng *rand.Rand) uint8 {
	switch rng.IntN(8) {
	case 0:
		return uint8(1 + rng.IntN(HLLMaxRho))
	case 1:
		return HLLMaxRho
	default:
		return uint8(1 + rng.IntN(3))
	}
}

// randHLLModel draws a sketch whose pages have every kind of density: empty,
// a few registers, around the sparse/dense boundary, full.
func randHLLModel(rng *rand.Rand) hllModel {
	m := newHLLModel()
	if rng.IntN(16) == 0 {
		return m
	}
	for pg := range HLLPages {
		var n int
		switch rng.IntN(5) {
		case 0:
			n = 0
		case 1:
			n = 1 + rng.IntN(8)
		case 2:
			n = HLLSparseMax - 4 + rng.IntN(9)
		case 3:
			n = HLLPageSize
		default:
			n = rng.IntN(HLLPageSize + 1)
		}
		for _, off := range rng.Perm(HLLPageSize)[:n] {
			m[pg*HLLPageSize+off] = randHLLRho(rng)
		}
	}
	return m
}

// sketch builds an HLL from the model through Set.
func (m hllModel) sketch() *HLL {
	var h HLL
	for i, r := range m {
		if r != 0 {
			h.Set(i, r)
		}
	}
	return &h
}

func (m hllModel) max(o hllModel) hllModel {
	r := newHLLModel()
	for i := range r {
		r[i] = max(m[i], o[i])
	}
	return r
}

func (m hllModel) equal(o hllModel) bool { return bytes.Equal(m, o) }

// check compares h with m, reading h page by page: page i must hold
// registers i·256 .. i·256+255.
func (m hllModel) check(h *HLL) error {
	k := 0
	for pg := range HLLPages {
		for off, r := range h.Page(pg) {
			if r != m[k] {
				return fmt.Errorf("register %d (page %d offset %d) = %d, want %d", k, pg, off, r, m[k])
			}
			k++
		}
	}
	return nil
}

// randHLLPage returns a valid page with exactly n nonzero registers.
func randHLLPage(rng *rand.Rand, n int) *HLLPage {
	var p HLLPage
	for _, off := range rng.Perm(HLLPageSize)[:n] {
		p[off] = randHLLRho(rng)
	}
	return &p
}

// hllID is the i-th id of a seeded sequence of distinct ids.
func hllID(seed, i int) string { return "user:" + strconv.Itoa(seed) + ":" + strconv.Itoa(i) }

func TestHLLGeometry(t *testing.T) {
	if HLLRegisters != 16384 || HLLPages != 64 || HLLMaxRho != 51 || HLLPages*HLLPageSize != HLLRegisters {
		t.Fatalf("geometry: m=%d pages=%d maxRho=%d", HLLRegisters, HLLPages, HLLMaxRho)
	}
	if want := 1.04 / math.Sqrt(HLLRegisters); HLLStdError != want || HLLStdError != 0.008125 {
		t.Fatalf("HLLStdError = %v, want 1.04/√m = %v", HLLStdError, want)
	}
	// Sparse must never be longer than dense: 1+2c <= 1+256 for c <= HLLSparseMax,
	// and dense must be no longer at HLLSparseMax+1.
	if 1+2*HLLSparseMax > 1+HLLPageSize || 1+2*(HLLSparseMax+1) < 1+HLLPageSize {
		t.Fatalf("HLLSparseMax %d is not the sparse/dense break-even", HLLSparseMax)
	}
}

// TestHashUnique pins the hash: xxhash64, with published test vectors for
// "" and "abc". If this test fails, every stored sketch is invalidated.
func TestHashUnique(t *testing.T) {
	for _, c := range []struct {
		id   string
		want uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"abc", 0x44bc2cf5ad770999},
		{"user:42", 0xdc1fea7da8d2d1c2},
	} {
		if got := HashUnique(c.id); got != c.want {
			t.Errorf("HashUnique(%q) = %#016x, want %#016x", c.id, got, c.want)
		}
	}
}

func TestHLLRegister(t *testing.T) {
	const rest = 64 - HLLPrecision // 50 bits below the index
	for _, c := range []struct {
		h   uint64
		idx int
		rho uint8
	}{
		{0, 0, HLLMaxRho},                      // all-zero rest: capped
		{1, 0, 50},                             // lowest bit only: 49 zeros
		{1 << (rest - 1), 0, 1},                // top bit of the rest
		{1 << (rest - 2), 0, 2},                // one zero
		{3<<rest | 1<<40, 3, 10},               // bit 40: zeros at 49..41
		{1 << 63, 1 << (HLLPrecision - 1), 51}, // index only
		{math.MaxUint64, HLLRegisters - 1, 1},  // all ones
		{math.MaxUint64 << rest & math.MaxUint64, HLLRegisters - 1, HLLMaxRho},
		{1<<rest | 1, 1, 50},
		{0x0006_0000_0000_0000, 1, 1}, // bits 50 and 49
	} {
		idx, rho := HLLRegister(c.h)
		if idx != c.idx || rho != c.rho {
			t.Errorf("HLLRegister(%#016x) = %d, %d; want %d, %d", c.h, idx, rho, c.idx, c.rho)
		}
	}

	// Against a bit-by-bit reading of the definition.
	rng := newRand(60)
	for i := range 20000 {
		h := rng.Uint64()
		if i%4 == 0 {
			h >>= rng.IntN(64) // long runs of zeros
			h |= rng.Uint64() << (64 - HLLPrecision)
		}
		wantIdx := 0
		for b := 63; b >= 64-HLLPrecision; b-- {
			wantIdx = wantIdx<<1 | int(h>>b&1)
		}
		wantRho := uint8(1)
		for b := 63 - HLLPrecision; b >= 0 && h>>b&1 == 0; b-- {
			wantRho++
		}
		idx, rho := HLLRegister(h)
		if idx != wantIdx || rho != wantRho || rho < 1 || rho > HLLMaxRho {
			t.Fatalf("HLLRegister(%#016x) = %d, %d; want %d, %d", h, idx, rho, wantIdx, wantRho)
		}
	}
}

func TestHLLSetAndAdd(t *testing.T) {
	rng := newRand(61)
	for i := range 50 {
		var h HLL
		m := newHLLModel()
		for j := range 2000 {
			idx, rho := rng.IntN(HLLRegisters), uint8(rng.IntN(HLLMaxRho+1))
			if j%2 == 0 {
				idx = rng.IntN(8) // revisit the same registers
				rho = uint8(rng.IntN(4))
			}
			before := h
			want := rho > m[idx]
			if got := h.Set(idx, rho); got != want {
				t.Fatalf("#%d.%d Set(%d, %d) over %d = %v, want %v", i, j, idx, rho, m[idx], got, want)
			}
			m[idx] = max(m[idx], rho)
			if h.Equal(&before) == want {
				t.Fatalf("#%d.%d Set(%d, %d): Equal(before) = %v but changed = %v", i, j, idx, rho, !want, want)
			}
		}
		if err := m.check(&h); err != nil {
			t.Fatalf("#%d %v", i, err)
		}
	}

	// Add is Set of the hash's register; AddID is Add of HashUnique.
	var a, b, c HLL
	for i := range 5000 {
		id := "v" + strconv.Itoa(i%3000)
		hash := HashUnique(id)
		ca := a.AddID(id)
		cb := b.Add(hash)
		cc := c.Set(HLLRegister(hash))
		if ca != cb || cb != cc {
			t.Fatalf("%q: AddID %v, Add %v, Set %v", id, ca, cb, cc)
		}
		if i >= 3000 && ca {
			t.Fatalf("re-adding %q changed the sketch", id)
		}
	}
	if !a.Equal(&b) || !b.Equal(&c) {
		t.Fatal("AddID, Add and Set built different sketches")
	}
}

func TestHLLSetPanics(t *testing.T) {
	for _, c := range []struct {
		idx int
		rho uint8
	}{{-1, 1}, {HLLRegisters, 1}, {math.MaxInt, 1}, {0, HLLMaxRho + 1}, {5, 255}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Set(%d, %d) did not panic", c.idx, c.rho)
				}
			}()
			var h HLL
			h.Set(c.idx, c.rho)
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("merging a page with a register above HLLMaxRho did not panic")
			}
		}()
		var p, q HLLPage
		q[7] = HLLMaxRho + 1
		p.Merge(&q)
	}()
}

func TestHLLIsZero(t *testing.T) {
	var h HLL
	if !h.IsZero() || h.Estimate() != 0 {
		t.Fatalf("zero HLL: IsZero %v, Estimate %v", h.IsZero(), h.Estimate())
	}
	rng := newRand(62)
	for range 200 {
		var h HLL
		idx := rng.IntN(HLLRegisters)
		h.Set(idx, 1)
		if h.IsZero() || h.Page(idx/HLLPageSize).IsZero() {
			t.Fatalf("register %d set, but IsZero", idx)
		}
		for pg := range HLLPages {
			if want := pg != idx/HLLPageSize; h.Page(pg).IsZero() != want {
				t.Fatalf("register %d set: page %d IsZero = %v", idx, pg, !want)
			}
		}
	}
}

func TestHLLPageMergeCount(t *testing.T) {
	rng := newRand(63)
	for i := range trials {
		p, q := randHLLPage(rng, rng.IntN(HLLPageSize+1)), randHLLPage(rng, rng.IntN(HLLPageSize+1))
		var want HLLPage
		wantChanged, wantCount := false, 0
		for j := range want {
			want[j] = max(p[j], q[j])
			wantChanged = wantChanged || q[j] > p[j]
			if want[j] != 0 {
				wantCount++
			}
		}
		got := *p
		if changed := got.Merge(q); changed != wantChanged || got != want {
			t.Fatalf("#%d Merge: changed %v (want %v), result differs: %v", i, changed, wantChanged, got != want)
		}
		if got.Count() != wantCount || got.IsZero() != (wantCount == 0) {
			t.Fatalf("#%d Count %d IsZero %v, want %d", i, got.Count(), got.IsZero(), wantCount)
		}
		if got.Merge(q) || got.Merge(p) || got.Merge(&got) {
			t.Fatalf("#%d merging an input again changed the result", i)
		}
	}
	// changed reports a change at every offset, and only a rise.
	for off := range HLLPageSize {
		var p, q HLLPage
		p[off], q[off] = 3, 2
		if p.Merge(&q) || p[off] != 3 {
			t.Fatalf("offset %d: merging a lower register changed the page", off)
		}
		q[off] = 4
		if !p.Merge(&q) || p[off] != 4 {
			t.Fatalf("offset %d: merging a higher register: changed false or register %d", off, p[off])
		}
	}
}

func TestHLLMergeLaws(t *testing.T) {
	rng := newRand(64)
	for i := range raceTrials(hllTrials) {
		ma, mb, mc := randHLLModel(rng), randHLLModel(rng), randHLLModel(rng)
		a, b, c := ma.sketch(), mb.sketch(), mc.sketch()
		if err := ma.check(a); err != nil {
			t.Fatalf("#%d built sketch: %v", i, err)
		}

		ab := *a
		changed := ab.Merge(b)
		if err := ma.max(mb).check(&ab); err != nil {
			t.Fatalf("#%d a∪b is not the register-wise max: %v", i, err)
		}
		if want := !ma.max(mb).equal(ma); changed != want {
			t.Fatalf("#%d a.Merge(b) changed = %v, want %v", i, changed, want)
		}
		if err := mb.check(b); err != nil {
			t.Fatalf("#%d Merge modified its argument: %v", i, err)
		}

		ba := *b
		ba.Merge(a)
		if !ab.Equal(&ba) {
			t.Fatalf("#%d commutativity: a∪b ≠ b∪a", i)
		}

		l, r, bc := ab, *a, *b
		l.Merge(c)
		bc.Merge(c)
		r.Merge(&bc)
		if !l.Equal(&r) {
			t.Fatalf("#%d associativity: (a∪b)∪c ≠ a∪(b∪c)", i)
		}

		aa := *a
		if aa.Merge(a) || !aa.Equal(a) {
			t.Fatalf("#%d idempotence: a∪a changed a", i)
		}
		if aa.Merge(&aa) {
			t.Fatalf("#%d merging a sketch into itself changed it", i)
		}
		// a∪b absorbs both inputs, and merging either again is a no-op.
		if ab.Merge(a) || ab.Merge(b) {
			t.Fatalf("#%d a∪b does not cover a and b", i)
		}
		if !a.Equal(a) || (a.Equal(b) != ma.equal(mb)) {
			t.Fatalf("#%d Equal disagrees with the model", i)
		}
	}
}

// TestHLLMergeIsUnion: the merge of two sketches is the sketch of the union
// of their ids, and the order ids arrive in does not matter.
func TestHLLMergeIsUnion(t *testing.T) {
	rng := newRand(65)
	for i := range 60 {
		pool := 1 + rng.IntN(20000)
		var a, b, union, shuffled HLL
		var all []string
		for j := range pool {
			id := "u" + strconv.Itoa(i) + "." + strconv.Itoa(j)
			inA, inB := rng.IntN(3) != 0, rng.IntN(3) != 0
			if inA {
				a.AddID(id)
			}
			if inB {
				b.AddID(id)
			}
			if inA || inB {
				union.AddID(id)
				all = append(all, id)
			}
		}
		rng.Shuffle(len(all), func(x, y int) { all[x], all[y] = all[y], all[x] })
		for _, id := range all {
			shuffled.AddID(id)
			if rng.IntN(4) == 0 {
				shuffled.AddID(id) // duplicates change nothing
			}
		}
		ab := a
		ab.Merge(&b)
		if !ab.Equal(&union) {
			t.Fatalf("#%d sketch(A)∪sketch(B) ≠ sketch(A∪B) (%d ids)", i, len(all))
		}
		if !shuffled.Equal(&union) {
			t.Fatalf("#%d insertion order changed the sketch", i)
		}
	}
}

// TestHLLMergePage: merging page by page, in any order and through the
// encoding, is Merge; each page's changed flag says whether that page changed.
func TestHLLMergePage(t *testing.T) {
	rng := newRand(66)
	for i := range raceTrials(hllTrials) {
		ma, mb := randHLLModel(rng), randHLLModel(rng)
		a, b := ma.sketch(), mb.sketch()
		want := *a
		wantChanged := want.Merge(b)

		got := *a
		anyChanged := false
		var buf []byte
		for _, pg := range rng.Perm(HLLPages) {
			before := *got.Page(pg)
			var q HLLPage
			buf = AppendHLLPage(buf[:0], b.Page(pg))
			if err := DecodeHLLPage(buf, &q); err != nil {
				t.Fatalf("#%d page %d: %v", i, pg, err)
			}
			changed := got.MergePage(pg, &q)
			if changed != (before != *got.Page(pg)) {
				t.Fatalf("#%d MergePage(%d) changed = %v, but page changed = %v", i, pg, changed, !changed)
			}
			anyChanged = anyChanged || changed
		}
		if !got.Equal(&want) || anyChanged != wantChanged {
			t.Fatalf("#%d page-wise merge differs from Merge (changed %v vs %v)", i, anyChanged, wantChanged)
		}
	}

	// Page returns a pointer into the sketch, at the registers Set uses.
	var viaPage, viaSet HLL
	viaPage.Page(3)[7] = HLLMaxRho
	viaSet.Set(3*HLLPageSize+7, HLLMaxRho)
	if !viaPage.Equal(&viaSet) || viaPage.IsZero() {
		t.Fatal("writing through Page(3)[7] did not set register 3·256+7")
	}
}

func TestHLLPageEncodingRoundTrip(t *testing.T) {
	rng := newRand(67)
	for _, n := range []int{0, 1, 2, 126, HLLSparseMax, HLLSparseMax + 1, 129, 200, 255, 256} {
		for i := range 200 {
			p := randHLLPage(rng, n)
			if p.Count() != n {
				t.Fatalf("generator: %d registers, want %d", p.Count(), n)
			}
			prefix := []byte("prefix")
			b := AppendHLLPage(append([]byte(nil), prefix...), p)
			if !bytes.HasPrefix(b, prefix) {
				t.Fatalf("n=%d: AppendHLLPage overwrote dst", n)
			}
			b = b[len(prefix):]
			wantLen, wantForm := 1+2*n, byte(0x00)
			if n > HLLSparseMax {
				wantLen, wantForm = 1+HLLPageSize, 0x01
			}
			if len(b) != wantLen || b[0] != wantForm {
				t.Fatalf("n=%d: encoding of %d bytes, form %#x; want %d bytes, form %#x", n, len(b), b[0], wantLen, wantForm)
			}
			var q HLLPage
			for j := range q {
				q[j] = 0xee // DecodeHLLPage must overwrite, not merge
			}
			if err := DecodeHLLPage(b, &q); err != nil || q != *p {
				t.Fatalf("n=%d #%d: round trip: %v, equal %v", n, i, err, q == *p)
			}

			// Canonical: the same registers reached another way encode the
			// same; one register changed encodes differently.
			var r HLLPage
			r.Merge(hllPageMin(randHLLPage(rng, rng.IntN(n+1)), p))
			r.Merge(p)
			if !bytes.Equal(AppendHLLPage(nil, &r), b) {
				t.Fatalf("n=%d: equal pages encode differently", n)
			}
			off := rng.IntN(HLLPageSize)
			r[off] = r[off]%HLLMaxRho + 1 // some other valid value
			if bytes.Equal(AppendHLLPage(nil, &r), b) {
				t.Fatalf("n=%d: pages differing at %d encode the same", n, off)
			}

			// Whatever prefix or one-byte mutation still decodes must be
			// the canonical encoding of what it decodes to.
			for range 8 {
				m := append([]byte(nil), b...)
				if rng.IntN(2) == 0 {
					m = m[:rng.IntN(len(m))]
				} else {
					m[rng.IntN(len(m))] = byte(rng.IntN(256))
				}
				if err := DecodeHLLPage(m, &q); err == nil {
					if re := AppendHLLPage(nil, &q); !bytes.Equal(re, m) {
						t.Fatalf("accepted % x, which re-encodes as % x", m, re)
					}
				} else if !errors.Is(err, ErrBadHLL) || q != (HLLPage{}) {
					t.Fatalf("rejected % x with %v, page zero %v", m, err, q == HLLPage{})
				}
			}
		}
	}
}

// hllPageMin is the register-wise min of p and q: a page below q, so that
// merging it into q adds nothing.
func hllPageMin(p, q *HLLPage) *HLLPage {
	var r HLLPage
	for i := range r {
		r[i] = min(p[i], q[i])
	}
	return &r
}

// TestHLLPageEncodingGolden pins the byte format.
func TestHLLPageEncodingGolden(t *testing.T) {
	var p HLLPage
	if got := AppendHLLPage(nil, &p); !bytes.Equal(got, []byte{0x00}) {
		t.Fatalf("zero page: % x", got)
	}
	p[0], p[7], p[255] = 1, HLLMaxRho, 3
	if got, want := AppendHLLPage(nil, &p), []byte{0x00, 0x00, 0x01, 0x07, 0x33, 0xff, 0x03}; !bytes.Equal(got, want) {
		t.Fatalf("sparse page: % x, want % x", got, want)
	}
	for i := range p {
		p[i] = byte(i%HLLMaxRho + 1)
	}
	want := append([]byte{0x01}, p[:]...)
	if got := AppendHLLPage(nil, &p); !bytes.Equal(got, want) {
		t.Fatalf("dense page: % x", got)
	}
}

func TestDecodeHLLPageRejects(t *testing.T) {
	sparse := func(pairs ...int) []byte {
		b := []byte{0x00}
		for _, x := range pairs {
			b = append(b, byte(x))
		}
		return b
	}
	// dense(n, rho) is a dense encoding with registers 0..n−1 at rho.
	dense := func(n int, rho byte) []byte {
		b := make([]byte, 1+HLLPageSize)
		b[0] = 0x01
		for i := range n {
			b[1+i] = rho
		}
		return b
	}
	var pairs128 []int
	for i := range HLLSparseMax + 1 {
		pairs128 = append(pairs128, i, 1)
	}
	withByte := func(b []byte, i int, v byte) []byte { b = append([]byte(nil), b...); b[i] = v; return b }

	cases := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"unknown form 2", []byte{0x02}},
		{"unknown form ff", append([]byte{0xff}, dense(200, 1)[1:]...)},
		{"sparse half pair", sparse(5)},
		{"sparse trailing byte", sparse(5, 1, 9)},
		{"sparse unsorted", sparse(5, 1, 3, 1)},
		{"sparse duplicate offset", sparse(5, 1, 5, 2)},
		{"sparse duplicate offset 0", sparse(0, 1, 0, 1)},
		{"sparse rho 0", sparse(5, 0)},
		{"sparse rho 52", sparse(5, HLLMaxRho+1)},
		{"sparse rho 255", sparse(1, 1, 5, 255)},
		{"sparse 128 registers", sparse(pairs128...)},
		{"sparse dense length", append([]byte{0x00}, dense(256, 1)[1:]...)},
		{"dense empty body", []byte{0x01}},
		{"dense short", dense(200, 1)[:HLLPageSize]},
		{"dense trailing byte", append(dense(200, 1), 1)},
		{"dense zero page", dense(0, 0)},
		{"dense one register", dense(1, 1)},
		{"dense 127 registers", dense(HLLSparseMax, 2)},
		{"dense rho 52", withByte(dense(200, 1), 100, HLLMaxRho+1)},
		{"dense rho 255 in zero tail", withByte(dense(200, 1), 256, 255)},
	}
	for _, c := range cases {
		var p HLLPage
		p[3] = 4
		err := DecodeHLLPage(c.in, &p)
		if !errors.Is(err, ErrBadHLL) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s (% x): err = %v, want ErrBadHLL and ErrCorrupt", c.name, c.in, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "decode hll page: ") {
			t.Errorf("%s: error %q lacks the decode prefix", c.name, err)
		}
		if !p.IsZero() {
			t.Errorf("%s: page not zero after a failed decode", c.name)
		}
	}

	// The boundaries themselves are accepted.
	var pairs127 []int
	for i := range HLLSparseMax {
		pairs127 = append(pairs127, 2*i+1, HLLMaxRho)
	}
	for _, b := range [][]byte{
		{0x00},
		sparse(0, 1),
		sparse(255, HLLMaxRho),
		sparse(0, 1, 1, 2, 255, 3),
		sparse(pairs127...),
		dense(HLLSparseMax+1, 1),
		dense(HLLPageSize, HLLMaxRho),
	} {
		var p HLLPage
		if err := DecodeHLLPage(b, &p); err != nil {
			t.Errorf("% x: %v", b, err)
		} else if re := AppendHLLPage(nil, &p); !bytes.Equal(re, b) {
			t.Errorf("% x re-encodes as % x", b, re)
		}
	}
}

// TestHLLSeries checks σ and τ against the functional equations that follow
// from their series, σ(x) = x − x² + 2σ(x²) and τ(√x) = x − √x + 2τ(x),
// which a wrong weight or a missing term breaks.
func TestHLLSeries(t *testing.T) {
	if hllSigma(0) != 0 || !math.IsInf(hllSigma(1), 1) || hllTau(0) != 0 || hllTau(1) != 0 {
		t.Fatalf("endpoints: σ(0)=%v σ(1)=%v τ(0)=%v τ(1)=%v", hllSigma(0), hllSigma(1), hllTau(0), hllTau(1))
	}
	// σ(x) = x + x² + 2x⁴ + 4x⁸ + …; at x = 1/2 the first terms give the value to 1e-9.
	if got, want := hllSigma(0.5), 0.5+0.25+2*math.Pow(0.5, 4)+4*math.Pow(0.5, 8)+8*math.Pow(0.5, 16)+16*math.Pow(0.5, 32); math.Abs(got-want) > 1e-9 {
		t.Fatalf("σ(1/2) = %v, want %v", got, want)
	}
	rng := newRand(68)
	for range 2000 {
		x := rng.Float64()
		if l, r := hllSigma(x), x-x*x+2*hllSigma(x*x); math.Abs(l-r) > 1e-12*max(1, l) {
			t.Fatalf("σ(%v) = %v, but x − x² + 2σ(x²) = %v", x, l, r)
		}
		s := math.Sqrt(x)
		if l, r := hllTau(s), x-s+2*hllTau(x); math.Abs(l-r) > 1e-12 {
			t.Fatalf("τ(√%v) = %v, but x − √x + 2τ(x) = %v", x, l, r)
		}
		if tx := hllTau(x); tx < 0 || tx > 1.0/3 {
			t.Fatalf("τ(%v) = %v out of [0, 1/3]", x, tx)
		}
	}
}

// TestHLLEstimateExact checks the estimator where it has a closed form.
func TestHLLEstimateExact(t *testing.T) {
	const m = HLLRegisters
	alpha := 1 / (2 * math.Ln2)
	// All registers k: z = m·2^−k, so the estimate is α∞·m·2^k.
	for k := 1; k < HLLMaxRho; k++ {
		var h HLL
		for i := range m {
			h.Set(i, uint8(k))
		}
		want := min(alpha*m*math.Ldexp(1, k), HLLMaxEstimate) // clamped from k = 49
		if got := h.Estimate(); math.Abs(got-want) > 1e-12*want {
			t.Fatalf("all registers %d: estimate %v, want %v", k, got, want)
		}
	}
	var h HLL
	for i := range m {
		h.Set(i, HLLMaxRho)
	}
	if got := h.Estimate(); got != HLLMaxEstimate {
		t.Fatalf("saturated sketch: estimate %v, want HLLMaxEstimate (the closed form is +Inf)", got)
	}
	// One register, whatever its value: one id (linear counting gives
	// m·ln(m/(m−1)) ≈ 1 + 1/2m).
	for _, rho := range []uint8{1, 2, 20, HLLMaxRho} {
		var h HLL
		h.Set(12345, rho)
		if got := h.Estimate(); math.Abs(got-1) > 1e-4 {
			t.Fatalf("one register at %d: estimate %v, want 1", rho, got)
		}
	}
}

// hllReferenceEstimate is Ertl's improved raw estimator written out in
// closed form, with the series summed term by term through math.Pow:
//
//	z = m·τ(1 − C[q+1]/m)·2^−q + Σ_{k=1..q} C[k]·2^−k + m·σ(C[0]/m)
func hllReferenceEstimate(h *HLL) float64 {
	const m, q = HLLRegisters, HLLMaxRho - 1
	var c [HLLMaxRho + 1]float64
	for pg := range HLLPages {
		for _, r := range h.Page(pg) {
			c[r]++
		}
	}
	sigma := func(x float64) float64 {
		if x == 1 {
			return math.Inf(1)
		}
		s := x
		for k := 1; k < 64; k++ {
			s += math.Pow(x, math.Ldexp(1, k)) * math.Ldexp(1, k-1)
		}
		return s
	}
	tau := func(x float64) float64 {
		s := 1 - x
		for k := 1; k < 80; k++ {
			d := 1 - math.Pow(x, math.Ldexp(1, -k))
			s -= d * d * math.Ldexp(1, -k)
		}
		return s / 3
	}
	z := m * tau(1-c[q+1]/m) * math.Ldexp(1, -q)
	for k := 1; k <= q; k++ {
		z += c[k] * math.Ldexp(1, -k)
	}
	z += m * sigma(c[0]/m)
	return m * m / (2 * math.Ln2 * z)
}

// TestHLLEstimateReference compares Estimate with the closed form on random
// sketches, including ones with many registers at the cap, where only τ
// contributes.
func TestHLLEstimateReference(t *testing.T) {
	rng := newRand(70)
	for i := range 300 {
		var h HLL
		// Registers drawn from a mix that reaches every part of the
		// histogram: zeros, small values, large values, the cap.
		p0, pMax := rng.Float64(), rng.Float64()
		for idx := range HLLRegisters {
			switch u := rng.Float64(); {
			case u < p0:
			case u < p0+(1-p0)*pMax:
				h.Set(idx, HLLMaxRho)
			default:
				h.Set(idx, uint8(1+rng.IntN(HLLMaxRho-1)))
			}
		}
		switch i % 10 {
		case 0:
			h = *randHLLModel(rng).sketch()
		case 1, 2:
			// Only the top registers: τ's share of z is as large as the
			// others' (about 2^64 ids).
			h = HLL{}
			w := rng.Float64()
			for idx := range HLLRegisters {
				rho := uint8(HLLMaxRho)
				if rng.Float64() < w {
					rho -= uint8(rng.IntN(3))
				}
				h.Set(idx, rho)
			}
		}
		got, want := h.Estimate(), min(hllReferenceEstimate(&h), HLLMaxEstimate)
		if got != want && math.Abs(got-want) > 1e-9*want {
			t.Fatalf("#%d estimate %v, closed form %v", i, got, want)
		}
	}
}

// TestHLLEstimateMonotone: raising a register never lowers the estimate, so
// a merge never makes a count go down.
func TestHLLEstimateMonotone(t *testing.T) {
	rng := newRand(69)
	for i := range 100 {
		h := randHLLModel(rng).sketch()
		e := h.Estimate()
		for j := range 20 {
			idx := rng.IntN(HLLRegisters)
			cur := h.Page(idx / HLLPageSize)[idx%HLLPageSize]
			if cur == HLLMaxRho {
				continue
			}
			h.Set(idx, cur+1+uint8(rng.IntN(int(HLLMaxRho-cur))))
			e2 := h.Estimate()
			if e2 < e {
				t.Fatalf("#%d.%d raising register %d from %d: estimate %v → %v", i, j, idx, cur, e, e2)
			}
			e = e2
		}
	}
}

// TestHLLAccuracy adds seeded ids, so it is deterministic and cannot flake.
//
// The bounds: from 1000 ids on, 5·HLLStdError relative (a 5σ bound). Below
// that the estimator is essentially linear counting, and its error comes
// from ids that land in an occupied register; their number is about
// Poisson(n²/2m), 0.3 at n = 100, so ±2 is exceeded with probability ≈ 0.4%
// at n = 100 (3 or more collisions) and far less below. Measured over 2000
// other seeds, the worst case was 1.0 at n = 10 and 3.7 at n = 100, so ±2 is
// a bound these seeds meet, not one every seed would; the relative bound is
// the statistical one.
func TestHLLAccuracy(t *testing.T) {
	for seed := range 4 {
		var h HLL
		added := 0
		for _, n := range []int{0, 1, 10, 100, 1000, 10000, 100000} {
			for ; added < n; added++ {
				h.AddID(hllID(seed, added))
			}
			est := h.Estimate()
			if n <= 100 {
				if math.Abs(est-float64(n)) > 2 {
					t.Errorf("seed %d, n=%d: estimate %.3f, want within ±2", seed, n, est)
				}
				continue
			}
			if rel := math.Abs(est-float64(n)) / float64(n); rel > 5*HLLStdError {
				t.Errorf("seed %d, n=%d: estimate %.1f, relative error %.4f > 5σ = %.4f", seed, n, est, rel, 5*HLLStdError)
			}
		}
	}
}

// hllEncodedSize is the bytes a stored sketch takes: the encodings of its
// nonzero pages.
func hllEncodedSize(h *HLL) int {
	n := 0
	var buf []byte
	for pg := range HLLPages {
		if p := h.Page(pg); !p.IsZero() {
			buf = AppendHLLPage(buf[:0], p)
			n += len(buf)
		}
	}
	return n
}

// TestHLLAccuracyTable measures the estimator and the encoded size; it only
// runs with -hll.table:
//
//	go test ./crdt -run TestHLLAccuracyTable -hll.table -v
func TestHLLAccuracyTable(t *testing.T) {
	if !*hllTable {
		t.Skip("measurement; run with -hll.table")
	}
	checkpoints := []int{1e2, 1e3, 1e4, 1e5, 1e6, 1e7}
	seedsFor := func(n int) int {
		if n > 1e6 {
			return 5
		}
		return 20
	}
	type row struct {
		sumAbs, maxAbs, sumSigned float64
		bytes, pages, seeds       int
	}
	rows := make([]row, len(checkpoints))
	for seed := range seedsFor(0) {
		var h HLL
		added := 0
		for ci, n := range checkpoints {
			if seed >= seedsFor(n) {
				break
			}
			for ; added < n; added++ {
				h.AddID(hllID(100+seed, added))
			}
			rel := (h.Estimate() - float64(n)) / float64(n)
			r := &rows[ci]
			r.sumAbs += math.Abs(rel)
			r.maxAbs = max(r.maxAbs, math.Abs(rel))
			r.sumSigned += rel
			r.bytes += hllEncodedSize(&h)
			for pg := range HLLPages {
				if h.Page(pg).Count() > HLLSparseMax {
					r.pages++
				}
			}
			r.seeds++
		}
	}
	t.Logf("HLL p=%d m=%d, HLLStdError %.4f%% (for normal errors, mean |err| ≈ 0.80·σ = %.4f%%)",
		HLLPrecision, HLLRegisters, 100*HLLStdError, 100*math.Sqrt(2/math.Pi)*HLLStdError)
	t.Logf("%10s %5s %12s %12s %12s %10s %11s", "n", "seeds", "mean|err|", "max|err|", "mean err", "bytes", "dense pages")
	for ci, n := range checkpoints {
		r := rows[ci]
		s := float64(r.seeds)
		t.Logf("%10d %5d %11.4f%% %11.4f%% %+11.4f%% %10.0f %11.1f", n, r.seeds,
			100*r.sumAbs/s, 100*r.maxAbs, 100*r.sumSigned/s, float64(r.bytes)/s, float64(r.pages)/s)
	}
}

func BenchmarkHLLAdd(b *testing.B) {
	ids := make([]string, 1<<16)
	for i := range ids {
		ids[i] = hllID(0, i)
	}
	var h HLL
	i := 0
	for b.Loop() {
		h.AddID(ids[i&(len(ids)-1)])
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ids/s")
}

func BenchmarkHLLEstimate(b *testing.B) {
	var h HLL
	for i := range 100000 {
		h.AddID(hllID(1, i))
	}
	for b.Loop() {
		h.Estimate()
	}
}

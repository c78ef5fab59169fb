package region

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/tally-dev/tally/crdt"
)

// Approximate counters. A counter under a prefix with an ApproxRule counts
// an increment of 1 as step with probability 1/step, and as nothing
// otherwise, where step grows with the counter (Morris-style): a hot
// counter then costs one write, one fsync and one replicated entry per
// step increments instead of one per group commit, at a relative standard
// error of at most the rule's Error.
//
// The step. For a counter whose magnitude in this replica's view is C
// (ΣP + ΣN over every replica's entry, so decrements grow it too), the
// step is the largest power of two at most max(1, a·C), a = 2·Error², and
// at most MaxBy. An increment by b counts q·step, plus step with
// probability r/step, where q, r = |b| / step, |b| % step, with b's sign.
//
// Unbiased: the step is a function of the state before the coin flip, so
// given everything before it, an increment's expected count is exactly b.
// The counted total minus the true total is a martingale, whatever the
// steps were, in whatever replica and order the increments landed; each
// replica adds only to its own entry, so max-merge carries every count and
// the merged value stays unbiased.
//
// The error. The coin adds variance r·(step − r) ≤ |b|·step ≤ |b|·a·C,
// and a martingale's variance is the sum of its increments' variances, so
// counting up to magnitude M adds at most a·Σ|b_i|·C_i ≤ a·M²/2 = Error²·M²
// (C_i, the magnitude before increment i, grows by |b_i| on average; the
// sum is a left Riemann sum of ∫C dC). The standard deviation is at most
// Error·M, and at least half of it in the worst case of the power-of-two
// rounding. This holds across replicas too: each replica's C is its view
// of the whole counter, at most the global magnitude, and the global
// magnitude grows by |b_i| whichever replica counts increment i, so the
// sum over all replicas is the same integral. Below a·C = 2, that is C <
// 1/Error², the step is 1 and the counter is exact.
//
// Why the whole vector's magnitude and not this replica's entry or the
// value: a replica's own entry would give each of k replicas its own
// small step (k times the writes for a k-way split) without a better
// bound than Error·M; the value |ΣP − ΣN| would shrink the step when
// decrements cancel increments, but then the error is still bounded only
// by the magnitude the counter passed through, which a read cannot see.
// With the magnitude, the bound a read reports (CounterStd) is a function
// of the vector it read.

// ApproxRule makes the counters whose keys start with Prefix approximate,
// with a relative standard error of at most Error. The rule with the
// longest matching prefix wins; "" matches every counter. Likes are never
// approximate.
type ApproxRule struct {
	Prefix string
	// Error is the relative standard error target: the standard deviation
	// of the count is at most Error times its magnitude (ΣP + ΣN; the
	// value itself for a counter that only grows). In
	// MinApproxError..MaxApproxError.
	Error float64
}

// Bounds of ApproxRule.Error.
const (
	MinApproxError = 0.001
	MaxApproxError = 0.5
)

// validateApprox reports every problem with rules.
func validateApprox(rules []ApproxRule) error {
	var errs []error
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Prefix != "" && !crdt.ValidID(r.Prefix) {
			errs = append(errs, fmt.Errorf("region: approx: bad prefix %q", r.Prefix))
		}
		if !(r.Error >= MinApproxError && r.Error <= MaxApproxError) { // NaN fails too
			errs = append(errs, fmt.Errorf("region: approx %q: error %v is not in %v..%v", r.Prefix, r.Error, MinApproxError, MaxApproxError))
		}
		if seen[r.Prefix] {
			errs = append(errs, fmt.Errorf("region: approx: prefix %q twice", r.Prefix))
		}
		seen[r.Prefix] = true
	}
	return errors.Join(errs...)
}

// approxRules answers which rule a counter key has: longest prefix first.
type approxRules struct {
	rules []ApproxRule
}

func compileApprox(rules []ApproxRule) approxRules {
	a := approxRules{rules: append([]ApproxRule(nil), rules...)}
	sort.SliceStable(a.rules, func(i, j int) bool { return len(a.rules[i].Prefix) > len(a.rules[j].Prefix) })
	return a
}

// errorOf is the relative error target of counter key, 0 if it is exact.
func (a *approxRules) errorOf(key string) float64 {
	for i := range a.rules {
		if strings.HasPrefix(key, a.rules[i].Prefix) {
			return a.rules[i].Error
		}
	}
	return 0
}

// maxError is the largest target of any rule, 0 if there is none.
func (a *approxRules) maxError() float64 {
	m := 0.0
	for _, r := range a.rules {
		m = max(m, r.Error)
	}
	return m
}

// magnitude is ΣP + ΣN over v, as a float (it cannot overflow).
func magnitude(v crdt.Vector) float64 {
	m := 0.0
	for _, e := range v {
		m += float64(e.P) + float64(e.N)
	}
	return m
}

// approxStep is the step of an approximate counter with relative error
// target relErr at magnitude c: the largest power of two at most
// max(1, 2·relErr²·c), capped at MaxBy.
func approxStep(relErr, c float64) uint64 {
	x := 2 * relErr * relErr * c
	if !(x >= 2) {
		return 1
	}
	if x >= MaxBy {
		return MaxBy
	}
	return 1 << (bits.Len64(uint64(x)) - 1)
}

// approxCount is what an increment by `by` counts at step: q·step, plus
// step with probability r/step (q, r = |by| / step, |by| % step), with
// by's sign. Its expectation is by.
func approxCount(rng *rand.Rand, step uint64, by int64) int64 {
	m := uint64(by)
	if by < 0 {
		m = uint64(-by)
	}
	q, r := m/step, m%step
	n := q * step
	if r > 0 && rng.Uint64N(step) < r {
		n += step
	}
	if by < 0 {
		return -int64(n)
	}
	return int64(n)
}

// newRand returns the replica's random source: seeded by seed, or from
// crypto/rand if seed is 0.
func newRand(seed uint64) *rand.Rand {
	if seed == 0 {
		var b [16]byte
		_, _ = crand.Read(b[:]) // never fails (it panics if the OS cannot give randomness)
		return rand.New(rand.NewPCG(binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:])))
	}
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// approxIncr decides what an increment by `by` of an approximate counter
// with target relErr counts, given the counter's vector in the overlay (the
// state before the coin flip, earlier ops of the batch included). Writer
// goroutine only: it draws from the replica's random source.
func (t *txn) approxIncr(relErr float64, cur crdt.Vector, by int64) int64 {
	step := approxStep(relErr, magnitude(cur))
	if step == 1 {
		return by
	}
	return approxCount(t.r.rng, step, by)
}

// ApproxRules returns the configured approximate-counter rules, in
// configuration order.
func (c Counters) ApproxRules() []ApproxRule {
	return append([]ApproxRule(nil), c.r.cfg.Approx...)
}

// ApproxError is the relative error target of counter key: 0 if it is
// exact. Key "" (a family's total) has the largest target of any rule:
// the total adds up every counter, approximate ones included.
func (c Counters) ApproxError(key string) float64 {
	r := c.r
	if key == "" {
		return r.approx.maxError()
	}
	return r.approx.errorOf(key)
}

// CounterStd bounds the standard deviation of an approximate counter's
// value: relErr times its magnitude ΣP + ΣN in v (see the package's
// approximate counters: at most relErr·M for any order of increments at
// any replicas).
func CounterStd(relErr float64, v crdt.Vector) float64 {
	return relErr * magnitude(v)
}

// WindowStd bounds the standard deviation of an approximate counter's
// change over a window (or a series point): each increment in it was
// counted with a step at most 2·relErr²·M, M the counter's magnitude now
// (counter, its all-time vector), so the window's variance is at most
// 2·relErr²·M·W, W the window's magnitude (window, the window's summed
// vector). A window of a large counter is coarse: its increments were
// counted in steps of the whole counter's size, not the window's.
func WindowStd(relErr float64, counter, window crdt.Vector) float64 {
	m, w := magnitude(counter), magnitude(window)
	return relErr * math.Sqrt(2*max(m, w)*w)
}

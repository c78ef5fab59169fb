package region

import (
	"math"
	"testing"

	"github.com/tally-dev/tally/crdt"
)

// The step rule, pinned: the largest power of two at most 2·E²·C, and 1
// (exact) below 1/E².
func TestApproxStep(t *testing.T) {
	cases := []struct {
		relErr, c float64
		want      uint64
	}{
		{0.01, 0, 1},
		{0.01, 9_999, 1},       // 2e-4 · 9,999 < 2
		{0.01, 10_000, 2},      // = 2
		{0.01, 19_999, 2},      // < 4
		{0.01, 20_000, 4},      // = 4
		{0.01, 1_000_000, 128}, // 200
		{0.01, 1e7, 1024},      // 2,000
		{0.1, 1e6, 16384},      // 20,000
		{0.5, 1e30, MaxBy},     // capped
		{0.001, 1e6, 2},        // 2e-6 · 1e6 = 2
		{0.001, 999_999, 1},
	}
	for _, c := range cases {
		if got := approxStep(c.relErr, c.c); got != c.want {
			t.Errorf("approxStep(%v, %v) = %d, want %d", c.relErr, c.c, got, c.want)
		}
	}
	for c := 0.0; c < 1e9; c = c*1.37 + 1 {
		s := approxStep(0.03, c)
		if s&(s-1) != 0 || float64(s) > max(1, 2*0.03*0.03*c) || 2*float64(s) <= 2*0.03*0.03*c {
			t.Fatalf("approxStep(0.03, %v) = %d: not the largest power of two at most %v", c, s, 2*0.03*0.03*c)
		}
	}
}

// One increment's count is by on average, for every step and amount, with
// the variance r·(step − r) the error bound is built on.
func TestApproxCountUnbiased(t *testing.T) {
	rng := newRand(7)
	const draws = 200_000
	for _, c := range []struct {
		step uint64
		by   int64
	}{{2, 1}, {16, 1}, {1024, 1}, {16, 5}, {16, 16}, {16, 37}, {16, -1}, {64, -100}, {1 << 20, 3}} {
		var sum, sumSq float64
		for range draws {
			n := approxCount(rng, c.step, c.by)
			if n%int64(c.step) != 0 {
				t.Fatalf("step %d, by %d: counted %d, not a multiple of the step", c.step, c.by, n)
			}
			sum += float64(n)
			sumSq += float64(n) * float64(n)
		}
		m := uint64(c.by)
		if c.by < 0 {
			m = uint64(-c.by)
		}
		r := float64(m % c.step)
		wantVar := r * (float64(c.step) - r)
		mean := sum / draws
		variance := sumSq/draws - mean*mean
		se := math.Sqrt(wantVar / draws)
		if math.Abs(mean-float64(c.by)) > 5*se+1e-9 {
			t.Errorf("step %d, by %d: mean %v, want %d ± %v", c.step, c.by, mean, c.by, 5*se)
		}
		// The sample variance is as noisy as the number of coin
		// successes is small: check it where there are enough.
		hits := draws * r / float64(c.step)
		if wantVar == 0 && variance != 0 || hits >= 1000 && math.Abs(variance-wantVar) > 5*wantVar/math.Sqrt(hits) {
			t.Errorf("step %d, by %d: variance %v, want %v", c.step, c.by, variance, wantVar)
		}
	}
}

// simulateApprox counts n increments (by(i) each) the way the writer does,
// on one replica, and returns the estimate, the exact sum and the number
// of increments that counted something (each is a write).
func simulateApprox(relErr float64, seed uint64, n int, by func(i int) int64) (est, exact int64, writes int) {
	rng := newRand(seed)
	var v crdt.Vector
	for i := range n {
		b := by(i)
		exact += b
		step := approxStep(relErr, magnitude(v))
		c := b
		if step > 1 {
			c = approxCount(rng, step, b)
		}
		if c != 0 {
			writes++
			v = v.Add("r", c)
		}
	}
	return v.Value(), exact, writes
}

func one(int) int64 { return 1 }

// The counter's mean over many runs is the true count (unbiased), for
// increments by 1 and for mixed amounts and signs.
func TestApproxCounterUnbiased(t *testing.T) {
	const relErr, runs, n = 0.1, 600, 20_000
	mixed := func(i int) int64 { return []int64{1, 7, -3, 2, 1, 1, -1, 40}[i%8] }
	for _, c := range []struct {
		name string
		by   func(int) int64
	}{{"by 1", one}, {"mixed", mixed}} {
		var sum, sumSq float64
		var exact int64
		for seed := range uint64(runs) {
			est, ex, _ := simulateApprox(relErr, seed+1, n, c.by)
			exact = ex
			d := float64(est - ex)
			sum += d
			sumSq += d * d
		}
		mean := sum / runs
		std := math.Sqrt(sumSq/runs - mean*mean)
		if se := std / math.Sqrt(runs); math.Abs(mean) > 4*se {
			t.Errorf("%s: mean error %v over %d runs to %d, more than 4 standard errors (%v): biased", c.name, mean, runs, exact, se)
		}
		if std == 0 {
			t.Errorf("%s: no run erred: the counter was not approximate", c.name)
		}
	}
}

// The relative error at 10^5..10^7 increments stays within the target
// (RMS over seeds at most the target, every seed within 3×), and the
// writes are O(log C / a): about 2/a exact ones, then 1/a per doubling.
func TestApproxCounterErrorAndWrites(t *testing.T) {
	const relErr = 0.01
	a := 2 * relErr * relErr
	for _, c := range []struct {
		n, seeds int
	}{{100_000, 40}, {1_000_000, 12}, {10_000_000, 4}} {
		var sumSq, worst float64
		for seed := range uint64(c.seeds) {
			est, exact, writes := simulateApprox(relErr, 1000+seed, c.n, one)
			rel := float64(est-exact) / float64(exact)
			sumSq += rel * rel
			worst = max(worst, math.Abs(rel))
			want := 2/a + math.Log2(a*float64(c.n)/2)/a
			if float64(writes) > 1.3*want || float64(writes) < 0.7*want {
				t.Errorf("%d increments, seed %d: %d writes, want about %.0f", c.n, seed, writes, want)
			}
		}
		rms := math.Sqrt(sumSq / float64(c.seeds))
		t.Logf("%d increments at target %v: RMS relative error %.4f, worst %.4f over %d seeds", c.n, relErr, rms, worst, c.seeds)
		if rms > 1.25*relErr || worst > 3*relErr {
			t.Errorf("%d increments: RMS relative error %.4f, worst %.4f; target %v", c.n, rms, worst, relErr)
		}
	}
}

// BenchmarkApproxCounterError reports the error of an approximate counter
// (target 1%) after 10^7 increments by 1 against the exact count, over 20
// seeds, and its writes: the figures of docs/benchmarks.md.
func BenchmarkApproxCounterError(b *testing.B) {
	const relErr, n, seeds = 0.01, 10_000_000, 20
	for range b.N {
		var sumAbs, sumSq, worst float64
		writes := 0
		for seed := range uint64(seeds) {
			est, exact, w := simulateApprox(relErr, 1+seed, n, one)
			rel := float64(est-exact) / float64(exact)
			sumAbs += math.Abs(rel)
			sumSq += rel * rel
			worst = max(worst, math.Abs(rel))
			writes += w
		}
		b.ReportMetric(sumAbs/seeds, "mean|err|")
		b.ReportMetric(math.Sqrt(sumSq/seeds), "rms-err")
		b.ReportMetric(worst, "max|err|")
		b.ReportMetric(float64(writes)/seeds, "writes/10M")
	}
}

func TestApproxRulesLongestPrefix(t *testing.T) {
	a := compileApprox([]ApproxRule{{"", 0.05}, {"views:", 0.01}, {"views:home", 0.002}})
	for key, want := range map[string]float64{"x": 0.05, "views:1": 0.01, "views:home:7": 0.002, "views": 0.05} {
		if got := a.errorOf(key); got != want {
			t.Errorf("errorOf(%q) = %v, want %v", key, got, want)
		}
	}
	none := compileApprox(nil)
	if none.errorOf("views:1") != 0 || none.maxError() != 0 {
		t.Error("no rule must mean exact")
	}
	if a.maxError() != 0.05 {
		t.Errorf("maxError %v", a.maxError())
	}
}

func TestApproxRulesValidated(t *testing.T) {
	for _, bad := range [][]ApproxRule{
		{{"views:", 0}},
		{{"views:", 0.0009}},
		{{"views:", 0.51}},
		{{"views:", math.NaN()}},
		{{"bad prefix", 0.01}},
		{{"views:", 0.01}, {"views:", 0.02}},
	} {
		if err := validateApprox(bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if err := validateApprox([]ApproxRule{{"", 0.5}, {"views:", 0.001}}); err != nil {
		t.Errorf("good rules refused: %v", err)
	}
}

// The bounds a read reports: E·M for the counter; E·sqrt(2·M·W) for a
// window of magnitude W of a counter of magnitude M.
func TestApproxStdBounds(t *testing.T) {
	v := crdt.Vector{{Replica: "a", PN: crdt.PN{P: 600, N: 100}}, {Replica: "b", PN: crdt.PN{P: 300}}}
	if got := CounterStd(0.01, v); math.Abs(got-10) > 1e-9 {
		t.Errorf("CounterStd = %v, want 10 (1%% of 1,000)", got)
	}
	w := crdt.Vector{{Replica: "a", PN: crdt.PN{P: 5}}}
	if got, want := WindowStd(0.01, v, w), 0.01*math.Sqrt(2*1000*5); math.Abs(got-want) > 1e-9 {
		t.Errorf("WindowStd = %v, want %v", got, want)
	}
}

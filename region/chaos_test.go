package region

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// The NoReconcile bug leaves a concurrent like counted twice in a chaos
// build, and is ignored in any other: the negative control the chaos suite
// relies on really breaks the count, and only where it is meant to.
func TestNoReconcileOnlyInChaosBuild(t *testing.T) {
	boxA, boxB := &mailbox{}, &mailbox{}
	clock := &stepClock{}
	bug := func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.NoReconcile) }
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.OnCommit, c.Now = boxA.onCommit, clock.now; bug(c) })
	b, _ := openReplica(t, t.TempDir(), "B", func(c *Config) { c.OnCommit, c.Now = boxB.onCommit, clock.now; bug(c) })
	ctx := context.Background()
	if _, err := a.Likes().Like(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Likes().Like(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, boxA, boxB)
	want := int64(1)
	if buildtags.Chaos {
		want = 2
	}
	for _, r := range []*Replica{a, b} {
		if got := mustLikes(t, r, "post").Value; got != want {
			t.Errorf("%s: count %d, want %d (chaos build %t)", r.ID(), got, want, buildtags.Chaos)
		}
	}
}

// The SketchStoredOnly bug leaves a peer's sketch pages unmerged in a chaos
// build, and is ignored in any other: the unique-count control of the
// chaos suite really breaks the merge, and only where it is meant to.
func TestSketchStoredOnlyOnlyInChaosBuild(t *testing.T) {
	boxA := &mailbox{}
	bug := func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.SketchStoredOnly) }
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.OnCommit = boxA.onCommit; bug(c) })
	b, _ := openReplica(t, t.TempDir(), "B", bug)
	ctx := context.Background()
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("viewer-%d", i)
	}
	if _, err := a.Apply(ctx, Op{Kind: OpUniques, Item: "k", IDs: ids}); err != nil {
		t.Fatal(err)
	}
	var pages []SketchMerge
	for _, c := range boxA.take() {
		for _, s := range c.Sketches {
			pages = append(pages, SketchMerge{Kind: s.Kind, Name: s.Name, Replica: a.ID(), Page: s.Page, Regs: s.Regs})
		}
	}
	if len(pages) == 0 {
		t.Fatal("A committed no sketch pages")
	}
	if err := b.MergeSketches(ctx, pages); err != nil {
		t.Fatal(err)
	}
	want := mustUniques(t, a, "k").Estimate
	if buildtags.Chaos {
		want = 0
	}
	if got := mustUniques(t, b, "k").Estimate; got != want {
		t.Errorf("B estimates %v, want %v (chaos build %t)", got, want, buildtags.Chaos)
	}
}

// The SpendWithoutRights bug overspends budgets in a chaos build, caught by
// the same invariants the budget property test checks, and is ignored in
// any other build.
func TestSpendWithoutRightsOnlyInChaosBuild(t *testing.T) {
	bug := func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.SpendWithoutRights) }
	controlCaught(t, "spending without rights", func(seed uint64) string { return budgetRun(t, seed, 250, bug, -1) })
}

// The CashbackNoFloor bug overdraws the merchant's balance in a chaos
// build, caught by the budget property test's floor, and is ignored in
// any other build.
func TestCashbackNoFloorOnlyInChaosBuild(t *testing.T) {
	bug := func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.CashbackNoFloor) }
	controlCaught(t, "cashback without the merchant's floor", func(seed uint64) string { return budgetRun(t, seed, 250, bug, -1) })
}

// controlCaught runs a simulation with a chaos bug on six seeds: in a
// chaos build its checks must catch the bug at least once (a control that
// passes proves nothing), in any other build never (the bug is off).
func controlCaught(t *testing.T, what string, run func(seed uint64) string) {
	t.Helper()
	caught := 0
	for seed := range uint64(6) {
		if v := run(seed); v != "" {
			caught++
			t.Logf("seed %d: %s", seed, v)
		}
	}
	if buildtags.Chaos && caught == 0 {
		t.Fatalf("%s was never caught", what)
	}
	if !buildtags.Chaos && caught > 0 {
		t.Fatalf("the chaos bug changed %d runs outside a chaos build", caught)
	}
}

// The issue 27 controls of the chaos suite's forge episode break what the
// fixes of issue 27 bound, in a chaos build only: one ask of 2^40 takes
// every right (give-what-is-asked), peers a day ahead move the clock a day
// (clock-follows-peers), and a saturated sketch estimates +Inf
// (estimate-unbounded). In any other build the fields are ignored.
func TestIssue27BugsOnlyInChaosBuild(t *testing.T) {
	t.Run("give-what-is-asked", func(t *testing.T) {
		r, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.GiveWhatIsAsked) })
		got := (&txn{r: r}).chaosGive(1000, 0, 1<<40, 0)
		want := int64(500) // crdt.Give: half of the spare
		if buildtags.Chaos {
			want = 1000
		}
		if got != want {
			t.Errorf("a holder of 1000 gives %d for an ask of 2^40, want %d (chaos build %t)", got, want, buildtags.Chaos)
		}
	})
	t.Run("clock-follows-peers", func(t *testing.T) {
		r, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.ClockFollowsPeers) })
		day := (25 * time.Hour).Milliseconds()
		got := r.AdjustClock(day)
		want := maxPeerStep.Milliseconds()
		if buildtags.Chaos {
			want = day
		}
		if got != want || r.ClockCorrectionMs() != want {
			t.Errorf("peers 25 h ahead moved the clock %d ms (correction %d), want %d (chaos build %t)", got, r.ClockCorrectionMs(), want, buildtags.Chaos)
		}
	})
	t.Run("estimate-unbounded", func(t *testing.T) {
		r, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.EstimateUnbounded) })
		var sat crdt.HLLPage
		for i := range sat {
			sat[i] = crdt.HLLMaxRho
		}
		var pages []SketchMerge
		for pg := range crdt.HLLPages {
			pages = append(pages, SketchMerge{Kind: storage.Uniques, Name: "uv:forged", Replica: "B", Page: pg, Regs: sat})
		}
		if err := r.MergeSketches(context.Background(), pages); err != nil {
			t.Fatal(err)
		}
		got := mustUniques(t, r, "uv:forged").Estimate
		if buildtags.Chaos != math.IsInf(got, 1) || !buildtags.Chaos && got != crdt.HLLMaxEstimate {
			t.Errorf("a saturated sketch estimates %v (chaos build %t)", got, buildtags.Chaos)
		}
	})
}

// With AckUnheld, a like of an item on a shard this replica does not hold
// is acknowledged and not stored, in a chaos build; in any other it is
// refused with ErrNotHeld, as without the bug. A write of a held shard is
// applied either way.
func TestAckUnheldOnlyInChaosBuild(t *testing.T) {
	held := shard.Of("kept")
	r, _ := openReplica(t, t.TempDir(), "A", func(c *Config) {
		c.Holds = func(s int) bool { return s == held }
		c.Failpoints = testkit.Armed(t, failpoint.AckUnheld)
	})
	ctx := context.Background()
	item := "dropped"
	for shard.Of(item) == held {
		item += "x"
	}
	_, err := r.Likes().Like(ctx, item, "alice")
	if buildtags.Chaos {
		if err != nil {
			t.Fatalf("chaos build: the like of an unheld item was refused: %v", err)
		}
		if rd, err := r.Likes().Count(item); err != nil || rd.Value != 0 {
			t.Fatalf("chaos build: the acknowledged like was stored: %+v %v", rd, err)
		}
	} else if !errors.Is(err, ErrNotHeld) {
		t.Fatalf("like of an unheld item: %v, want ErrNotHeld", err)
	}
	if _, err := r.Likes().Like(ctx, "kept", "alice"); err != nil {
		t.Fatal(err)
	}
	if rd, err := r.Likes().Count("kept"); err != nil || rd.Value != 1 {
		t.Fatalf("the held item: %+v %v", rd, err)
	}
}

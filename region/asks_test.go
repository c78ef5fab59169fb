package region

import (
	"context"
	"github.com/tally-dev/tally/internal/base/testkit"
	"testing"
	"time"
)

// What asks can take from a holder, on the writer's own clock: one
// answer per asker and budget per giveIntervalMs, each at most half of
// what the holder can spare, and never what it spent in the last window.
func TestAsksTakeHalfTheSpareAtABoundedRate(t *testing.T) {
	clock := testkit.NewClock(time.UnixMilli(1_700_000_000_000))
	r, _ := openReplica(t, t.TempDir(), "eu-1", func(c *Config) { c.Now = clock.Now })
	ctx := context.Background()
	if _, err := r.Apply(ctx, Op{Kind: OpGrant, Item: "bx", By: 1000}); err != nil {
		t.Fatal(err)
	}
	rights := func() int64 {
		t.Helper()
		rd, err := r.Budgets().Get("bx")
		if err != nil {
			t.Fatal(err)
		}
		return rd.LocalRights
	}
	ask := func(n int, to string) {
		t.Helper()
		gives := make([]RightsGive, n)
		for i := range gives {
			gives[i] = RightsGive{Key: "bx", To: to, Want: MaxBy}
		}
		if err := r.Budgets().GiveRights(ctx, gives); err != nil {
			t.Fatal(err)
		}
	}
	ask(100, "us-1") // a flood in one request
	if got := rights(); got != 500 {
		t.Fatalf("after 100 asks at once: %d left, want 500", got)
	}
	clock.Advance(giveIntervalMs * time.Millisecond / 2)
	ask(1, "us-1")
	if got := rights(); got != 500 {
		t.Fatalf("after an ask within the interval: %d left, want 500", got)
	}
	ask(1, "ap-1") // another asker has its own interval
	if got := rights(); got != 250 {
		t.Fatalf("after ap-1's ask: %d left, want 250", got)
	}
	clock.Advance(giveIntervalMs * time.Millisecond / 2)
	ask(1, "us-1")
	if got := rights(); got != 125 {
		t.Fatalf("after an ask an interval later: %d left, want 125", got)
	}
	// The holder's own demand: what it spent in the last window it keeps.
	for range 5 {
		if _, err := r.Apply(ctx, Op{Kind: OpSpend, Item: "bx", By: 20}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(giveIntervalMs * time.Millisecond)
	ask(1, "us-1")
	if got := rights(); got != 25 {
		t.Fatalf("after asks while it spent 100: %d left, want 25", got)
	}
	clock.Advance(2 * spendWindowMs * time.Millisecond)
	ask(1, "us-1")
	if got := rights(); got != 12 {
		t.Fatalf("after asks once its spends are past the window: %d left, want 12", got)
	}
}

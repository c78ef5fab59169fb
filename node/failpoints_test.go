package node

import (
	"testing"

	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/purchase"
)

// Every step of a cashback is a crash point the failpoint table knows, so
// TALLY_FAILPOINT=cashback:<step> is accepted for each; the coordinator
// gets no hook when nothing is armed, nor outside a chaos build.
func TestCashbackStepsAreFailpoints(t *testing.T) {
	for s := purchase.StepJournaled; s <= purchase.StepDone; s++ {
		if n := failpoint.CashbackStep(s.String()); !failpoint.Known(n) {
			t.Errorf("step %v: %q is no failpoint", s, n)
		}
	}
	if cashbackCrashes(nil) != nil {
		t.Error("a hook with nothing armed")
	}
	fp, err := failpoint.New(failpoint.CashbackStep("pool"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cashbackCrashes(fp) != nil; got != buildtags.Chaos {
		t.Errorf("armed cashback:pool: hook %t (chaos build %t)", got, buildtags.Chaos)
	}
	if h := cashbackCrashes(fp); h != nil {
		if err := h("p-1", purchase.StepJournaled); err != nil { // not the armed step: goes on
			t.Error(err)
		}
	}
}

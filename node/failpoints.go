package node

import (
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/purchase"
)

// cashbackCrashes is the purchase coordinator's AtStep for the crash
// points fp arms: at "cashback:<step>" (failpoint.CashbackStep) a
// cross-shard cashback about to take that step kills its own process, as
// kill -9 would. Tests crash a deployment at each step that way and check
// that the restarted one finishes or undoes every purchase. nil when fp
// arms nothing (always outside a chaos build).
func cashbackCrashes(fp *failpoint.Set) func(string, purchase.Step) error {
	if !fp.Any() {
		return nil
	}
	return func(_ string, s purchase.Step) error {
		fp.Crash(failpoint.CashbackStep(s.String()))
		return nil
	}
}

package chaos

import (
	"testing"
	"time"
)

// A region's process is stopped (SIGSTOP) for three times its lease TTL
// while the other regions keep liking, then continued and liked again: its
// lease expired in its own clock, so it queues likes until it has renewed
// the lease, which nobody else touched. No number is used twice or
// skipped, every milestone fires once, and every count is exact.
func TestMilestonesAcrossAPausedLeaseholder(t *testing.T) {
	realProcesses(t, "runs a chaos test on real processes")
	cfg := DefaultConfig()
	cfg.ToggleWeight, cfg.LateWeight = 0, 0 // the mix this test was tuned with
	cfg.Duration, cfg.Seed = 8*time.Second, 5
	cfg.Faults = []string{}
	cfg.LeaseTTL, cfg.Milestones = time.Second, "every:10"
	cfg.ConvergeTimeout = 20 * time.Second
	cfg.Schedule = []Episode{{Index: 1, Kind: KindPause, Region: "eu", At: 3 * time.Second, Dur: 3 * cfg.LeaseTTL}}
	rep := runChaos(t, cfg)
	if !rep.Pass {
		for region, tail := range rep.LogTails {
			t.Logf("log of %s:\n%s", region, tail)
		}
		t.Fatalf("FAIL: %v", rep.ViolationCounts)
	}
	if len(rep.Episodes) != 1 || rep.Episodes[0].Note != "" {
		t.Fatalf("the pause did not run as planned: %+v", rep.Episodes)
	}
	if rep.Checked.Milestones < 10 {
		t.Errorf("only %d milestones checked", rep.Checked.Milestones)
	}
}

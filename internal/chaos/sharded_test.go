package chaos

import (
	"testing"
	"time"
)

// shardedConfig is a sharded run: three regions of three replicas, each
// shard held by two of a region's replicas, the workload sending every
// request to a random replica of its region (which forwards it to a
// holder when it holds not the key), and the checks reading every
// replica. Its schedule: kill -9 of a replica, a region cut off, a
// replica restarted on an empty data dir (it gets its shards back from
// the other holders), and one replica stopped (SIGSTOP) while the rest of
// its region serves its shards; and shard moves behind them: us to three
// copies while us-2 is killed, then eu-2 drained while eu is cut off (the
// shard maps live in us: the drain waits for the heal). A quarter of the
// items are split in three parts on several shards (hot items), and
// every 50th like is a milestone, checked to fire once.
func shardedConfig() Config {
	cfg := DefaultConfig()
	cfg.Replicas, cfg.Copies = 3, 2
	cfg.Duration, cfg.Seed, cfg.Rate = 26*time.Second, 13, 100
	cfg.LikeWeight, cfg.PairWeight, cfg.IncrWeight, cfg.UniqueWeight, cfg.BudgetWeight, cfg.BlockWeight = 60, 10, 25, 8, 8, 5
	cfg.ToggleWeight, cfg.LateWeight = 0, 0
	cfg.Hot = "item-00=3" // item-000 to item-009 split in three parts each
	cfg.Faults = []string{FaultPartition, FaultKill, FaultWipe, FaultMove}
	cfg.Schedule = []Episode{
		{Index: 1, Kind: KindMove, At: time.Second, Dur: 500 * time.Millisecond, Region: "us", Copies: 3},
		{Index: 2, Kind: KindKill, At: 2 * time.Second, Dur: 1500 * time.Millisecond, Region: "us", Replica: "us-2"},
		{Index: 3, Kind: KindMove, At: 6 * time.Second, Dur: 500 * time.Millisecond, Region: "eu", Drain: "eu-2"},
		{Index: 4, Kind: KindIsolate, At: 7 * time.Second, Dur: 4 * time.Second, Region: "eu"},
		{Index: 5, Kind: KindWipe, At: 13 * time.Second, Dur: time.Second, Region: "ap", Replica: "ap-1"},
		{Index: 6, Kind: KindPause, At: 19 * time.Second, Dur: 3 * time.Second, Region: "eu", Replica: "eu-3"},
	}
	return cfg
}

// A sharded region under kill -9, a cut, a wipe and a stopped replica:
// every replica of every region reads the model's counts, records, like
// lists, slots and flags: PASS.
func TestChaosShardedRegionPasses(t *testing.T) {
	fullSuiteRun(t, "runs a sharded chaos test on nine real processes")
	rep := runChaos(t, shardedConfig())
	if !rep.Pass {
		for region, tail := range rep.LogTails {
			t.Logf("log of %s:\n%s", region, tail)
		}
		t.Fatalf("FAIL: %v", rep.ViolationCounts)
	}
	for _, e := range rep.Episodes {
		if e.Note != "" {
			t.Fatalf("episode %s did not run as planned: %s", e.What, e.Note)
		}
	}
	if rep.Checked.Samples == 0 || rep.Ops.OK < 1000 || rep.Checked.Milestones == 0 {
		t.Errorf("too little was checked: %+v, %d ops ok", rep.Checked, rep.Ops.OK)
	}
}

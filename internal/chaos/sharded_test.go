package chaos

import (
	"testing"
	"time"

	"github.com/tally-dev/tally/node"
)

// shardedConfig is a sharded run: three regions of three replicas, each
// shard held by two of a region's replicas, the workload sending every
// request to a random replica of its region (which forwards it to a
// holder when it holds not the key), and the checks reading every
// replica. Its schedule: shard moves, with a replica killed (-9) at each
// of their steps, then a replica restarted on an empty data dir (it gets
// its shards back from the other holders) and one replica stopped
// (SIGSTOP) while the rest of its region serves its shards. The moves: us
// to three copies, us-2 (joining shards) killed right after the join map
// is stored and us-3 right after the switch map; then eu-2 drained, eu-2
// (leaving shards) killed at the join, eu cut off (the shard maps live in
// us: the drain waits for the heal), eu-3 (joining eu-2's shards) killed
// at the switch, eu-2 at the settle (as it drops what it left), eu-1 once
// every replica took the settled map, and eu-2 again after the drain
// settled; then, after ap-1 is wiped, ap-3 drained: ap's remaining
// holders join shards whose entries of eu-2 (which left them) only the
// holders of eu-2's release have, and take them from their pages
// (testdata/shards/drain_twice.txt; two drains in a row never released
// before). A quarter of the items are split in three parts on several
// shards (hot items), and every 50th like is a milestone, checked to
// fire once.
func shardedConfig() Config {
	cfg := DefaultConfig()
	cfg.Replicas, cfg.Copies = 3, 2
	cfg.Duration, cfg.Seed, cfg.Rate = 34*time.Second, 13, 100
	cfg.LikeWeight, cfg.PairWeight, cfg.IncrWeight, cfg.UniqueWeight, cfg.BudgetWeight, cfg.BlockWeight = 60, 10, 25, 8, 8, 5
	cfg.ToggleWeight, cfg.LateWeight = 0, 0
	cfg.Hot = "item-00=3" // item-000 to item-009 split in three parts each
	cfg.Faults = []string{FaultPartition, FaultKill, FaultWipe, FaultMove}
	kill := func(i int, at time.Duration, replica, step string) Episode {
		return Episode{Index: i, Kind: KindKill, At: at, Dur: 1500 * time.Millisecond, Region: replica[:2], Replica: replica, Step: step}
	}
	cfg.Schedule = []Episode{
		{Index: 1, Kind: KindMove, At: time.Second, Dur: 100 * time.Millisecond, Region: "us", Copies: 3},
		kill(2, time.Second, "us-2", node.MoveJoin),
		kill(3, 3*time.Second, "us-3", node.MoveSwitch),
		{Index: 4, Kind: KindMove, At: 6 * time.Second, Dur: 100 * time.Millisecond, Region: "eu", Drain: "eu-2"},
		kill(5, 6*time.Second, "eu-2", node.MoveJoin),
		{Index: 6, Kind: KindIsolate, At: 8 * time.Second, Dur: 3 * time.Second, Region: "eu"},
		kill(7, 11*time.Second, "eu-3", node.MoveSwitch),
		kill(8, 12*time.Second, "eu-2", node.MoveSettle),
		kill(9, 13*time.Second, "eu-1", node.MoveDrop),
		kill(10, 16*time.Second, "eu-2", ""),
		{Index: 11, Kind: KindWipe, At: 20 * time.Second, Dur: time.Second, Region: "ap", Replica: "ap-1"},
		{Index: 12, Kind: KindMove, At: 22 * time.Second, Dur: 100 * time.Millisecond, Region: "ap", Drain: "ap-3"},
		{Index: 13, Kind: KindPause, At: 26 * time.Second, Dur: 3 * time.Second, Region: "eu", Replica: "eu-3"},
	}
	return cfg
}

// A sharded region under moves with kill -9 at each step, a cut, a wipe
// and a stopped replica:
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

package chaos

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/node"
)

func TestPlanIsAFunctionOfTheSeed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.Seed = 5*time.Minute, 7
	a, b := Plan(cfg), Plan(cfg)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two schedules")
	}
	cfg.Seed = 8
	if reflect.DeepEqual(a, Plan(cfg)) {
		t.Fatal("seeds 7 and 8 gave the same schedule")
	}
	seen := map[string]bool{}
	var last time.Duration
	for _, e := range a {
		seen[e.Kind] = true
		if e.At < last {
			t.Fatalf("episode %s starts before the previous one ends", e)
		}
		last = e.At + e.Dur
		if last > cfg.Duration {
			t.Fatalf("episode %s ends after the run", e)
		}
	}
	// Five minutes of the default mix draw every kind a 3-region run has.
	for _, k := range []string{KindIsolate, KindBridge, KindLoss, KindFlap, KindKill, KindWipe, KindNATS} {
		if !seen[k] {
			t.Errorf("no %s episode in %d episodes", k, len(a))
		}
	}
	if seen[KindSplit] {
		t.Error("a split with 3 regions: that is an isolation")
	}
}

func TestPlanOnlyDrawsSelectedFaults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration, cfg.Faults = 2*time.Minute, []string{FaultKill, FaultMsg}
	plan := Plan(cfg)
	if len(plan) == 0 {
		t.Fatal("no episodes")
	}
	for _, e := range plan {
		if e.Kind != KindKill {
			t.Fatalf("episode %s with faults %v", e, cfg.Faults)
		}
	}
	cfg.Faults = []string{FaultMsg}
	if plan := Plan(cfg); len(plan) != 0 {
		t.Fatalf("message faults need no episodes, got %v", plan)
	}
	cfg.Faults, cfg.Regions = []string{FaultPartition}, []string{"a", "b", "c", "d", "e"}
	for _, e := range Plan(cfg) {
		if e.Kind == KindSplit && (len(e.Minority) == 0 || len(e.Minority) >= len(e.Majority)) {
			t.Fatalf("split %s is not minority/majority", e)
		}
	}
}

// Every bug a run can ask the processes for is a failpoint they know, and
// every failpoint bug has its control among the runs' (but fences-lose,
// whose control is a scenario: TestCashbackCalledOffInOneRegionPaidIn-
// AnotherFencesLose): a run's TALLY_CHAOS_BUG is never refused by tallyd,
// and no bug goes untested.
func TestBugsAreFailpoints(t *testing.T) {
	var procs []string
	for _, b := range Bugs {
		if !HarnessBug(b) {
			procs = append(procs, b)
		}
	}
	var fps []string
	for _, n := range failpoint.Bugs() {
		if n != failpoint.FencesLose {
			fps = append(fps, string(n))
		}
	}
	slices.Sort(procs)
	slices.Sort(fps)
	if !slices.Equal(procs, fps) {
		t.Fatalf("the processes' bugs %v, the failpoints' %v", procs, fps)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Binary = "tallyd"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.Binary, bad.Duration, bad.Regions, bad.Faults, bad.Bug = "", time.Second, []string{"us", "us"}, []string{"quakes"}, "typo"
	err := bad.Validate()
	for _, want := range []string{"binary", "duration", "given twice", "quakes", "typo"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %q, got %v", want, err)
		}
	}
	bad = cfg
	bad.Milestones, bad.LeaseTTL = "every:zero", -time.Second
	bad.Schedule = []Episode{
		{Kind: KindPause, Region: "mars", At: time.Second, Dur: time.Second},
		{Kind: KindKill, Region: "us", At: 0, Dur: time.Second},
	}
	err = bad.Validate()
	for _, want := range []string{"milestones", "lease ttl", `unknown region "mars"`, "starts before episode 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %q, got %v", want, err)
		}
	}
	off := cfg
	off.Milestones = MilestonesOff
	if err := off.Validate(); err != nil {
		t.Errorf("milestones off: %v", err)
	}
}

func TestWorkloadIDsAreValid(t *testing.T) {
	for _, id := range []string{itemID(0), itemID(999), userID(1234), counterID(3), replicaID("us"), "op-123", uniqueKeyID(0), uniqueKeyID(99), uniqueID(0), uniqueID(99_999),
		budgetKeyID(0), budgetKeyID(9), cashbackPool, merchantID(0), cashbackUserID(9)} {
		if !crdt.ValidID(id) {
			t.Errorf("%q is not a valid tally id", id)
		}
	}
}

func TestPlannerIsAFunctionOfTheSeed(t *testing.T) {
	cfg := DefaultConfig().withDefaults()
	draw := func() []string {
		p := newPlanner(cfg, 3)
		var out []string
		for range 50 {
			for _, o := range p.next().ops {
				// The event times' lags and routes are drawn too.
				out = append(out, string(o.Kind)+" "+o.Region+" "+o.Key+" "+o.User+" "+o.lag.String()+" "+strconv.FormatBool(o.stamped || o.Events)+" "+strings.Join(o.IDs, ","))
			}
		}
		return out
	}
	a := draw()
	if !slices.Equal(a, draw()) {
		t.Fatal("the same seed drew two workloads")
	}
	// Worker 3 acts only as its own users: each user's actions come from
	// one worker, one at a time.
	for _, s := range a {
		f := strings.Fields(s)
		if f[0] == string(OpIncr) || f[0] == string(OpUnique) || OpKind(f[0]).budgetOp() || OpKind(f[0]).blockOp() || f[0] == string(OpHandoff) {
			continue // no user (a cashback's user is a balance; a block and a handoff are an admin's)
		}
		n, err := strconv.Atoi(strings.TrimPrefix(f[3], "user-"))
		if err != nil || n%cfg.Workers != 3 {
			t.Fatalf("worker 3 acted as %s", f[3])
		}
	}
}

// A sharded run takes what its checks cover, and its episodes name
// replicas of their regions.
func TestShardedConfigValidate(t *testing.T) {
	cfg := shardedConfig()
	cfg.Binary = "tallyd"
	if err := cfg.withDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cfg
	bad.Copies, bad.Faults = 4, []string{FaultForge}
	bad.Schedule = []Episode{
		{Kind: KindKill, Region: "us", Replica: "us-4", At: time.Second, Dur: time.Second},
		{Kind: KindIsolate, Region: "us", Replica: "us-1", At: time.Second, Dur: time.Second},
		{Kind: KindKill, Region: "us", Replica: "us-1", At: time.Second, Dur: time.Second, Step: "sync"},
		{Kind: KindPause, Region: "us", Replica: "us-1", At: time.Second, Dur: time.Second, Step: node.MoveJoin},
	}
	err := bad.Validate()
	for _, want := range []string{"copies 4", `fault "forge"`, `no replica "us-4"`, "only kill, wipe and pause", `unknown move step "sync"`, "only a kill or a wipe is aimed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error naming %q, got %v", want, err)
		}
	}
	one := DefaultConfig()
	one.Binary, one.Bug = "tallyd", BugAckUnheld
	if err := one.Validate(); err == nil || !strings.Contains(err.Error(), "only a sharded run") {
		t.Errorf("bug %s without shards: %v", BugAckUnheld, err)
	}
	// An assign that overwrites needs a settled map to overwrite: a
	// sharded run with moves.
	still := DefaultConfig()
	still.Binary, still.Bug, still.Replicas, still.Copies, still.Faults = "tallyd", BugAssignOverwrites, 3, 2, []string{FaultKill}
	if err := still.Validate(); err == nil || !strings.Contains(err.Error(), "with moves") {
		t.Errorf("bug %s without moves: %v", BugAssignOverwrites, err)
	}
	still.Faults = []string{FaultMove}
	if err := still.Validate(); err != nil {
		t.Errorf("bug %s with moves: %v", BugAssignOverwrites, err)
	}
}

// A seeded plan's kill or wipe hits a replica of its region when the run
// is sharded, and names none otherwise, so that unsharded seeds keep
// their schedules.
func TestPlanPicksReplicasOnlyWhenSharded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Faults, cfg.Duration = []string{FaultKill, FaultWipe}, 5*time.Minute
	for _, e := range Plan(cfg) {
		if e.Replica != "" {
			t.Fatalf("unsharded episode %s names replica %s", e, e.Replica)
		}
	}
	cfg.Replicas = 3
	seen := map[string]bool{}
	for _, e := range Plan(cfg) {
		if err := e.validate(cfg.Regions, cfg.Replicas); err != nil || e.Replica == "" {
			t.Fatalf("sharded episode %s: replica %q, %v", e, e.Replica, err)
		}
		seen[e.Replica] = true
	}
	if len(seen) < 4 {
		t.Fatalf("5 minutes of kills and wipes hit only %v", seen)
	}
}

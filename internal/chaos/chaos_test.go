package chaos

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// The end-to-end runs build the real binary once, with -tags chaos and
// without -race (the harness, in this test process, still runs under the
// race detector when the suite does), on the compile every test's build
// of tallyd shares (testkit.BuildTallyd).
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func chaosBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "tally-chaos-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "tallyd")
		binErr = testkit.BuildTallyd(binPath, "-tags", "chaos")
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// realProcesses marks a test that runs tallyd processes: skipped with
// -short, and run in parallel with the package's other such tests (as many
// at once as -parallel, GOMAXPROCS by default). A chaos run spends most of
// its time waiting (think times, restarts, convergence), so two at once
// take little longer than one, and each then runs on a machine as busy as
// a CI machine running other packages: a test that only passes on an idle
// machine fails here, not in CI.
func realProcesses(t *testing.T, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	t.Parallel()
}

// The chaos suite has two tiers. `make test` runs the model's unit
// tests, one passing run of every fault class (TestChaosFullMixPasses),
// the focused real-process tests (a crash, a pause or a wipe aimed at one
// protocol step) and a fixed set of negative controls (controlsInTest).
// `make chaos` sets TALLY_CHAOS_SUITE=full and adds the scenario runs
// that need many processes or minutes (the sharded region of nine
// processes, clock steps with forgeries, blocks during cuts, a cashback
// killed at every step) and every negative control. The tiers are fixed
// names, never a sample: the same commit is checked the same way on
// every run and every day.
const envSuite = "TALLY_CHAOS_SUITE"

// fullSuite reports whether TALLY_CHAOS_SUITE=full asks for every run.
func fullSuite() bool { return os.Getenv(envSuite) == "full" }

// fullSuiteRun marks a scenario run of the full tier: skipped, with a
// message naming `make chaos`, unless TALLY_CHAOS_SUITE=full; run in
// parallel like every real-process test otherwise.
func fullSuiteRun(t *testing.T, why string) {
	t.Helper()
	if !fullSuite() {
		t.Skipf("%s: in the full tier (`make chaos`, or %s=full)", why, envSuite)
	}
	realProcesses(t, why)
}

// testOut sends progress lines to the test log.
type testOut struct{ t *testing.T }

func (w testOut) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// runSlack is a run's time beyond its workload: the schedule running
// late, the final heal (up to 2 min), operations still retrying (up to
// 90 s), convergence and the final reads. Four minutes were not enough
// for a sharded run on a busy machine: the deadline fell during its final
// reads, and every read that failed for it became a violation.
const runSlack = 8 * time.Minute

func runChaos(t *testing.T, cfg Config) *Report {
	t.Helper()
	cfg.Binary = chaosBinary(t)
	cfg.Out = testOut{t}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+runSlack)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	rep.WriteText(&buf)
	t.Logf("run took %s\n%s", time.Since(start).Round(time.Second), buf.String())
	return rep
}

// A minute of every fault class, checked against the model: PASS.
func TestChaosFullMixPasses(t *testing.T) {
	realProcesses(t, "runs a one-minute chaos test on real processes")
	cfg := DefaultConfig()
	// Seed 2839 plans every kind of episode a 3-region run has in 60 s
	// (all but split, which needs four regions).
	cfg.Duration, cfg.Seed = 60*time.Second, 2839
	cfg.Rate = 100
	rep := runChaos(t, cfg)
	if !rep.Pass {
		for region, tail := range rep.LogTails {
			t.Logf("log of %s:\n%s", region, tail)
		}
		t.Fatalf("FAIL: %v", rep.ViolationCounts)
	}
	kinds := map[string]bool{}
	for _, e := range rep.Episodes {
		kinds[e.Kind] = true
	}
	if len(kinds) < 9 {
		t.Errorf("only %d fault kinds ran: %v", len(kinds), kinds)
	}
	if rep.Checked.Samples == 0 || rep.Ops.OK < 1000 {
		t.Errorf("too little was checked: %+v, %d ops ok", rep.Checked, rep.Ops.OK)
	}
}

// Clock steps (+1 h, -30 s, +30 s) and a malicious region's forgeries,
// each while the workload runs: PASS.
func TestChaosClockStepsAndForgeriesPass(t *testing.T) {
	fullSuiteRun(t, "runs a chaos test of clock steps and forgeries on real processes")
	cfg := DefaultConfig()
	cfg.Duration, cfg.Seed, cfg.Rate = 24*time.Second, 7, 100
	cfg.Schedule = []Episode{
		{Index: 1, Kind: KindClock, At: 2 * time.Second, Dur: 4 * time.Second, Region: "us", Offset: time.Hour},
		{Index: 2, Kind: KindForge, At: 7 * time.Second, Dur: 4 * time.Second, Region: "ap", Sketch: true},
		{Index: 3, Kind: KindClock, At: 12 * time.Second, Dur: 4 * time.Second, Region: "eu", Offset: -30 * time.Second},
		{Index: 4, Kind: KindClock, At: 17 * time.Second, Dur: 4 * time.Second, Region: "ap", Offset: 30 * time.Second},
	}
	rep := runChaos(t, cfg)
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
}

// Admins block and unblock users while regions are cut off, one after
// another, so blocks reach regions that took the users' likes meanwhile,
// and two regions flag one user at once: PASS, every count leaves out
// exactly the users whose latest flag is blocked.
func TestChaosBlocksDuringPartitionsPass(t *testing.T) {
	fullSuiteRun(t, "runs a chaos test of blocks during cuts on real processes")
	cfg := DefaultConfig()
	cfg.Duration, cfg.Seed, cfg.Rate = 20*time.Second, 5, 120
	cfg.LikeWeight, cfg.PairWeight, cfg.IncrWeight, cfg.UniqueWeight, cfg.BudgetWeight, cfg.BlockWeight = 70, 10, 10, 0, 0, 10
	cfg.ToggleWeight, cfg.LateWeight = 0, 0
	cfg.BlockUsers = 12
	cfg.Schedule = []Episode{
		{Index: 1, Kind: KindIsolate, At: 2 * time.Second, Dur: 4 * time.Second, Region: "us"},
		{Index: 2, Kind: KindIsolate, At: 8 * time.Second, Dur: 4 * time.Second, Region: "eu"},
		{Index: 3, Kind: KindIsolate, At: 14 * time.Second, Dur: 4 * time.Second, Region: "ap"},
	}
	rep := runChaos(t, cfg)
	if !rep.Pass {
		for region, tail := range rep.LogTails {
			t.Logf("log of %s:\n%s", region, tail)
		}
		t.Fatalf("FAIL: %v", rep.ViolationCounts)
	}
}

// Which negative controls TestChaosCatchesDeliberateBugs runs. All of
// them take minutes of real processes, two at a time, so `make test` runs
// a fixed few, controlsInTest, the same on every run, and `make chaos`
// (TALLY_CHAOS_SUITE=full) runs them all. TALLY_CHAOS_CONTROLS overrides
// the set: "all", or a comma-separated list of the controls' names. A
// single control also runs, whatever the set, when -run names its
// subtest: -run 'TestChaosCatchesDeliberateBugs/<bug>$'.
const envControls = "TALLY_CHAOS_CONTROLS"

// controlsInTest are the controls every run of the suite runs (the
// README's test section lists them). Each is cheap (three regions, one
// process each, or three each for the sharded one, a 10 s run) and fails
// every run by a wide margin: the workload meets its bug throughout the
// run, or a scheduled episode (aimed kills, two cuts) sets it off, so a
// run shows tens to hundreds of violations of its kind, not one by luck.
// Between them they cover the faults a bug most often hides behind:
//
//   - gossip-increments: message faults (duplicated messages), replication;
//   - ack-before-commit: kill -9, the writer's durability;
//   - spend-without-rights: partitions, budgets;
//   - forwarded-ack-unapplied: a sharded region's forwarding.
//
// The clock's, the forgeries' and the event log's controls
// (clock-follows-wall, trust-relays, log-skips-increments, ...) run in
// the full tier with the rest.
var controlsInTest = []string{
	"gossip-increments",
	"ack-before-commit",
	"spend-without-rights",
	BugForwardAckUnapplied,
}

// selectControls returns the names of the controls to run, in the order
// of all: controlsInTest, or what TALLY_CHAOS_CONTROLS says.
func selectControls(all []string, getenv func(string) string) ([]string, error) {
	want := controlsInTest
	v := getenv(envControls)
	if v == "" && getenv(envSuite) == "full" {
		v = "all"
	}
	switch v {
	case "":
	case "all":
		return all, nil
	default:
		want = nil
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				want = append(want, name)
			}
		}
		if len(want) == 0 {
			return nil, fmt.Errorf("%s=%q: want \"all\" or controls' names separated by commas", envControls, v)
		}
	}
	for _, name := range want {
		if !slices.Contains(all, name) {
			return nil, fmt.Errorf("%s: no negative control %q; the controls: %s", envControls, name, strings.Join(all, ", "))
		}
	}
	var out []string
	for _, name := range all {
		if slices.Contains(want, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// forgeOnly is the tweak of a control whose bug only a malicious region
// shows: no other fault, and one forge episode by ap, 2 s in, lasting dur
// (forging the saturated sketch too if sketch).
func forgeOnly(dur time.Duration, sketch bool) func(*Config) {
	return func(c *Config) {
		c.Faults = []string{}
		c.Schedule = []Episode{{Index: 1, Kind: KindForge, At: 2 * time.Second, Dur: dur, Region: "ap", Sketch: sketch}}
	}
}

// A negative control: a run with a deliberate bug, and the violation the
// checker must report for it.
type negativeControl struct {
	bug    string
	tweak  func(*Config)
	kind   string
	prefix string // of the violating key
	only   bool   // no violation of another kind: every total stays right
}

// negativeControls are every deliberate bug's control (Bugs), each with
// the workload and faults it was tuned with.
var negativeControls = []negativeControl{
	{
		// Duplicated messages count twice when the fast path gossips
		// increments: a count ends above what was applied. Every own
		// entry is gossiped so, like counts as much as counters: which
		// keys a run's duplicated messages hit is luck (one run hit only
		// likes), so any key's mismatch is the bug's.
		bug:   "gossip-increments",
		tweak: func(c *Config) { c.Faults = []string{FaultMsg} },
		kind:  KindValueMismatch, prefix: "",
	},
	{
		// Writes acknowledged before their commit die with kill -9.
		// Each kill is aimed: it comes the moment the workload sees
		// the region acknowledge an increment, so inside the 250 ms
		// the bug then holds that increment uncommitted. Where a
		// random kill lands in the writer's cycle was luck: on a busy
		// machine the fsync, not the window, filled the cycle, and two
		// kills once missed it. An aimed kill misses only if the
		// SIGKILL follows the client's answer by more than the window
		// less the answer's own way back; both must miss for the
		// control to pass. The run logs each aim.
		bug: "ack-before-commit",
		tweak: func(c *Config) {
			c.Faults = []string{FaultKill}
			c.Rate = 300
			c.LikeWeight, c.PairWeight, c.IncrWeight = 30, 0, 70
			// A failover retry would apply a lost increment again
			// at another region and hide the loss from the model.
			c.RetryElsewhere = 0
			c.Schedule = []Episode{
				{Index: 1, Kind: KindKill, At: 2 * time.Second, Dur: time.Second, Region: "ap", AfterAck: true},
				{Index: 2, Kind: KindKill, At: 6 * time.Second, Dur: time.Second, Region: "eu", AfterAck: true},
			}
		},
		// The increment each kill was aimed after, at least, and
		// whatever else sat in the window with it.
		kind: KindLostAck, prefix: "",
	},
	{
		// Concurrent likes of one user in two regions both count when
		// nobody reconciles.
		bug: "no-reconcile",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight = 40, 50, 10
		},
		kind: KindDoubleCount, prefix: "likes/",
	},
	{
		// Forged deltas merged whole rewrite other replicas' parts of
		// like records and add a stranger's entries.
		bug:   "trust-relays",
		tweak: forgeOnly(4*time.Second, false),
		kind:  KindValueMismatch, prefix: "likes/",
	},
	{
		// Stamps that follow a wall clock an hour ahead: the other
		// regions refuse the records stamped in the future, and the
		// regions disagree on them.
		bug: "clock-follows-wall",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight = 90, 0, 10
			c.Schedule = []Episode{{Index: 1, Kind: KindClock, At: 2 * time.Second, Dur: 5 * time.Second, Region: "us", Offset: time.Hour}}
		},
		kind: KindDisagreement, prefix: "item-", // a record, keyed item and user
	},
	{
		// Like lists that take only local likes, not merged ones:
		// each region lists only the likers it accepted itself.
		bug: "lists-local-only",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight = 90, 0, 10
		},
		kind: KindListMismatch, prefix: "likes/",
	},
	{
		// Increments retried at another region during cuts, with
		// nobody taking back the second application of a key.
		bug: "keys-not-reconciled",
		tweak: func(c *Config) {
			c.Faults = []string{FaultPartition}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.RetryElsewhere = 20, 0, 80, 0.6
		},
		kind: KindDoubleCount, prefix: "counter/",
	},
	{
		// Increments applied but left out of the event log: the
		// audit at the end of every run finds them.
		bug: "log-skips-increments",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight = 50, 0, 50
		},
		kind: KindAudit, prefix: "counter/",
	},
	{
		// Increments booked into the slot of their arrival
		// by the replica's clock, not of the client's event time
		// (up to maxLag before): the counters' 1 s slots differ
		// from the model's, though every total is right.
		bug: "buckets-at-arrival",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight = 50, 0, 50
		},
		kind: KindWindow, prefix: "counter/",
	},
	{
		// Sketch pages merged only into copies already stored: no
		// region ever takes another's sketch, so each region's unique
		// counts hold only the ids it was sent, while every counter,
		// like and slot stays right.
		bug: "sketch-merge-stored-only",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 40, 0, 30, 30
		},
		kind: KindUniques, prefix: "uniques/", only: true,
	},
	{
		// Spends allowed whenever the budget as a region sees it has
		// enough left, whoever holds the rights: while a region is
		// cut off, both sides spend the same last units, and views
		// and the final state go below 0, while every counter, like,
		// slot and cashback balance stays right.
		bug: "spend-without-rights",
		tweak: func(c *Config) {
			c.Faults = []string{FaultPartition}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight, c.BudgetWeight = 20, 0, 20, 0, 60
			c.Schedule = []Episode{
				{Index: 1, Kind: KindIsolate, At: 2 * time.Second, Dur: 2500 * time.Millisecond, Region: "ap"},
				{Index: 2, Kind: KindIsolate, At: 5500 * time.Millisecond, Dur: 2500 * time.Millisecond, Region: "eu"},
			}
		},
		kind: KindBudgets, prefix: "budget/", only: true,
	},
	{
		// Cashbacks that take their amount from the merchant's
		// balance whatever the region holds of it (issue 34): the
		// merchants' balances go below zero, in the views the
		// sampler reads during the run and in the final state, while
		// the accounts' sum stays right.
		bug: "cashback-no-floor",
		tweak: func(c *Config) {
			c.Faults = []string{FaultPartition}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight, c.BudgetWeight = 20, 0, 20, 0, 60
		},
		kind: KindBudgets, prefix: "budget/m:", only: true,
	},
	{
		// Block flags merged without the records' winners
		// reconciling: a block issued in one region leaves the
		// user's likes accepted elsewhere counted (and an unblock
		// leaves them out), so the regions' final counts differ from
		// the model's, which counts no blocked user's like.
		bug: "block-not-reconciled",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight, c.BlockWeight = 80, 0, 10, 0, 10
			c.BlockUsers = 20
		},
		kind: KindValueMismatch, prefix: "likes/",
	},
	{
		// Keyed increments of an approximate counter that write
		// what a second coin decides, not what their answers (and
		// records) say they counted: the counter drifts from the
		// sum of the counts the clients were told, while each read
		// stays approximate, alike everywhere, and as likely within
		// the error bound of the true sum as a correct one.
		bug: "approx-coin-twice",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.RetryElsewhere = 20, 0, 80, 0
			c.Counters, c.ApproxCounters = 1, 1
		},
		kind: KindValueMismatch, prefix: "counter/apx-",
	},
	{
		// Like records in the retired replica's name (issue 27, item
		// 1), forged by a region on its own subject every 50 ms and
		// taken as before the fix: each names a pair the workload
		// liked or unliked with an acknowledgement before the
		// episode, so the record exists and has a winner; it is
		// stamped long ago, so the winner keeps the register, and
		// claims the retired replica counted the user 1000 times, so
		// the winner reconciles the 1000 away with its own entry.
		// Which pairs is the seed's choice, not the timing's: every
		// forged record moves a count by about 1000.
		bug:   "trust-retired-relays",
		tweak: forgeOnly(4*time.Second, false),
		kind:  KindValueMismatch, prefix: "likes/",
	},
	{
		// Asks answered with what they want (issue 27, item 6): the
		// forge episode's one ask for 2^40 rights takes all 1000
		// each other region was granted just before, and the
		// episode, once a region's transfer shows (its own commit:
		// milliseconds; it waits up to 5 s), finds it holding 0, less
		// than half. The fixed rule gives exactly half.
		bug:   "give-what-is-asked",
		tweak: forgeOnly(4*time.Second, false),
		kind:  KindBudgetDrained, prefix: "budget/" + forgedBudget,
	},
	{
		// Clocks that follow their peers without bound (issue 27,
		// item 8): with the workload paused, the forge episode's
		// heartbeats in every replica's name, every 2 ms, are each
		// replica's last message from both its peers at nearly every
		// anti-entropy round (the peers themselves send one a
		// second), so every clock jumps an hour ahead, then a day,
		// at its first rounds of each phase; the episode then reads
		// each region's clock correction (clock-dragged). The clocks
		// agree there and stay: the final 1 s series reads also
		// answer no_window (window), the run being more than the
		// 1 s slots' 3 h ago by every region's clock.
		bug:   "clock-follows-peers",
		tweak: forgeOnly(4*time.Second, false),
		kind:  KindClockDragged, prefix: "clock",
	},
	{
		// A saturated sketch's estimate not kept finite (issue 27,
		// item 5): the forge episode publishes, as ap's replica, the
		// sketch of uv:forged with every register at its largest
		// value, before anything else; us and eu merge it, and at
		// the end their reads of the key answer 500 instead of the
		// clamped estimate.
		bug:   "estimate-unbounded",
		tweak: forgeOnly(3*time.Second, true),
		kind:  KindUniques, prefix: "uniques/" + forgedUniqueKey,
	},
	{
		// A sharded region (three replicas, two copies) whose
		// replicas acknowledge a write of a key on a shard they do
		// not hold as applied, and neither forward nor store it: a
		// third of the requests land on a replica not holding their
		// key, so acknowledged increments are missing from every
		// replica's vector, and acknowledged likes from the records.
		bug: BugAckUnheld,
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.Replicas, c.Copies, c.Milestones = 3, 2, MilestonesOff
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 50, 0, 50, 0
			// A failover retry would apply a dropped increment at
			// another region and hide the loss from the model.
			c.RetryElsewhere = 0
		},
		kind: KindLostAck, prefix: "counter/",
	},
	{
		// A sharded region (three replicas, two copies) whose holders
		// answer a write forwarded to them as served without applying
		// it: a third of the requests land on a replica not holding
		// their key and are forwarded, so the entry replica
		// acknowledges increments and likes that nobody stored. The
		// routing's control: a router that answers before the holder
		// commits.
		bug: BugForwardAckUnapplied,
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.Replicas, c.Copies, c.Milestones = 3, 2, MilestonesOff
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 50, 0, 50, 0
			c.RetryElsewhere = 0 // a failover retry would hide the loss
		},
		kind: KindLostAck, prefix: "counter/",
	},
	{
		// A shard move that deletes before the new holders have
		// synced: us-1 is drained 4 s into the run; the replicas
		// taking its shards say they synced at once, without
		// pulling, and us-1 drops its copies, its own entries
		// included, as soon as the switch map has it leave them. A replica's entries are taken only
		// from itself, so us-1's increments of those shards before
		// the move never reach the new holders, which read less
		// than the model.
		bug: BugDropUnsynced,
		tweak: func(c *Config) {
			c.Faults = []string{FaultMove}
			c.Replicas, c.Copies, c.Milestones = 3, 2, MilestonesOff
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 50, 0, 50, 0
			c.Schedule = []Episode{{Index: 1, Kind: KindMove, At: 4 * time.Second, Dur: time.Second, Region: "us", Drain: "us-1"}}
		},
		kind: KindValueMismatch, prefix: "counter/",
	},
	{
		// A shard map overwritten in one step: us-1 is drained 3 s
		// into the run, correctly (join, switch, settle, drop), and
		// once the drain settled the harness writes the config's map
		// over it, as the old assign and a restart with a config did.
		// us-1 holds again, at once, shards it dropped, without the
		// entries it handed to us-2 and us-3 (a replica's entries are
		// taken only from itself, and no join synced them back), and
		// the holder each shard loses keeps its entries unserved: us-1
		// reads less than the model. The assign's control.
		bug: BugAssignOverwrites,
		tweak: func(c *Config) {
			c.Faults = []string{FaultMove}
			c.Replicas, c.Copies, c.Milestones = 3, 2, MilestonesOff
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 50, 0, 50, 0
			c.Schedule = []Episode{{Index: 1, Kind: KindMove, At: 3 * time.Second, Dur: time.Second, Region: "us", Drain: "us-1"}}
		},
		kind: KindValueMismatch, prefix: "counter/",
	},
	{
		// Split items whose unlikes go to another part than the
		// user's like (every item in three parts): the unlike finds
		// no like there to undo, so the like stays counted where the
		// model has it undone.
		bug: BugSplitTwoParts,
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.Replicas, c.Copies, c.Milestones, c.Hot = 3, 2, MilestonesOff, "item-=3"
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 90, 0, 10, 0
		},
		kind: KindValueMismatch, prefix: "likes/",
	},
	{
		// A toggle that does not look for its key in the record:
		// every acknowledged toggle's key, resent to the region that
		// applied it as a client that lost the answer would, flips
		// the like again instead of answering duplicate:true.
		bug: "toggle-applies-twice",
		tweak: func(c *Config) {
			c.Faults = []string{}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.ToggleWeight = 40, 0, 20, 40
		},
		kind: KindToggle, prefix: "item-",
	},
	{
		// Like records merged by HLC alone, the client's time
		// ignored: a late pair's second action (stamped 30 s before
		// the first, sent to another region) taken while that region
		// is cut off from the first, and so applied there with a
		// later HLC, wins everywhere after the heal, and the user's
		// record contradicts the winning action.
		bug: "merge-ignores-client-time",
		tweak: func(c *Config) {
			c.Faults = []string{FaultPartition}
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.LateWeight = 30, 0, 10, 60
			c.Schedule = []Episode{
				{Index: 1, Kind: KindIsolate, At: 2 * time.Second, Dur: 2500 * time.Millisecond, Region: "ap"},
				{Index: 2, Kind: KindIsolate, At: 5500 * time.Millisecond, Dur: 2500 * time.Millisecond, Region: "eu"},
			}
		},
		kind: KindLostAck, prefix: "item-",
	},
}

// Negative controls: with each deliberate bug the checker must FAIL, and
// for the reason the bug causes.
func TestChaosCatchesDeliberateBugs(t *testing.T) {
	realProcesses(t, "runs chaos tests on real processes")
	var all []string
	for _, tc := range negativeControls {
		all = append(all, tc.bug)
	}
	picked, err := selectControls(all, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if len(picked) < len(all) {
		t.Logf("%d of %d controls: %s (%s=full or %s=all runs every one)",
			len(picked), len(all), strings.Join(picked, ", "), envSuite, envControls)
	}
	for _, tc := range negativeControls {
		if !slices.Contains(picked, tc.bug) && !namedByRun(tc.bug) {
			continue
		}
		t.Run(tc.bug, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			cfg.Duration, cfg.Seed, cfg.Bug = 10*time.Second, 11, tc.bug
			cfg.ConvergeTimeout = 8 * time.Second
			if tc.only {
				// A control that must show its bug's violation alone
				// waits as long as a passing run would: on a busy
				// machine, regions still converging after a short wait
				// would add a violation its bug did not cause. The wait
				// ends as soon as the regions agree.
				cfg.ConvergeTimeout = DefaultConfig().ConvergeTimeout
			}
			// No budgets, blocks, toggles or late pairs unless a control's tweak asks for them: each
			// control keeps the workload it was tuned with.
			cfg.BudgetWeight, cfg.BlockWeight, cfg.ToggleWeight, cfg.LateWeight = 0, 0, 0, 0
			tc.tweak(&cfg)
			rep := runChaos(t, cfg)
			if rep.Pass {
				t.Fatalf("bug %s went unnoticed", tc.bug)
			}

			if !rep.Has(tc.kind, tc.prefix) {
				t.Fatalf("bug %s: no %s violation on a %s key: %v", tc.bug, tc.kind, tc.prefix, rep.ViolationCounts)
			}
			if tc.only && len(rep.ViolationCounts) != 1 {
				t.Fatalf("bug %s: violations besides %s: %v", tc.bug, tc.kind, rep.ViolationCounts)
			}
		})
	}
}

// The set is the same on every run (no seed, no date): controlsInTest by
// default, every control with "all" or in the full tier, the named ones
// otherwise; an unknown name is refused. Every deliberate bug has its control.
func TestSelectControls(t *testing.T) {
	var all []string
	for _, tc := range negativeControls {
		all = append(all, tc.bug)
	}
	if !slices.Equal(slices.Sorted(slices.Values(all)), slices.Sorted(slices.Values(Bugs))) {
		t.Fatalf("controls %v, bugs %v: every bug needs one control", all, Bugs)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == envControls {
				return v
			}
			return ""
		}
	}
	got, err := selectControls(all, env(""))
	if err != nil || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(controlsInTest))) {
		t.Fatalf("default: %v %v, want %v", got, err, controlsInTest)
	}
	if got, err := selectControls(all, env("all")); err != nil || !slices.Equal(got, all) {
		t.Fatalf("all: %v %v", got, err)
	}
	if got, err := selectControls(all, env(" trust-relays,gossip-increments ")); err != nil || !slices.Equal(got, []string{"gossip-increments", "trust-relays"}) {
		t.Fatalf("two names: %v %v", got, err)
	}
	full := func(controls string) func(string) string {
		return func(k string) string {
			switch k {
			case envSuite:
				return "full"
			case envControls:
				return controls
			}
			return ""
		}
	}
	if got, err := selectControls(all, full("")); err != nil || !slices.Equal(got, all) {
		t.Fatalf("the full tier: %v %v, want every control", got, err)
	}
	if got, err := selectControls(all, full("trust-relays")); err != nil || !slices.Equal(got, []string{"trust-relays"}) {
		t.Fatalf("the full tier with a named control: %v %v", got, err)
	}
	for _, bad := range []string{"no-such-bug", "gossip-increments,nope", ",", "5"} {
		if got, err := selectControls(all, env(bad)); err == nil {
			t.Fatalf("%s=%q accepted: %v", envControls, bad, got)
		}
	}
}

// namedByRun reports whether -run names this control's subtest itself
// (a pattern with a "/" part that matches bug), so that a rerun of one
// control runs it whatever the pick.
func namedByRun(bug string) bool {
	f := flag.Lookup("test.run")
	if f == nil {
		return false
	}
	pat := f.Value.String()
	i := strings.IndexByte(pat, '/')
	if i < 0 {
		return false
	}
	re, err := regexp.Compile(pat[i+1:])
	return err == nil && re.MatchString(bug)
}

// The README's test section says which controls `make test` runs and how
// many there are: it says what controlsInTest and negativeControls say.
func TestREADMENamesTheControlsInTest(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(b)), " ")
	want := fmt.Sprintf("%d of the %d negative controls", len(controlsInTest), len(negativeControls))
	if !strings.Contains(readme, want) {
		t.Errorf("README does not say %q", want)
	}
	for _, name := range controlsInTest {
		if !strings.Contains(readme, "`"+name+"`") {
			t.Errorf("README does not name the control %s that make test runs", name)
		}
	}
	if !strings.Contains(readme, envSuite+"=full") {
		t.Errorf("README does not say how to run the full tier (%s=full)", envSuite)
	}
}

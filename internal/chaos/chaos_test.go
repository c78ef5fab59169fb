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

package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of a run: what ran, what was measured and every
// violation found. A failing run replays with the same Seed and Config.
type Report struct {
	Pass       bool            `json:"pass"`
	Seed       uint64          `json:"seed"`
	Config     ReportConfig    `json:"config"`
	Notes      []string        `json:"notes,omitempty"`
	StartedAt  time.Time       `json:"started_at"`
	ElapsedSec float64         `json:"elapsed_sec"`
	Episodes   []ReportEpisode `json:"episodes"`
	Ops        OpCounts        `json:"ops"`
	Checked    Checked         `json:"checked"`
	Measures   Measures        `json:"measures"`
	// ViolationCounts counts every violation by kind; Violations lists at
	// most maxListed of them.
	ViolationCounts map[string]int `json:"violation_counts"`
	Violations      []Violation    `json:"violations"`
	// LogTails are the ends of the region processes' logs, on FAIL.
	LogTails map[string]string `json:"log_tails,omitempty"`

	all []Violation // every violation, listed or not
}

const maxListed = 200

// ReportConfig is the configuration of the run.
type ReportConfig struct {
	Duration string   `json:"duration"`
	Regions  []string `json:"regions"`
	// Replicas per region and Copies of each shard, when sharded.
	Replicas      int      `json:"replicas,omitempty"`
	Copies        int      `json:"copies,omitempty"`
	Faults        []string `json:"faults"`
	ChaosBuild    bool     `json:"chaos_build"`
	MsgFaults     string   `json:"msg_faults,omitempty"`
	Bug           string   `json:"bug,omitempty"`
	Rate          float64  `json:"rate"`
	Workers       int      `json:"workers"`
	Users         int      `json:"users"`
	Items         int      `json:"items"`
	Counters      int      `json:"counters"`
	Mix           string   `json:"mix"`
	ClientTimeout string   `json:"client_timeout"`
	AntiEntropy   string   `json:"anti_entropy_interval"`
	PeerTimeout   string   `json:"peer_timeout"`
	Milestones    string   `json:"milestones"`
	LeaseTTL      string   `json:"lease_ttl,omitempty"` // "": tallyd's default
}

// ReportEpisode is an episode of the schedule as it ran (times in seconds
// from the start of the run).
type ReportEpisode struct {
	Index     int      `json:"index"`
	Kind      string   `json:"kind"`
	What      string   `json:"what"`
	PlannedAt float64  `json:"planned_at"`
	Start     float64  `json:"start"`
	End       float64  `json:"end"`
	HealMs    *float64 `json:"heal_ms,omitempty"`
	ReadyMs   *float64 `json:"ready_ms,omitempty"`
	Note      string   `json:"note,omitempty"`
}

// Checked says how much the checker looked at.
type Checked struct {
	Counters    int `json:"counters"`
	Items       int `json:"items"`
	UserRecords int `json:"user_records"`
	Regions     int `json:"regions"`
	// Samples counts own entries read by the no-rollback sampler.
	Samples int `json:"samples"`
	// Milestones counts the milestone numbers the regions used, each
	// checked to have fired exactly once, the same everywhere, for a like
	// the workload did; NumbersUsed the likes numbers used in all.
	Milestones  int    `json:"milestones"`
	NumbersUsed uint64 `json:"numbers_used"`
	// WindowSlots counts the non-zero slots compared (every level, every
	// region): counters' with the model, likes' between regions (JSON
	// name kept for report readers: slots); TrendingLists the trending
	// lists compared with the model.
	WindowSlots   int `json:"window_buckets"`
	TrendingLists int `json:"trending_lists"`
	// UniqueKeys counts the unique-count keys, UniqueReads the unique
	// counts compared (each key and their union, all time and last 24 h,
	// every region), UniqueIDs the distinct acknowledged ids of all keys.
	UniqueKeys  int `json:"unique_keys"`
	UniqueReads int `json:"unique_reads"`
	UniqueIDs   int `json:"unique_ids"`
	// BudgetKeys counts the budgets, BudgetReads the final reads of
	// budgets and cashback balances compared (every region),
	// BudgetSamples the views of budgets the sampler read during the run.
	BudgetKeys    int `json:"budget_keys"`
	BudgetReads   int `json:"budget_reads"`
	BudgetSamples int `json:"budget_samples"`
	// ApproxKeys counts the approximate counters, ApproxReads their final
	// reads compared (every region), ApproxIncrements their applied
	// increments, ApproxUnseen those with an answer lost (known only
	// within bounds), and ApproxMaxStep the largest count one answer
	// reported: above 1, they were counting approximately.
	ApproxKeys       int   `json:"approx_keys"`
	ApproxReads      int   `json:"approx_reads"`
	ApproxIncrements int   `json:"approx_increments"`
	ApproxUnseen     int   `json:"approx_unseen"`
	ApproxMaxStep    int64 `json:"approx_max_step"`
	// BudgetRefunds is what reconciliation gave back of keyed spends and
	// cashbacks applied in two regions (see budgetChecked).
	BudgetRefunds int64 `json:"budget_refunds"`
}

// Measures are the run's figures.
type Measures struct {
	// HealAfterFaults: after each link fault (partition, loss, flap, NATS
	// restart) healed, how long until every region held everything any
	// region held at the heal. HealNotReached counts heals after which that
	// did not happen within 15 s.
	HealAfterFaults Stats `json:"heal_after_faults"`
	HealNotReached  int   `json:"heal_not_reached"`
	// FinalConverged: after the final heal, every region read the same
	// values for long enough. FinalPerKey: per key, how long after the
	// final heal every region read the model value and kept it;
	// FinalAllKeysMs the time for the last key.
	FinalConverged bool    `json:"final_converged"`
	FinalPerKey    Stats   `json:"final_per_key"`
	FinalAllKeysMs float64 `json:"final_all_keys_ms"`
	// RestartToReady: kill and wipe restarts, from start to /readyz 200.
	RestartToReady Stats `json:"restart_to_ready"`
	// Availability of local writes while regions were cut apart, and over
	// the whole run; write latency (first-attempt acknowledgements).
	AvailabilityDuringLinkFaults Availability `json:"availability_during_link_faults"`
	AvailabilityOverall          Availability `json:"availability_overall"`
	WriteLatencyDuringLinkFaults Stats        `json:"write_latency_during_link_faults"`
	WriteLatency                 Stats        `json:"write_latency"`
}

// setViolations fills the violation fields and the verdict.
func (r *Report) setViolations(vs []Violation) {
	r.ViolationCounts = map[string]int{}
	for _, v := range vs {
		r.ViolationCounts[v.Kind]++
	}
	r.all = vs
	r.Violations = vs[:min(len(vs), maxListed)]
	if r.Violations == nil {
		r.Violations = []Violation{}
	}
	r.Pass = len(vs) == 0
}

// Has reports whether the report holds a violation of kind (whose key
// starts with keyPrefix, if not empty).
func (r *Report) Has(kind, keyPrefix string) bool {
	for _, v := range r.all {
		if v.Kind == kind && strings.HasPrefix(v.Key, keyPrefix) {
			return true
		}
	}
	return false
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func ms(v float64) string {
	if v < 0 {
		return "never"
	}
	if v >= 10_000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}

func (s Stats) String() string {
	if s.N == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d  p50 %s  p99 %s  max %s", s.N, ms(s.P50Ms), ms(s.P99Ms), ms(s.MaxMs))
}

// WriteText writes the readable summary; its last line is PASS or FAIL.
func (r *Report) WriteText(w io.Writer) {
	c := r.Config
	build := "normal build (no message faults, no bugs)"
	if c.ChaosBuild {
		build = "chaos build"
		if c.MsgFaults != "" {
			build += ", message faults " + c.MsgFaults
		}
		if c.Bug != "" && !HarnessBug(c.Bug) {
			build += ", DELIBERATE BUG " + c.Bug
		}
	}
	if HarnessBug(c.Bug) {
		if !c.ChaosBuild {
			build = "normal build (no message faults)"
		}
		build += ", DELIBERATE BUG " + c.Bug + " (played by the harness)"
	}
	faults := strings.Join(c.Faults, ",")
	if faults == "" {
		faults = "none"
	}
	fmt.Fprintf(w, "\ntally chaos: seed %d, %s, regions %s, faults %s\n", r.Seed, c.Duration, strings.Join(c.Regions, ","), faults)
	if c.Replicas > 1 {
		fmt.Fprintf(w, "  sharded: %d replicas per region, each shard held by %d; every replica checked\n", c.Replicas, c.Copies)
	}
	fmt.Fprintf(w, "  %s; %.0f ops/s by %d clients over %d users, %d items, %d counters\n", build, c.Rate, c.Workers, c.Users, c.Items, c.Counters)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	kinds := map[string]int{}
	for _, e := range r.Episodes {
		kinds[e.Kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	fmt.Fprintf(w, "faults: %d episodes (%s)\n", len(r.Episodes), strings.Join(parts, ", "))
	o := r.Ops
	fmt.Fprintf(w, "operations: %d (likes %d, unlikes %d, toggles %d, increments %d, unique adds %d, budget operations %d; %d concurrent pairs, %d late pairs)\n",
		o.Total, o.Likes, o.Unlikes, o.Toggles, o.Increments, o.Uniques, o.Grants+o.Spends+o.Cashbacks, o.Pairs, o.LatePairs)
	fmt.Fprintf(w, "  ok %d, failed %d (refused %d, not_ready %d), indeterminate %d: %d likes and unique adds retried until acknowledged, increments resolved %d applied before + %d at resolution, %d unresolved\n",
		o.OK, o.Failed, o.FailedRefused, o.FailedNotReady, o.TimedOut, o.LikesRetried, o.ResolvedDuplicate, o.ResolvedApplied, o.Unresolved)
	fmt.Fprintf(w, "  %d increments sent again to another region with the same idempotency key, %d answered duplicate there\n",
		o.RetriedElsewhere, o.RetryDuplicate)
	k := r.Checked
	fmt.Fprintf(w, "checked: %d counters and %d items in %d regions, %d user records, %d own-entry samples\n", k.Counters, k.Items, k.Regions, k.UserRecords, k.Samples)
	fmt.Fprintf(w, "time windows: %d non-empty slots (1s, 1m, 1h) compared, %d trending lists; %d operations sent with an event time, %d refused it (bad_time)\n",
		k.WindowSlots, k.TrendingLists, o.Stamped, o.FailedBadTime)
	if k.UniqueKeys > 0 {
		fmt.Fprintf(w, "unique counts: %d keys and their union, all time and last %s: %d answers compared in %d regions, %d distinct ids; %d adds sent %d ids, %d to two regions at once\n",
			k.UniqueKeys, uniqueWindow, k.UniqueReads, k.Regions, k.UniqueIDs, o.Uniques, o.UniqueIDs, o.UniquePairs)
	}
	if k.BudgetKeys > 0 {
		fmt.Fprintf(w, "budgets: %d budgets, %d views sampled during the run, %d final reads of budgets and cashback balances compared; %d grants, %d spends and %d cashbacks: %d done, %d refused (%d budget_exhausted, %d rights_elsewhere), %d unanswered (maybe); %d keyed ones sent again to another region, %d refunded by reconciliation; %d handoffs moved %d rights\n",
			k.BudgetKeys, k.BudgetSamples, k.BudgetReads, o.Grants, o.Spends, o.Cashbacks, o.BudgetDone, o.BudgetRefused, o.BudgetExhausted, o.RightsElsewhere, o.BudgetMaybe, o.BudgetRetriedElsewhere, k.BudgetRefunds, o.Handoffs, o.HandedOff)
	}
	if k.ApproxKeys > 0 {
		fmt.Fprintf(w, "approximate counters (error %g): %d counters, %d final reads compared; %d increments applied, counted in steps up to %d, %d with an answer lost\n",
			approxError, k.ApproxKeys, k.ApproxReads, k.ApproxIncrements, k.ApproxMaxStep, k.ApproxUnseen)
	}
	if c.Milestones != MilestonesOff {
		fmt.Fprintf(w, "milestones (%s): %d checked, each fired once and alike everywhere; %d like numbers used\n", c.Milestones, k.Milestones, k.NumbersUsed)
	}
	m := r.Measures
	fmt.Fprintf(w, "heal after link faults:  %s", m.HealAfterFaults)
	if m.HealNotReached > 0 {
		fmt.Fprintf(w, "  (%d not within 15 s)", m.HealNotReached)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "final heal to model:     every key everywhere after %s; per key %s\n", ms(m.FinalAllKeysMs), m.FinalPerKey)
	fmt.Fprintf(w, "restart to ready:        %s\n", m.RestartToReady)
	a := m.AvailabilityDuringLinkFaults
	fmt.Fprintf(w, "local writes during link faults: %.2f%% acknowledged (%d/%d), latency %s\n", 100*a.Ratio, a.Acked, a.Attempted, m.WriteLatencyDuringLinkFaults)
	a = m.AvailabilityOverall
	fmt.Fprintf(w, "local writes overall:            %.2f%% acknowledged (%d/%d), latency %s\n", 100*a.Ratio, a.Acked, a.Attempted, m.WriteLatency)
	if r.Pass {
		fmt.Fprintln(w, "violations: none")
		fmt.Fprintln(w, "PASS")
		return
	}
	total := 0
	var counts []string
	for _, kind := range slices.Sorted(maps.Keys(r.ViolationCounts)) {
		total += r.ViolationCounts[kind]
		counts = append(counts, fmt.Sprintf("%d %s", r.ViolationCounts[kind], kind))
	}
	fmt.Fprintf(w, "violations: %d\n", total)
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(w, "  ... %d more in the JSON report\n", total-20)
			break
		}
		fmt.Fprintf(w, "  %s\n", v)
	}
	fmt.Fprintf(w, "FAIL: %s (replay with --seed %d)\n", strings.Join(counts, ", "), r.Seed)
}

package chaos

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/milestone"
)

// Fault classes, as --faults names them.
const (
	FaultPartition = "partition" // isolate one region, majority/minority splits, one cut link
	FaultLoss      = "loss"      // one-way loss on a link
	FaultFlap      = "flap"      // a link going down and up every few hundred ms
	FaultKill      = "kill"      // kill -9 of a region's process, restart on the same data
	FaultWipe      = "wipe"      // kill -9, remove the data dir, restart empty
	FaultNATS      = "nats"      // restart of a region's nats-server
	FaultMsg       = "msg"       // drop, duplicate, delay and reorder replication messages (chaos build)
	FaultClock     = "clock"     // a region's wall clock steps ±30 s or +1 h, then back (chaos build)
	FaultForge     = "forge"     // a malicious region publishes forged deltas
	FaultMove      = "move"      // a region's shards move while it serves: more copies, or a replica drained (sharded runs)
)

// ShardedFaults are the fault classes a sharded run (Config.Replicas above
// 1) injects: the others address "the region's replica" (a forged or
// clock-stepped replica), which a region of several has not.
var ShardedFaults = []string{FaultPartition, FaultLoss, FaultFlap, FaultKill, FaultWipe, FaultNATS, FaultMsg, FaultMove}

// AllFaults lists every fault class, in the order reports show them.
var AllFaults = []string{FaultPartition, FaultLoss, FaultFlap, FaultKill, FaultWipe, FaultNATS, FaultMsg, FaultClock, FaultForge, FaultMove}

// Bugs are the deliberate bugs a chaos build can switch on (TALLY_CHAOS_BUG)
// for negative controls: the suite must FAIL with each of them.
var Bugs = []string{"gossip-increments", "ack-before-commit", "no-reconcile", "trust-relays", "clock-follows-wall", "lists-local-only", "keys-not-reconciled", "log-skips-increments", "buckets-at-arrival", "sketch-merge-stored-only", "spend-without-rights", "block-not-reconciled", "approx-coin-twice",
	"trust-retired-relays", "give-what-is-asked", "clock-follows-peers", "estimate-unbounded", BugAckUnheld, BugDropUnsynced,
	"toggle-applies-twice", "merge-ignores-client-time", "cashback-no-floor", BugSplitTwoParts, BugForwardAckUnapplied, BugAssignOverwrites,
	BugPartDigestsKeysOnly, BugDiffsWithoutRelays}

// BugAssignOverwrites is the deliberate bug of the shard map's writer,
// played by the harness itself (no process runs with it): once a move
// has settled, the region's map is written over in one step with the map
// its replicas' config computes, revision N to N+1 with no join, switch
// or settle, as the old `tallyd admin shards assign` and a restart with a
// config's shards block did. The replicas follow it at once: a drained
// replica holds again, at once, the shards it dropped, without the
// entries it handed to the other holders, and those holders stop
// serving shards whose entries it never synced.
const BugAssignOverwrites = "assign-overwrites"

// HarnessBug reports whether bug is one the harness plays, not the
// processes: they run without it, and any build of tallyd serves.
func HarnessBug(bug string) bool { return bug == BugAssignOverwrites }

// BugForwardAckUnapplied is the deliberate bug of a sharded region's
// routing: a holder answers a forwarded write as served without applying
// it, so the entry replica acknowledges what nobody stored.
const BugForwardAckUnapplied = "forwarded-ack-unapplied"

// BugAckUnheld is the deliberate bug of a sharded region (Config.Replicas
// above 1): a replica acknowledges a write of a key on a shard it does not
// hold as applied, and neither forwards nor stores it.
const BugAckUnheld = "ack-unheld-writes"

// BugDropUnsynced is the deliberate bug of shard moves (a sharded run
// with move episodes): a replica joining shards says it synced them at
// once, and one leaving shards drops their data at once, so the entries
// only the leaving replica had are lost.
const BugDropUnsynced = "delete-before-sync"

// BugSplitTwoParts is the deliberate bug of split items (Config.Hot): an
// unlike goes to another part than the user's like, finds nothing to
// undo, and the like stays counted.
const BugSplitTwoParts = "split-user-two-parts"

// BugPartDigestsKeysOnly is the deliberate bug of repair by parts: a
// part's digest hashes its entries' keys, not their values, so a replica
// holding an older value of a key never asks for the newer one.
const BugPartDigestsKeysOnly = "part-digests-keys-only"

// BugDiffsWithoutRelays is the deliberate bug of diff requests naming
// their asker: the peer sends its own and the asker's entries only, not
// those of a replica that left the shard, which a replica recovering from
// an empty store (or joining the shard) takes from a holder's page and
// from nowhere else.
const BugDiffsWithoutRelays = "diffs-without-relays"

// Config describes one chaos run. The zero value of every field but Binary
// means its default (see DefaultConfig).
type Config struct {
	// Binary is the tallyd executable to run as each region's process.
	// Required. A chaos build (`go build -tags chaos`) enables message
	// faults and Bug.
	Binary string
	// Duration is how long the workload runs at least, before the final
	// heal and checks; it runs on until every episode of the schedule is
	// over, since restarts and heals on a busy machine make a schedule
	// drift, and a planned fault is never dropped for that. Default 60s.
	Duration time.Duration
	// Seed fixes the fault schedule and the workload's choices: the same
	// seed gives the same schedule. Default 1.
	Seed uint64
	// Regions are the regions. Default us, eu, ap.
	Regions []string
	// Replicas is how many replicas (processes) each region runs, named
	// <region>-1 to <region>-N. Above 1 the regions are sharded (tallyd
	// serve's shards block): each shard is held by Copies of a region's
	// replicas, a replica forwards a request for a key it does not hold to
	// a holder, and the workload sends every request to a random replica
	// of its region, while the checks read every replica. Default 1.
	//
	// A sharded run checks what every replica answers, through forwarding
	// and gathering: per key counts, records, like lists, histories,
	// slots, approximate counters, block flags, unique counts and their
	// unions, budgets, family totals, trending, cashbacks (those whose
	// keys no replica holds together run across shards) and milestones (every replica numbers the likes it counted); its faults
	// are some of ShardedFaults.
	Replicas int
	// Copies is how many replicas of a region hold each shard (Replicas
	// above 1). Default 2.
	Copies int
	// RequestTimeout, if set, is every sharded replica's request_timeout
	// (how long a write, or a step of a cross-shard cashback, may take).
	// Default: tallyd's.
	RequestTimeout time.Duration
	// Faults are the fault classes to inject (AllFaults names them).
	// Default: all of them.
	Faults []string
	// Dir is where data dirs, NATS storage and process logs go. It must be
	// empty or absent. Default: a temporary directory, removed at the end.
	Dir string
	// Bug, if set, is one of Bugs: every region process runs with that
	// deliberate bug (chaos build only). For negative controls.
	Bug string
	// MsgFaults is TALLY_CHAOS_NET for the region processes when message
	// faults are on. Default "drop=0.1,dup=0.1,delay=30ms".
	MsgFaults string
	// Out receives progress lines. Default: discarded.
	Out io.Writer

	// Rate is the workload's target in operations per second, all regions
	// together. Default 150.
	Rate float64
	// Workers is how many clients run the workload; each user belongs to
	// one, which serializes that user's actions. Default 24.
	Workers int
	// Users, Items and Counters size the workload. Defaults 300, 40, 4.
	Users, Items, Counters int
	// ApproxCounters is how many approximate counters (apx-0, ...; see
	// approx.go) take increments beside the Counters exact ones, each as
	// likely to be drawn as an exact one. Default 2; negative: none.
	ApproxCounters int
	// LikeWeight, PairWeight, IncrWeight, UniqueWeight and BudgetWeight
	// set the mix of single likes/unlikes, concurrent pairs (one user in
	// two regions at once), counter increments, unique-count adds and
	// budget operations (grants, spends and cashbacks). Defaults 65, 10,
	// 25, 10, 10; all five zero means the defaults, so a mix that sets the
	// first three and not UniqueWeight or BudgetWeight adds no unique ids
	// and touches no budget.
	LikeWeight, PairWeight, IncrWeight, UniqueWeight, BudgetWeight int
	// BlockWeight sets the share of admin blocks and unblocks (blocks.go)
	// in the same mix, of the first BlockUsers users. Defaults 3 and 4;
	// like UniqueWeight, it is zero when the mix is set without it.
	BlockWeight, BlockUsers int
	// ToggleWeight sets the share of toggles (OpToggle), each under its
	// own idempotency key, and LateWeight that of late pairs: a like or
	// unlike stamped now, then, at another region, the opposite action
	// stamped 30 s before it, which must lose everywhere. Defaults 6 and
	// 5; like BlockWeight, zero when the mix is set without them.
	ToggleWeight, LateWeight int
	// UniqueKeys is how many unique-count keys the workload adds ids to
	// (uv:1, uv:2, ...), and UniqueIDs how many distinct ids it draws them
	// from: every key and region draws from the same ids, so an id is
	// added in several regions, to several keys, and more than once.
	// Defaults 3 and 10,000.
	UniqueKeys, UniqueIDs int
	// RetryElsewhere is the share of increments, and of keyed budget
	// spends and cashbacks, the client sends again, with the same
	// idempotency key, to another region right after the first answer, as
	// a client failing over would. Default 0.3.
	RetryElsewhere float64
	// ClientTimeout bounds one HTTP request of the workload. Default 1.5s.
	ClientTimeout time.Duration

	// SampleInterval is how often the no-rollback sampler reads every key in
	// every region. Default 1s.
	SampleInterval time.Duration
	// ConvergeTimeout bounds the wait for convergence after the final heal.
	// Default 60s.
	ConvergeTimeout time.Duration
	// AntiEntropyInterval and PeerTimeout are passed to the region
	// processes. Defaults 300ms and 2s.
	AntiEntropyInterval, PeerTimeout time.Duration

	// Hot is every replica's --hot rule, PREFIX=SPLITS ("" none): the
	// items under PREFIX are split into SPLITS parts on several shards,
	// each user's likes and unlikes of an item going to one part, and
	// every read summing the parts.
	Hot string
	// Milestones is the regions' --milestones rule: every counted like is
	// numbered from the global likes sequence and these numbers fire as
	// milestones, which the checker then checks (see checkMilestones).
	// Default "every:50", tens of milestones a minute at the default rate;
	// MilestonesOff runs without numbering.
	Milestones string
	// LeaseTTL is the regions' --lease-ttl. Zero: tallyd's default (4s).
	LeaseTTL time.Duration
	// Schedule, if not nil, is the fault schedule instead of Plan's: for
	// tests of one fault, such as KindPause, that the seeded mix does not
	// draw. Its episodes must be in time order.
	Schedule []Episode
}

// MilestonesOff as Config.Milestones runs the regions without numbering.
const MilestonesOff = "off"

// DefaultConfig returns the defaults (Binary is left empty).
func DefaultConfig() Config {
	return Config{
		Duration:            60 * time.Second,
		Seed:                1,
		Regions:             []string{"us", "eu", "ap"},
		Replicas:            1,
		Faults:              slices.Clone(AllFaults),
		MsgFaults:           "drop=0.1,dup=0.1,delay=30ms",
		Rate:                150,
		Workers:             24,
		Users:               300,
		Items:               40,
		Counters:            4,
		ApproxCounters:      2,
		LikeWeight:          65,
		PairWeight:          10,
		IncrWeight:          25,
		UniqueWeight:        10,
		BudgetWeight:        10,
		BlockWeight:         3,
		BlockUsers:          4,
		ToggleWeight:        6,
		LateWeight:          5,
		UniqueKeys:          3,
		UniqueIDs:           10_000,
		RetryElsewhere:      0.3,
		ClientTimeout:       1500 * time.Millisecond,
		SampleInterval:      time.Second,
		ConvergeTimeout:     60 * time.Second,
		AntiEntropyInterval: 300 * time.Millisecond,
		PeerTimeout:         2 * time.Second,
		Milestones:          "every:50",
	}
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	setDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setDur(&c.Duration, d.Duration)
	setDur(&c.ClientTimeout, d.ClientTimeout)
	setDur(&c.SampleInterval, d.SampleInterval)
	setDur(&c.ConvergeTimeout, d.ConvergeTimeout)
	setDur(&c.AntiEntropyInterval, d.AntiEntropyInterval)
	setDur(&c.PeerTimeout, d.PeerTimeout)
	setInt(&c.Workers, d.Workers)
	setInt(&c.Users, d.Users)
	setInt(&c.Items, d.Items)
	setInt(&c.Counters, d.Counters)
	setInt(&c.ApproxCounters, d.ApproxCounters)
	c.ApproxCounters = max(c.ApproxCounters, 0)
	setInt(&c.UniqueKeys, d.UniqueKeys)
	setInt(&c.UniqueIDs, d.UniqueIDs)
	setInt(&c.BlockUsers, d.BlockUsers)
	setInt(&c.Replicas, 1)
	if c.Replicas > 1 {
		setInt(&c.Copies, 2)
	}
	if c.LikeWeight == 0 && c.PairWeight == 0 && c.IncrWeight == 0 && c.UniqueWeight == 0 && c.BudgetWeight == 0 && c.BlockWeight == 0 &&
		c.ToggleWeight == 0 && c.LateWeight == 0 {
		c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight, c.BudgetWeight = d.LikeWeight, d.PairWeight, d.IncrWeight, d.UniqueWeight, d.BudgetWeight
		c.BlockWeight, c.ToggleWeight, c.LateWeight = d.BlockWeight, d.ToggleWeight, d.LateWeight
	}
	if c.Seed == 0 {
		c.Seed = d.Seed
	}
	if len(c.Regions) == 0 {
		c.Regions = d.Regions
	}
	if c.Faults == nil {
		c.Faults = d.Faults
	}
	if c.MsgFaults == "" {
		c.MsgFaults = d.MsgFaults
	}
	if c.Rate == 0 {
		c.Rate = d.Rate
	}
	if c.Milestones == "" {
		c.Milestones = d.Milestones
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return c
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Binary == "" {
		bad("binary: the tallyd executable is required")
	}
	if c.Duration < 5*time.Second {
		bad("duration %s: want at least 5s", c.Duration)
	}
	if len(c.Regions) < 2 {
		bad("regions: want at least 2, got %d", len(c.Regions))
	}
	seen := map[string]bool{}
	for _, r := range c.Regions {
		// Region names are NATS server, cluster and gateway names too.
		if strings.Trim(r, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" || len(r) == 0 || len(r) > 32 {
			bad("region %q: want 1..32 of [A-Za-z0-9_-]", r)
		}
		if seen[r] {
			bad("region %q given twice", r)
		}
		seen[r] = true
	}
	for _, f := range c.Faults {
		if !slices.Contains(AllFaults, f) {
			bad("fault %q: want some of %s (or all)", f, strings.Join(AllFaults, ","))
		}
	}
	if c.Replicas < 1 || c.Replicas > 9 {
		bad("replicas %d: want 1 to 9 per region", c.Replicas)
	}
	if !c.sharded() && slices.Contains(c.Faults, FaultMove) && len(c.Faults) < len(AllFaults) {
		bad("fault %q: only a sharded run (replicas above 1) moves shards", FaultMove)
	}
	if c.sharded() {
		if c.Copies < 1 || c.Copies > c.Replicas {
			bad("copies %d: want 1 to %d (the replicas)", c.Copies, c.Replicas)
		}
		for _, f := range c.Faults {
			if !slices.Contains(ShardedFaults, f) {
				bad("fault %q: a sharded run injects some of %s", f, strings.Join(ShardedFaults, ","))
			}
		}
	}
	if c.Bug == BugDropUnsynced && !c.sharded() {
		bad("bug %s: only a sharded run (replicas above 1) moves shards", c.Bug)
	}
	if c.Bug == BugSplitTwoParts && c.Hot == "" {
		bad("bug %s: only a run with split items (hot) has parts", c.Bug)
	}
	if c.Bug == BugForwardAckUnapplied && !c.sharded() {
		bad("bug %s: only a sharded run (replicas above 1) forwards", c.Bug)
	}
	if c.Bug == BugAssignOverwrites && (!c.sharded() || !c.has(FaultMove)) {
		bad("bug %s: only a sharded run with moves (fault %s) has a settled map to overwrite", c.Bug, FaultMove)
	}
	if c.Bug == BugAckUnheld && !c.sharded() {
		bad("bug %s: only a sharded run (replicas above 1) has shards a replica does not hold", c.Bug)
	}
	if c.Bug != "" && !slices.Contains(Bugs, c.Bug) {
		bad("bug %q: want one of %s", c.Bug, strings.Join(Bugs, ", "))
	}
	if c.Rate <= 0 || c.Rate > 5000 {
		bad("rate %v: want 0 < rate <= 5000 operations/s", c.Rate)
	}
	if c.Workers < 1 || c.Users < c.Workers || c.Items < 1 || c.Counters < 1 {
		bad("workload: want workers >= 1, users >= workers, items >= 1, counters >= 1 (got %d, %d, %d, %d)",
			c.Workers, c.Users, c.Items, c.Counters)
	}
	if c.LikeWeight < 0 || c.PairWeight < 0 || c.IncrWeight < 0 || c.UniqueWeight < 0 || c.BudgetWeight < 0 || c.BlockWeight < 0 ||
		c.ToggleWeight < 0 || c.LateWeight < 0 ||
		c.LikeWeight+c.PairWeight+c.IncrWeight+c.UniqueWeight+c.BudgetWeight+c.BlockWeight+c.ToggleWeight+c.LateWeight == 0 {
		bad("mix: weights must be >= 0 and not all 0")
	}
	if c.BlockWeight > 0 && (c.BlockUsers < 1 || c.BlockUsers > c.Users) {
		bad("blocks: want 1 to %d users to block (got %d)", c.Users, c.BlockUsers)
	}
	if c.UniqueWeight > 0 && (c.UniqueKeys < 1 || c.UniqueKeys > maxUniqueKeys || c.UniqueIDs < 1) {
		bad("unique counts: want 1 to %d keys and at least 1 id (got %d, %d)", maxUniqueKeys, c.UniqueKeys, c.UniqueIDs)
	}
	if c.RetryElsewhere < 0 || c.RetryElsewhere > 1 {
		bad("retry-elsewhere %v: want a share from 0 to 1", c.RetryElsewhere)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"client timeout", c.ClientTimeout}, {"sample interval", c.SampleInterval}, {"converge timeout", c.ConvergeTimeout},
		{"anti-entropy interval", c.AntiEntropyInterval}, {"peer timeout", c.PeerTimeout}} {
		if d.v <= 0 {
			bad("%s %s: want > 0", d.name, d.v)
		}
	}
	if c.Milestones != MilestonesOff {
		if r, err := milestone.ParseRule(c.Milestones); err != nil {
			bad("%v (or %s for none)", err, MilestonesOff)
		} else if r.Empty() {
			bad("milestones %q: no milestones (want e.g. every:50, or %s)", c.Milestones, MilestonesOff)
		}
	}
	if c.LeaseTTL < 0 {
		bad("lease ttl %s: want >= 0", c.LeaseTTL)
	}
	for i, e := range c.Schedule {
		if err := e.validate(c.Regions, c.Replicas); err != nil {
			bad("schedule episode %d: %v", i+1, err)
		}
		if i > 0 && e.At < c.Schedule[i-1].At {
			bad("schedule episode %d starts before episode %d", i+1, i)
		}
	}
	return errors.Join(errs...)
}

// numbering reports whether the regions number likes.
func (c Config) numbering() bool { return c.Milestones != MilestonesOff }

// Workload ids. They are valid tally ids by construction.
func itemID(i int) string    { return fmt.Sprintf("item-%03d", i) }
func userID(u int) string    { return fmt.Sprintf("user-%04d", u) }
func counterID(i int) string { return fmt.Sprintf("ctr-%d", i) }
func replicaID(region string) string {
	return region + "-1"
}

// replicaName is the id of a region's n-th replica (from 1).
func replicaName(region string, n int) string { return fmt.Sprintf("%s-%d", region, n) }

// replicaNames are region's replicas, n of them.
func replicaNames(region string, n int) []string {
	var out []string
	for i := 1; i <= n; i++ {
		out = append(out, replicaName(region, i))
	}
	return out
}

// sharded reports whether the regions run several replicas each, sharded.
func (c Config) sharded() bool { return c.Replicas > 1 }

func (c Config) has(fault string) bool { return slices.Contains(c.Faults, fault) }

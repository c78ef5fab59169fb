package chaos

// The negative controls of TestChaosCatchesDeliberateBugs (chaos_test.go):
// one per deliberate bug, each with the workload and faults it was tuned
// with.

import (
	"time"

	"github.com/tally-dev/tally/node"
)

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
	{
		// Repair by parts that digests a part by its keys alone: a
		// replica holding an older value of a key, and nothing else
		// different in that part, finds the part equal and never
		// asks for it. Values go stale wherever a delta is lost (ap
		// and eu cut off in turn, and messages dropped throughout),
		// and with 400 items and 40 counters most keys are not
		// written again after the loss, so the fast path does not
		// bring a newer value either: at the end the regions read
		// old values of many keys of every kind.
		bug: BugPartDigestsKeysOnly,
		tweak: func(c *Config) {
			c.Faults = []string{FaultMsg, FaultPartition}
			c.Items, c.Counters = 400, 40
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 50, 0, 50, 0
			c.Schedule = []Episode{
				{Index: 1, Kind: KindIsolate, At: 2 * time.Second, Dur: 2500 * time.Millisecond, Region: "ap"},
				{Index: 2, Kind: KindIsolate, At: 5500 * time.Millisecond, Dur: 2500 * time.Millisecond, Region: "eu"},
			}
		},
		kind: KindValueMismatch, prefix: "",
	},
	{
		// Diff pages for their asker without relays: us-1 is drained
		// 3 s into the run (its entries of the shards it leaves reach
		// their new holders from us-1 itself, while it still holds
		// them), and once every replica took the settled map, us-2
		// loses its disk. Recovering from nothing, us-2 can take
		// us-1's entries of the shards us-1 left only as relays from
		// their holders' pages, and under the bug no page carries
		// them: us-2 reads those keys short of the model.
		bug: BugDiffsWithoutRelays,
		tweak: func(c *Config) {
			c.Faults = []string{FaultMove, FaultWipe}
			c.Replicas, c.Copies, c.Milestones = 3, 2, MilestonesOff
			c.LikeWeight, c.PairWeight, c.IncrWeight, c.UniqueWeight = 50, 0, 50, 0
			c.Schedule = []Episode{
				{Index: 1, Kind: KindMove, At: 3 * time.Second, Dur: 100 * time.Millisecond, Region: "us", Drain: "us-1"},
				{Index: 2, Kind: KindWipe, At: 4 * time.Second, Dur: time.Second, Region: "us", Replica: "us-2", Step: node.MoveDrop},
			}
		},
		kind: KindValueMismatch, prefix: "counter/",
	},
}

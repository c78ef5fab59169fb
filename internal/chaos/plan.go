package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/node"
)

// Episode kinds. Each belongs to a fault class (see Config.Faults).
const (
	KindIsolate = "isolate" // every link of one region cut (partition)
	KindSplit   = "split"   // regions cut into a majority and a minority (partition; 4+ regions)
	KindBridge  = "bridge"  // one link cut; the other links stay up (partition)
	KindLoss    = "loss"    // one direction of one link discards its bytes (loss)
	KindFlap    = "flap"    // one link cut and healed every few hundred ms (flap)
	KindKill    = "kill"    // kill -9 of a region, restart on its data (kill)
	KindWipe    = "wipe"    // kill -9, data dir removed, restart empty (wipe)
	KindNATS    = "nats"    // a region's nats-server stopped and started again (nats)
	// KindPause stops a region's process (SIGSTOP) and continues it
	// (SIGCONT): a stalled process, whose clocks run on while it does
	// nothing. Plan never draws it (adding it to the mix would change every
	// seed's schedule); tests put it in Config.Schedule.
	KindPause = "pause"
	// KindClock steps one region's wall clock by Offset (±30 s or +1 h)
	// for Dur, then back (clock).
	KindClock = "clock"
	// KindForge is a malicious region: for Dur, a NATS client publishes
	// forged deltas, from a replica nobody configured and on a real
	// replica's subject carrying other replicas' or a retired replica's
	// parts of like records; then, with the workload paused, an ask for
	// 2^40 rights and, for 3 s, heartbeats far ahead in every replica's
	// name and a forged hello (forge).
	KindForge = "forge"
	// KindMove moves a sharded region's shards while it serves (a
	// run of Config.Replicas above 1): to Copies holders each, or with
	// Drain serving none; the move runs on behind the next episodes
	// (moves.go). Plan never draws it; tests put it in Config.Schedule.
	KindMove = "move"
)

// Episode is one fault of the schedule. Episodes run one after another.
type Episode struct {
	Index int    `json:"index"`
	Kind  string `json:"kind"`
	// At is when the episode is planned to start, from the start of the
	// run; Dur how long the fault lasts (for kill, wipe and nats: how long
	// the process or server stays down).
	At  time.Duration `json:"at"`
	Dur time.Duration `json:"dur"`
	// Region is the target of isolate, kill, wipe and nats.
	Region string `json:"region,omitempty"`
	// Replica, in a sharded run (Config.Replicas above 1), is which of
	// Region's replicas kill, wipe and pause hit (e.g. "us-2"); a pause
	// of one replica cuts it off from clients and from every other
	// replica of every region at once. Empty: the region's first.
	Replica string `json:"replica,omitempty"`
	// Minority and Majority are the two sides of a split.
	Minority []string `json:"minority,omitempty"`
	Majority []string `json:"majority,omitempty"`
	// A and B name the link of bridge, flap and loss (loss drops A -> B).
	A string `json:"a,omitempty"`
	B string `json:"b,omitempty"`
	// Flaps are the flap's alternating down and up times.
	Flaps []time.Duration `json:"flaps,omitempty"`
	// Offset is the clock episode's step of Region's wall clock.
	Offset time.Duration `json:"offset,omitempty"`
	// AfterAck aims a kill: once the episode starts, the process is killed
	// the moment the workload next sees Region acknowledge an increment,
	// not at a random point of the writer's cycle. A negative control
	// whose bug opens a window after each acknowledgement (ack before
	// commit) then hits that window on every kill, however busy the
	// machine, instead of by the luck of where a kill lands.
	AfterAck bool `json:"after_ack,omitempty"`
	// Copies and Drain are a move's target: Copies holders of each
	// shard (0: the run's Copies), or the replica Drain serving none.
	Copies int    `json:"copies,omitempty"`
	Drain  string `json:"drain,omitempty"`
	// Step aims a kill (or a wipe) at a step of a shard move: once
	// the episode starts, it waits until the latest move of Region (an
	// earlier move episode) takes that step (node.MoveJoin, MoveSwitch,
	// MoveSettle or MoveDrop: right after the step's map is stored, or
	// for drop once every replica took the settled map), then kills. A
	// step the move took already kills at once.
	Step string `json:"step,omitempty"`
	// Sketch: a forge episode also publishes a saturated sketch as its
	// region's replica (issue 27, item 5), which every region must still
	// answer. Plan never sets it: the forging region never takes its own
	// forged pages from its peers, so the regions' digests differ for the
	// rest of the run, and a later wipe, which waits for the regions to
	// converge, would wait in vain. Tests put it in Config.Schedule.
	Sketch bool `json:"sketch,omitempty"`
}

func (e Episode) String() string {
	what := e.describe()
	if e.Replica != "" {
		what = strings.Replace(what, " "+e.Region, " "+e.Replica, 1)
	}
	return fmt.Sprintf("#%d %s for %s", e.Index, what, e.Dur)
}

func (e Episode) describe() string {
	var what string
	switch e.Kind {
	case KindIsolate:
		what = "isolate " + e.Region
	case KindSplit:
		what = fmt.Sprintf("split %s | %s", strings.Join(e.Minority, ","), strings.Join(e.Majority, ","))
	case KindBridge:
		what = fmt.Sprintf("cut %s-%s", e.A, e.B)
	case KindLoss:
		what = fmt.Sprintf("drop %s->%s", e.A, e.B)
	case KindFlap:
		what = fmt.Sprintf("flap %s-%s (%d toggles)", e.A, e.B, len(e.Flaps))
	case KindKill:
		what = "kill -9 " + e.Region
		if e.Step != "" {
			what += " at the move's " + e.Step + " step"
		}
		if e.AfterAck {
			what += " right after it acknowledges an increment"
		}
	case KindWipe:
		what = "kill -9 and wipe " + e.Region
		if e.Step != "" {
			what += " at the move's " + e.Step + " step"
		}
	case KindNATS:
		what = "restart nats of " + e.Region
	case KindPause:
		what = "SIGSTOP " + e.Region
	case KindMove:
		what = fmt.Sprintf("move the shards of %s to %d copies", e.Region, e.Copies)
		if e.Drain != "" {
			what = fmt.Sprintf("move the shards of %s off %s (drain)", e.Region, e.Drain)
		}
	case KindClock:
		what = fmt.Sprintf("step the clock of %s by %s", e.Region, e.Offset)
	case KindForge:
		what = "forge deltas as " + e.Region
		if e.Sketch {
			what += ", a saturated sketch too"
		}
	default:
		what = e.Kind
	}
	return what
}

// linkFault reports whether the episode cuts region from region (for
// availability during partitions): every kind but kill, wipe, pause,
// clock and forge.
func (e Episode) linkFault() bool {
	return e.Kind != KindKill && e.Kind != KindWipe && e.Kind != KindPause && e.Kind != KindClock && e.Kind != KindForge && e.Kind != KindMove
}

// validate checks a hand-made episode (Config.Schedule) against regions
// of replicas replicas each.
func (e Episode) validate(regions []string, replicas int) error {
	if e.Replica != "" {
		if e.Kind != KindKill && e.Kind != KindWipe && e.Kind != KindPause {
			return fmt.Errorf("%s: only kill, wipe and pause hit one replica", e.Kind)
		}
		ok := false
		for n := 1; n <= max(replicas, 1); n++ {
			ok = ok || e.Replica == replicaName(e.Region, n)
		}
		if !ok {
			return fmt.Errorf("%s: region %q has no replica %q", e.Kind, e.Region, e.Replica)
		}
	}
	known := func(rs ...string) error {
		for _, r := range rs {
			if !slices.Contains(regions, r) {
				return fmt.Errorf("%s: unknown region %q", e.Kind, r)
			}
		}
		return nil
	}
	if e.Step != "" {
		switch {
		case e.Kind != KindKill && e.Kind != KindWipe:
			return fmt.Errorf("%s: only a kill or a wipe is aimed at a move's step", e.Kind)
		case !slices.Contains([]string{node.MoveJoin, node.MoveSwitch, node.MoveSettle, node.MoveDrop}, e.Step):
			return fmt.Errorf("%s: unknown move step %q", e.Kind, e.Step)
		}
	}
	if e.At < 0 || e.Dur <= 0 {
		return fmt.Errorf("%s: want at >= 0 and dur > 0 (got %s, %s)", e.Kind, e.At, e.Dur)
	}
	switch e.Kind {
	case KindIsolate, KindKill, KindWipe, KindNATS, KindPause, KindForge:
		return known(e.Region)
	case KindMove:
		switch {
		case replicas < 2:
			return errors.New("move: a sharded run moves shards (replicas 2 or more)")
		case (e.Copies > 0) == (e.Drain != ""):
			return errors.New("move: want copies or drain")
		case e.Drain != "" && !slices.Contains(replicaNames(e.Region, replicas), e.Drain):
			return fmt.Errorf("move: region %q has no replica %q to drain", e.Region, e.Drain)
		}
		return known(e.Region)
	case KindClock:
		if e.Offset == 0 {
			return errors.New("clock: want a non-zero offset")
		}
		return known(e.Region)
	case KindSplit:
		if len(e.Minority) == 0 || len(e.Majority) == 0 {
			return errors.New("split: want both sides")
		}
		return known(append(slices.Clone(e.Minority), e.Majority...)...)
	case KindBridge, KindLoss:
		if e.A == e.B {
			return fmt.Errorf("%s: a link joins two regions", e.Kind)
		}
		return known(e.A, e.B)
	case KindFlap:
		if e.A == e.B || len(e.Flaps) == 0 {
			return errors.New("flap: want two regions and some flaps")
		}
		return known(e.A, e.B)
	}
	return fmt.Errorf("unknown episode kind %q", e.Kind)
}

// kindWeights are the kinds of each fault class and how often each is
// drawn.
var kindWeights = []struct {
	class, kind string
	weight      int
}{
	{FaultPartition, KindIsolate, 3},
	{FaultPartition, KindSplit, 2},
	{FaultPartition, KindBridge, 2},
	{FaultLoss, KindLoss, 2},
	{FaultFlap, KindFlap, 2},
	{FaultKill, KindKill, 3},
	{FaultWipe, KindWipe, 1},
	{FaultNATS, KindNATS, 2},
	{FaultClock, KindClock, 2},
	{FaultMove, KindMove, 2},
	{FaultForge, KindForge, 2},
}

// Plan returns the fault schedule of cfg: a pure function of the seed, the
// regions, the fault classes and the duration. Episodes start after a
// 3 s warm-up, are separated by 1 to 3 s of calm, and are planned to end
// 2 s before Duration (kill and wipe budget extra time for the restart).
func Plan(cfg Config) []Episode {
	cfg = cfg.withDefaults()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed_fa17))
	type choice struct {
		kind   string
		weight int
	}
	var kinds []choice
	total := 0
	for _, kw := range kindWeights {
		if !cfg.has(kw.class) || kw.kind == KindSplit && len(cfg.Regions) < 4 {
			continue // with 3 regions a majority/minority split is an isolation
		}
		if kw.kind == KindMove && !cfg.sharded() {
			continue // "all" faults of an unsharded run: it has no shards to move
		}
		kinds = append(kinds, choice{kw.kind, kw.weight})
		total += kw.weight
	}
	if total == 0 {
		return nil
	}
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)).Round(10*time.Millisecond)
	}
	regions := cfg.Regions
	pick := func() string { return regions[rng.IntN(len(regions))] }
	// A sharded run's kill or wipe hits one replica; drawing it only
	// then keeps every unsharded seed's schedule as it was.
	pickReplica := func(region string) string {
		if !cfg.sharded() {
			return ""
		}
		return replicaName(region, 1+rng.IntN(cfg.Replicas))
	}
	pair := func() (string, string) {
		i := rng.IntN(len(regions))
		j := (i + 1 + rng.IntN(len(regions)-1)) % len(regions)
		return regions[i], regions[j]
	}
	var plan []Episode
	end := cfg.Duration - 2*time.Second
	for t := 3 * time.Second; ; {
		n := rng.IntN(total)
		var kind string
		for _, k := range kinds {
			if n < k.weight {
				kind = k.kind
				break
			}
			n -= k.weight
		}
		e := Episode{Index: len(plan) + 1, Kind: kind, At: t}
		budget := time.Duration(0) // time the episode takes beyond Dur
		switch kind {
		case KindIsolate:
			e.Region, e.Dur = pick(), between(2*time.Second, 6*time.Second)
		case KindSplit:
			perm := rng.Perm(len(regions))
			k := 1 + rng.IntN((len(regions)-1)/2) // minority: fewer than half
			for i, p := range perm {
				if i < k {
					e.Minority = append(e.Minority, regions[p])
				} else {
					e.Majority = append(e.Majority, regions[p])
				}
			}
			e.Dur = between(2*time.Second, 6*time.Second)
		case KindBridge:
			e.A, e.B = pair()
			e.Dur = between(2*time.Second, 6*time.Second)
		case KindLoss:
			e.A, e.B = pair()
			e.Dur = between(2*time.Second, 5*time.Second)
		case KindFlap:
			e.A, e.B = pair()
			e.Dur = between(2*time.Second, 5*time.Second)
			for sum := time.Duration(0); sum < e.Dur; {
				d := between(150*time.Millisecond, 700*time.Millisecond)
				e.Flaps = append(e.Flaps, d)
				sum += d
			}
		case KindKill:
			e.Region, e.Dur = pick(), between(500*time.Millisecond, 3*time.Second)
			e.Replica = pickReplica(e.Region)
			budget = 3 * time.Second // recovery before the region is ready
		case KindWipe:
			e.Region, e.Dur = pick(), between(500*time.Millisecond, 2*time.Second)
			e.Replica = pickReplica(e.Region)
			budget = 8 * time.Second // quiesce and converge, then recovery from peers
		case KindNATS:
			e.Region, e.Dur = pick(), between(500*time.Millisecond, 3*time.Second)
			budget = time.Second
		case KindClock:
			e.Region, e.Dur = pick(), between(2*time.Second, 5*time.Second)
			e.Offset = []time.Duration{30 * time.Second, -30 * time.Second, time.Hour}[rng.IntN(3)]
		case KindForge:
			e.Region, e.Dur = pick(), between(2*time.Second, 5*time.Second)
		case KindMove:
			// The move runs on behind the next episodes (moves.go).
			e.Region, e.Dur = pick(), between(2*time.Second, 4*time.Second)
			if rng.IntN(2) == 0 {
				e.Copies = min(cfg.Copies+1, cfg.Replicas)
			} else {
				e.Drain = pickReplica(e.Region)
			}
		}
		if t+e.Dur+budget > end {
			break
		}
		plan = append(plan, e)
		t += e.Dur + budget + between(time.Second, 3*time.Second)
	}
	return plan
}

package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Name names a failpoint; every valid one is in the table below (and the
// package comment's).
type Name string

// The failpoints. What each does is in the package comment's table.
const (
	GossipIncrements    Name = "gossip-increments"
	TrustRelays         Name = "trust-relays"
	TrustRetiredRelays  Name = "trust-retired-relays"
	AckBeforeCommit     Name = "ack-before-commit"
	NoReconcile         Name = "no-reconcile"
	ClockFollowsWall    Name = "clock-follows-wall"
	ListsLocalOnly      Name = "lists-local-only"
	KeysNotReconciled   Name = "keys-not-reconciled"
	LogSkipsIncrements  Name = "log-skips-increments"
	SlotsAtArrival      Name = "buckets-at-arrival" // the name keeps the old word for slots
	SketchStoredOnly    Name = "sketch-merge-stored-only"
	SpendWithoutRights  Name = "spend-without-rights"
	BlockNotReconciled  Name = "block-not-reconciled"
	ApproxCoinTwice     Name = "approx-coin-twice"
	GiveWhatIsAsked     Name = "give-what-is-asked"
	ClockFollowsPeers   Name = "clock-follows-peers"
	EstimateUnbounded   Name = "estimate-unbounded"
	AckUnheld           Name = "ack-unheld-writes"
	SplitTwoParts       Name = "split-user-two-parts"
	DropUnsynced        Name = "delete-before-sync"
	ToggleTwice         Name = "toggle-applies-twice"
	MergeIgnoresAt      Name = "merge-ignores-client-time"
	CashbackNoFloor     Name = "cashback-no-floor"
	ForwardAckUnapplied Name = "forwarded-ack-unapplied"
	FencesLose          Name = "fences-lose"
	PartDigestsKeysOnly Name = "part-digests-keys-only"
	DiffsWithoutRelays  Name = "diffs-without-relays"
	CrashBeforeClaim    Name = "crash-before-claim"
)

// cashbackSteps are the steps of a cross-shard cashback (purchase.Step's
// names) a crash can be aimed at: CashbackStep(step).
func cashbackSteps() []string {
	return []string{"journaled", "pool", "merchant", "fence", "call_off", "user", "done"}
}

// CashbackStep is the point at which a cross-shard cashback is about to
// take step (purchase.Step.String()).
func CashbackStep(step string) Name { return Name("cashback:" + step) }

// Bugs are the points TALLY_CHAOS_BUG may name: the deliberate bugs, one
// per negative control of the chaos suite.
func Bugs() []Name {
	return []Name{GossipIncrements, TrustRelays, TrustRetiredRelays, AckBeforeCommit, NoReconcile, ClockFollowsWall,
		ListsLocalOnly, KeysNotReconciled, LogSkipsIncrements, SlotsAtArrival, SketchStoredOnly, SpendWithoutRights,
		BlockNotReconciled, ApproxCoinTwice, GiveWhatIsAsked, ClockFollowsPeers, EstimateUnbounded, AckUnheld,
		SplitTwoParts, DropUnsynced, ToggleTwice, MergeIgnoresAt, CashbackNoFloor, ForwardAckUnapplied, FencesLose,
		PartDigestsKeysOnly, DiffsWithoutRelays}
}

// Known reports whether n is a failpoint: a bug, CrashBeforeClaim or a
// cashback step.
func Known(n Name) bool {
	if slices.Contains(Bugs(), n) || n == CrashBeforeClaim {
		return true
	}
	step, ok := strings.CutPrefix(string(n), "cashback:")
	return ok && slices.Contains(cashbackSteps(), step)
}

// The environment variables FromEnv reads.
const (
	// EnvBug names one bug (Bugs) to arm.
	EnvBug = "TALLY_CHAOS_BUG"
	// EnvCrashBeforeClaim, "1", arms CrashBeforeClaim.
	EnvCrashBeforeClaim = "TALLY_CHAOS_CRASH_BEFORE_CLAIM"
	// EnvFailpoint names one crash point to arm: "cashback:<step>".
	EnvFailpoint = "TALLY_FAILPOINT"
)

// Set is the set of armed failpoints. Its zero value and nil arm nothing;
// it is not changed after New, so any goroutine may read it.
type Set struct {
	armed map[Name]bool
}

// New arms names. A name that is no failpoint is refused, so that a typo
// cannot run a negative control without its bug. It builds the Set in any
// build; only a chaos build's On reports what it arms.
func New(names ...Name) (*Set, error) {
	s := &Set{armed: make(map[Name]bool, len(names))}
	for _, n := range names {
		if !Known(n) {
			return nil, fmt.Errorf("failpoint: no point %q", n)
		}
		s.armed[n] = true
	}
	return s, nil
}

// FromEnv arms what EnvBug, EnvCrashBeforeClaim and EnvFailpoint name,
// read through getenv (os.Getenv in tallyd; nil reads nothing). Outside
// a chaos build it reads nothing and returns nil: the variables mean
// nothing there.
func FromEnv(getenv func(string) string) (*Set, error) {
	if !enabled || getenv == nil {
		return nil, nil
	}
	var names []Name
	if bug := getenv(EnvBug); bug != "" {
		if !slices.Contains(Bugs(), Name(bug)) {
			return nil, fmt.Errorf("%s=%q: no such bug", EnvBug, bug)
		}
		names = append(names, Name(bug))
	}
	switch v := getenv(EnvCrashBeforeClaim); v {
	case "", "0":
	case "1":
		names = append(names, CrashBeforeClaim)
	default:
		return nil, fmt.Errorf("%s=%q: want 1 or nothing", EnvCrashBeforeClaim, v)
	}
	if fp := getenv(EnvFailpoint); fp != "" {
		if _, ok := strings.CutPrefix(fp, "cashback:"); !ok || !Known(Name(fp)) {
			return nil, fmt.Errorf("%s=%q: want cashback:<step>, a step of %s", EnvFailpoint, fp, strings.Join(cashbackSteps(), ", "))
		}
		names = append(names, Name(fp))
	}
	if len(names) == 0 {
		return nil, nil
	}
	return New(names...)
}

// Any reports whether s arms any point, in a chaos build.
func (s *Set) Any() bool { return enabled && s != nil && len(s.armed) > 0 }

// String lists the armed points, for logs.
func (s *Set) String() string {
	if s == nil {
		return ""
	}
	var out []string
	for n := range s.armed {
		out = append(out, string(n))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// Crash kills this process with SIGKILL, as kill -9 would, if n is on;
// it does not return then. Outside a chaos build it does nothing.
func (s *Set) Crash(n Name) {
	if !s.On(n) {
		return
	}
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // SIGKILL on Unix: nothing after this runs
	}
	select {} // the signal is on its way
}

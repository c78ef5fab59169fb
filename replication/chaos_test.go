package replication

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/internal/base/testkit"
)

// NetFaultsFromEnv reads TALLY_CHAOS_NET only in a chaos build, and
// refuses a malformed one there.
func TestNetFaultsFromEnv(t *testing.T) {
	env := map[string]string{EnvChaosNet: "drop=0.5,seed=9"}
	f, err := NetFaultsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Faults{}
	if buildtags.Chaos {
		want = Faults{Drop: 0.5, Seed: 9}
	}
	if f != want {
		t.Fatalf("chaos build %v: got %+v, want %+v", buildtags.Chaos, f, want)
	}
	env = map[string]string{EnvChaosNet: "drop=2"}
	f, err = NetFaultsFromEnv(func(k string) string { return env[k] })
	if buildtags.Chaos == (err == nil) {
		t.Fatalf("chaos build %v: malformed %s gave %+v, %v", buildtags.Chaos, EnvChaosNet, f, err)
	}
}

// The failpoint gossip-increments is the chaos suite's negative control:
// in a chaos build, duplicated deltas then count twice; in any other build
// it is ignored and they count once.
func TestGossipIncrementsBugOnlyInChaosBuild(t *testing.T) {
	s := newScenario(t)
	s.tweak = func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.GossipIncrements) }
	ctx := context.Background()
	s.names = []string{"us", "eu"}
	for _, name := range s.names {
		s.open(name)
	}
	s.clock.Advance(2 * scenarioHeartbeat)
	s.antiEntropy(ctx, []*scenarioNode{s.nodes["us"], s.nodes["eu"]})
	us, eu := s.nodes["us"], s.nodes["eu"]
	us.faults.SetFaults(Faults{Dup: 1})
	for range 3 {
		if _, err := us.replica.Counters().Incr(ctx, "views", 1, ""); err != nil {
			t.Fatal(err)
		}
		us.rep.flush(us.flusher)
		s.net.Deliver()
		// One merge per copy, as when they arrive apart (one batch would
		// read the same base for both).
		for len(eu.rep.inbox) > 0 {
			eu.rep.merge(ctx, []*Delta{<-eu.rep.inbox})
		}
	}
	rd, err := eu.replica.Counters().Get("views")
	if err != nil {
		t.Fatal(err)
	}
	want := int64(3)
	if buildtags.Chaos {
		want = 6 // each duplicated increment added twice
	}
	if rd.Value != want {
		t.Fatalf("chaos build %v: eu reads %d, want %d", buildtags.Chaos, rd.Value, want)
	}
}

// Config.NetFaults puts the replicator's publishes through a
// FaultyTransport in a chaos build, and is ignored in any other.
func TestChaosNetOnlyInChaosBuild(t *testing.T) {
	s := newScenario(t)
	s.tweak = func(c *Config) { c.NetFaults = Faults{Drop: 1} }
	s.names = []string{"us"}
	us := s.open("us")
	before := s.net.Pending() // its identity announcement (or not: dropped too)
	us.rep.flush(us.flusher)  // the first flush always sends a heartbeat
	want := 1
	if buildtags.Chaos {
		want = 0
	}
	if got := s.net.Pending() - before; got != want {
		t.Fatalf("chaos build %v: %d messages published with drop=1, want %d", buildtags.Chaos, got, want)
	}
}

// The failpoint trust-retired-relays is the chaos suite's control of issue 27,
// item 1: in a chaos build a live peer's word for a retired replica is
// taken on the fast path after recovery, as before the fix; in any other
// build it is ignored and the forgery is cut.
func TestTrustRetiredRelaysOnlyInChaosBuild(t *testing.T) {
	r := &Replicator{self: "us", peers: map[string]*peer{"eu": {id: "eu"}}, retired: map[string]bool{"old": true},
		cfg: Config{Failpoints: testkit.Armed(t, failpoint.TrustRetiredRelays)}, m: newMetrics(nil), log: hclog.NewNullLogger()}
	r.storePeerSet()
	r.recovered.Store(true)
	forged := &crdt.LikeRecord{Liked: true, HLC: 1000, Origin: "old", Contrib: crdt.Vector{}.Set("old", crdt.PN{P: 1000})}
	_, kept := r.vetRecord("eu", forged, fastPath)
	if kept != buildtags.Chaos {
		t.Errorf("chaos build %t: a relay of the retired replica's state kept %t", buildtags.Chaos, kept)
	}
	if !r.vetEntry("eu", "eu") || r.vetEntry("eu", "ap") {
		t.Error("the bug changed what live peers may say")
	}
}

// The failpoint part-digests-keys-only is the chaos suite's control of
// repair by parts: in a chaos build a part digested by its keys alone
// compares equal when eu holds an older value of us's counter entry, and
// repair leaves it stale; in any other build the part differs and eu
// pulls the newer value. A key eu lacks is pulled in both builds.
func TestPartDigestsKeysOnlyBugOnlyInChaosBuild(t *testing.T) {
	ctx := context.Background()
	s := newScenario(t)
	s.tweak = func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.PartDigestsKeysOnly) }
	s.names = []string{"us", "eu"}
	for _, name := range s.names {
		s.open(name)
	}
	us, eu := s.nodes["us"], s.nodes["eu"]
	s.clock.Advance(2 * scenarioHeartbeat)
	for _, n := range []*scenarioNode{us, eu} {
		n.steps.Flush()
	}
	s.net.Deliver()
	s.antiEntropy(ctx, []*scenarioNode{us, eu})
	s.antiEntropy(ctx, []*scenarioNode{us, eu})
	if !us.rep.Recovered() || !eu.rep.Recovered() {
		t.Fatal("the replicas did not recover")
	}
	// Increments on us, never published: only repair brings them to eu.
	repair := func() int64 {
		t.Helper()
		if _, err := us.replica.Counters().Incr(ctx, "views", 1, ""); err != nil {
			t.Fatal(err)
		}
		// Past the interval in which us's last heartbeat root, equal
		// to eu's, would skip the comparison.
		s.clock.Advance(2 * time.Second)
		if left := eu.rep.exchange(ctx, eu.rep.peers["us"]); left {
			t.Fatal("segments left for a later round")
		}
		rd, err := eu.replica.Counters().Get("views")
		if err != nil {
			t.Fatal(err)
		}
		return rd.Value
	}
	if got := repair(); got != 1 {
		t.Fatalf("chaos build %t: eu reads %d after repairing a key it lacked, want 1", buildtags.Chaos, got)
	}
	want := int64(2)
	if buildtags.Chaos {
		want = 1 // the part compared equal: the entry stays stale
	}
	if got := repair(); got != want {
		t.Fatalf("chaos build %t: eu reads %d after repairing a key it held an older value of, want %d", buildtags.Chaos, got, want)
	}
	if equal := eu.store.Root() == us.store.Root(); equal == buildtags.Chaos {
		t.Fatalf("chaos build %t: roots equal %t after the repair", buildtags.Chaos, equal)
	}
}

// The bug diffs-without-relays leaves out of a diff page for its asker
// the state of replicas that left the shard: in a chaos build, a replica
// joining the shards another left never gets that replica's entries from
// the holders (joinAfterLeave); otherwise it gets them from the first.
func TestDiffsWithoutRelaysOnlyInChaosBuild(t *testing.T) {
	j := joinAfterLeave(t, func(c *Config) { c.Failpoints = testkit.Armed(t, failpoint.DiffsWithoutRelays) })
	j.d.rep.exchange(context.Background(), j.d.rep.peers["a"])
	lacks := len(missing(t, j.d, j.s.nodes["c"])) // c's own entries, and b's
	want := j.wrote["b"]
	if buildtags.Chaos {
		want += j.wrote["c"]
	}
	if lacks != want {
		t.Fatalf("chaos build %t: d lacks %d of c's entries after pulling from a, want %d", buildtags.Chaos, lacks, want)
	}
}

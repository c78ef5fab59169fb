package replication

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tally-dev/tally/shard"
)

// A replica leaving shards may drop them once every peer keeping them
// has compared equal with it since the move began (ShardSync's equal):
// only then may it stop serving its own entries of them, which no other
// replica may relay. A peer that restarts, perhaps wiped, voids what
// compared equal with it before: the sharded chaos run with milestones on
// had eu-2 drop its shards on the word of comparisons with ap-1 made just
// before ap-1 was wiped, and ap-1 never got eu-2's entries back.
func TestARestartedPeerVoidsEarlierComparisons(t *testing.T) {
	s := newScenario(t)
	ctx := context.Background()
	s.names = []string{"us", "eu"}
	for _, name := range s.names {
		s.open(name)
	}
	us := s.nodes["us"]
	step := func() {
		s.clock.Advance(2 * scenarioHeartbeat)
		for _, n := range s.nodes {
			n.rep.flush(n.flusher)
		}
		s.net.Deliver()
		s.antiEntropy(ctx, []*scenarioNode{s.nodes["us"], s.nodes["eu"]})
	}
	step()
	step()
	since := s.clock.Now()
	step()
	all := shard.All()
	if _, equal := us.rep.ShardSync(all, since); !equal {
		t.Fatal("us and eu did not compare equal after a round")
	}

	// eu is wiped and starts again: a new incarnation, heard by its
	// first heartbeat.
	s.nodes["eu"].close()
	if err := os.RemoveAll(filepath.Join(s.dir, "eu")); err != nil {
		t.Fatal(err)
	}
	eu := s.open("eu")
	s.clock.Advance(scenarioHeartbeat)
	eu.rep.flush(eu.flusher)
	s.net.Deliver()
	if _, equal := us.rep.ShardSync(all, since); equal {
		t.Fatal("eu restarted on an empty store and us still counts it equal by a comparison made before")
	}
}

package replication

import (
	"testing"

	"github.com/tally-dev/tally/internal/buildtags"
)

func TestChaosFromEnv(t *testing.T) {
	env := map[string]string{EnvChaosNet: "drop=0.5,seed=9", EnvChaosBug: BugGossipIncrements}
	c, err := ChaosFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := Chaos{}
	if buildtags.Chaos {
		want = Chaos{Net: Faults{Drop: 0.5, Seed: 9}, GossipIncrements: true}
	}
	if c != want {
		t.Fatalf("chaos build %v: got %+v, want %+v", buildtags.Chaos, c, want)
	}

	env = map[string]string{EnvChaosNet: "drop=2", EnvChaosBug: "no-reconcile"}
	c, err = ChaosFromEnv(func(k string) string { return env[k] })
	if buildtags.Chaos == (err == nil) {
		t.Fatalf("chaos build %v: malformed %s gave %+v, %v", buildtags.Chaos, EnvChaosNet, c, err)
	}
	if c.GossipIncrements {
		t.Fatal("another package's bug switched on gossip-increments")
	}
}

package deploy_test

import (
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/node"
)

func TestValidateReportsEveryProblem(t *testing.T) {
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Port = nil, -1
	err := cfg.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{"at least one region", "data dir", "port -1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
	cfg = deploy.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Node = func(c *node.Config) { c.LeaseReclaimAfter = "1s" }
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "replica us-1") || !strings.Contains(err.Error(), "lease_reclaim_after") {
		t.Fatalf("a bad replica setting: %v", err)
	}
}

func TestNodeConfigs(t *testing.T) {
	cfg := deploy.DefaultConfig()
	cfg.DataDir = "/d"
	cfg.Node = func(c *node.Config) { c.FlushInterval = "5ms" }
	cfgs, err := cfg.NodeConfigs(func(r string) string { return "nats://" + r })
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cfgs {
		r := cfg.Regions[i]
		if c.Replica != r+"-1" || c.NATS != "nats://"+r || c.Listen != "127.0.0.1:0" || c.FlushInterval != "5ms" ||
			c.Milestones != "10^k" || c.AllocCluster != "us" || len(c.Peers) != 2 {
			t.Errorf("%s: %+v", r, c)
		}
		for _, p := range c.Peers {
			if p == c.Replica {
				t.Errorf("%s lists itself as a peer", r)
			}
		}
	}
}

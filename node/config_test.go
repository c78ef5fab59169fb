package node

import (
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/alloc"
)

func validConfig() Config {
	c := DefaultConfig()
	c.Derive()
	return c
}

func TestDefaultsAreValidAndDerive(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Replica != "local-1" || c.DataDir == "" || c.LeaseReclaimAfter != "0" {
		t.Fatalf("%+v", c)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.Region, c.Listen, c.Durability, c.AllocReplicas = "a/b", "nohost", "fast", 2
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, w := range []string{`region "a/b"`, `listen "nohost"`, `durability "fast"`, "alloc_replicas 2"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
}

// lease_reclaim_after is off by default, must exceed lease_ttl when set
// (as alloc.Config.Validate demands), and reaches the holder's config.
func TestLeaseReclaimAfter(t *testing.T) {
	kv := alloc.NewLazyBucket(nil, alloc.BucketConfig{Name: "b"})
	for _, tc := range []struct {
		ttl, reclaim string
		ok           bool
		want         time.Duration
	}{
		{"4s", "0", true, 0},
		{"4s", "10m", true, 10 * time.Minute},
		{"4s", "4s", false, 0},
		{"4s", "3s", false, 0},
		{"4s", "-1s", false, 0},
		{"4s", "soon", false, 0},
		{"1s", "2s", true, 2 * time.Second},
	} {
		c := validConfig()
		c.LeaseTTL, c.LeaseReclaimAfter = tc.ttl, tc.reclaim
		err := c.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("ttl %s reclaim %s: err %v, want ok=%v", tc.ttl, tc.reclaim, err, tc.ok)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "lease_reclaim_after") {
				t.Errorf("error %q does not name lease_reclaim_after", err)
			}
			continue
		}
		acfg := allocConfig(c, kv, nil)
		if acfg.ReclaimAfter != tc.want || acfg.TTL != duration(tc.ttl) {
			t.Errorf("ttl %s reclaim %s: alloc config has ttl %v reclaim %v", tc.ttl, tc.reclaim, acfg.TTL, acfg.ReclaimAfter)
		}
		if _, err := alloc.New(acfg); err != nil {
			t.Errorf("ttl %s reclaim %s: the holder refuses what Validate accepted: %v", tc.ttl, tc.reclaim, err)
		}
	}
}

// A replicating replica must be given its id: a shared default would let
// two hosts run as one replica.
func TestReplicaRequiredWithNATS(t *testing.T) {
	c := DefaultConfig()
	c.NATS = "nats://127.0.0.1:4222"
	c.Derive()
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "replica is required when nats is set") {
		t.Fatalf("Validate() = %v, want the replica to be required", err)
	}
	c.Replica = "local-7"
	c.Derive()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

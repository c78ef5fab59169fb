package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/shard"
)

// startJetStream runs an embedded NATS server with JetStream and no
// users.
func startJetStream(t *testing.T) *server.Server { return testkit.StartNATS(t, true) }

// shardedConfig is us-1 of a deployment of regions us and eu, two
// replicas each, one copy of each shard.
func shardedConfig(t *testing.T, natsURL string) Config {
	c := DefaultConfig()
	c.Region, c.Replica, c.DataDir, c.Listen = "us", "us-1", t.TempDir(), "127.0.0.1:0"
	c.NATS = natsURL
	c.Peers = []string{"us-2", "eu-1", "eu-2"}
	c.Shards = &ShardsConfig{Copies: 1, Regions: []ShardRegion{
		{Name: "us", Replicas: []string{"us-1", "us-2"}},
		{Name: "eu", Replicas: []string{"eu-1", "eu-2"}},
	}}
	c.Derive()
	return c
}

// getShardMap reads GET /v1/shards of n.
func getShardMap(t *testing.T, n *Node) shard.Map {
	t.Helper()
	resp, err := http.Get("http://" + n.Addr().String() + "/v1/shards")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m, err := shard.Decode(b)
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /v1/shards: %d %s: %v", resp.StatusCode, b, err)
	}
	return m
}

func mapOf(ms shard.Maps, region string) shard.Map {
	for _, m := range ms {
		if m.Region == region {
			return m
		}
	}
	return shard.Map{}
}

// Without the shard map bucket a replica runs from its config's maps;
// once the operator stores maps, they reach the replica's view while it
// runs, its own region's too (it serves by it at once), a restart keeps
// the stored map, and a stored map of its region that does not list it
// stops it from starting.
func TestShardMapsFollowTheBucket(t *testing.T) {
	s := startJetStream(t)
	cfg := shardedConfig(t, s.ClientURL())
	configUS, _ := cfg.Shards.Map("us")
	configEU, _ := cfg.Shards.Map("eu")

	n, err := Start(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if m := getShardMap(t, n); !m.Equal(configUS) || m.Revision != 0 {
		t.Fatalf("without the bucket /v1/shards answers revision %d, equal to the config's map: %v", m.Revision, m.Equal(configUS))
	}
	if eu := mapOf(n.ShardMaps(), "eu"); !eu.Equal(configEU) {
		t.Fatal("without the bucket the view of eu is not the config's map")
	}

	// The operator stores both regions' maps, each shard on both replicas.
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := OpenShardMaps(ctx, js, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	assign := func(region string, replicas []string, copies int) shard.Map {
		t.Helper()
		m, err := shard.Assign(region, replicas, copies)
		if err != nil {
			t.Fatal(err)
		}
		stored, wrote, err := SeedShardMap(ctx, kv, m)
		if err != nil || !wrote || stored.Revision == 0 {
			t.Fatalf("assign %s: revision %d, wrote %v, %v", region, stored.Revision, wrote, err)
		}
		return stored
	}
	eu2 := assign("eu", []string{"eu-1", "eu-2"}, 2)
	us2 := assign("us", []string{"us-1", "us-2"}, 2)

	// Seeding the same map again writes nothing; seeding another one is
	// refused and leaves the stored map (only a move changes it); a write
	// at a stale revision, or a create over a stored map, is refused.
	if again, wrote, err := SeedShardMap(ctx, kv, eu2); err != nil || wrote || again.Revision != eu2.Revision {
		t.Fatalf("seeding eu's map again: revision %d (want %d), wrote %v, %v", again.Revision, eu2.Revision, wrote, err)
	}
	eu3m, err := shard.Assign("eu", []string{"eu-1", "eu-2", "eu-3"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if kept, wrote, err := SeedShardMap(ctx, kv, eu3m); !errors.Is(err, ErrShardMapDiffers) || wrote || kept.Revision != eu2.Revision || !kept.Equal(eu2) {
		t.Fatalf("seeding another map of eu: revision %d (want %d kept), wrote %v, %v", kept.Revision, eu2.Revision, wrote, err)
	}
	eu3, err := PutShardMap(ctx, kv, eu3m, eu2.Revision) // what a move's steps write
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PutShardMap(ctx, kv, eu2, eu2.Revision); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("write at stale revision %d (now %d): %v, want refused", eu2.Revision, eu3.Revision, err)
	}
	if _, err := PutShardMap(ctx, kv, eu2, 0); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("create over a stored map: %v, want refused", err)
	}

	// The running replica follows eu's map (the bucket appeared after it
	// started: it opens it again), and its own region's too (a move,
	// shard/move.go): it serves by it at once.
	testkit.WaitFor(t, 30*time.Second, func() error {
		if eu := mapOf(n.ShardMaps(), "eu"); !eu.Equal(eu3) || eu.Revision != eu3.Revision {
			return fmt.Errorf("view of eu at revision %d, want %d", eu.Revision, eu3.Revision)
		}
		if us := mapOf(n.ShardMaps(), "us"); !us.Equal(us2) || us.Revision != us2.Revision {
			return fmt.Errorf("view of us at revision %d, want %d", us.Revision, us2.Revision)
		}
		if m := getShardMap(t, n); m.Revision != us2.Revision {
			return fmt.Errorf("/v1/shards answers revision %d, want %d", m.Revision, us2.Revision)
		}
		return nil
	})
	for s := range shard.Count {
		if !n.shards.Holds(s) {
			t.Fatalf("a running replica did not take its own region's new map: it does not serve shard %d", s)
		}
	}
	eu3Held := eu3.Held("eu-3")
	for s := range shard.Count {
		if n.ShardMaps().Holds("eu-3", s) != eu3Held.Has(s) {
			t.Fatalf("view: eu-3 holds shard %d: %v, the stored map says otherwise", s, n.ShardMaps().Holds("eu-3", s))
		}
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Restarted, it serves by the stored map of its region.
	n = startT(t, cfg)
	if m := getShardMap(t, n); !m.Equal(us2) || m.Revision != us2.Revision {
		t.Fatalf("after a restart /v1/shards answers revision %d, want the stored map at %d", m.Revision, us2.Revision)
	}
	for s := range shard.Count {
		if !n.shards.Holds(s) {
			t.Fatalf("us-1 does not hold shard %d: the stored map gives it every shard", s)
		}
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A stored map of its region without it: the replica does not start.
	cur := mapOf(n.ShardMaps(), "us")
	without, err := shard.Assign("us", []string{"us-2", "us-3"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PutShardMap(ctx, kv, without, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if n, err := Start(context.Background(), cfg, Options{}); err == nil {
		_ = n.Close(context.Background())
		t.Fatal("us-1 started although its region's stored map does not list it")
	} else if !strings.Contains(err.Error(), "does not list this replica us-1") {
		t.Fatalf("start: %v", err)
	}
}

// Region ids may hold characters a KV key may not; their keys differ.
func TestShardMapKey(t *testing.T) {
	seen := map[string]string{}
	for _, r := range []string{"us", "us.east", "us:east", "us@east", "us_east", "us-east", "us=2Eeast"} {
		k := ShardMapKey(r)
		for _, c := range k {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=", c) {
				t.Errorf("key of %q = %q: %q is not a key character of one token", r, k, c)
			}
		}
		if other, ok := seen[k]; ok {
			t.Errorf("regions %q and %q share key %q", r, other, k)
		}
		seen[k] = r
	}
}

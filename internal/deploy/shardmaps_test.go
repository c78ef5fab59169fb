package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/internal/natsperm"
	"github.com/tally-dev/tally/node"
	"github.com/tally-dev/tally/shard"
)

// A sharded local deployment stores its regions' shard maps in the
// tally_shards bucket before its replicas start, and every replica
// serves by its region's stored map (GET /v1/shards says its revision).
// The operator assigns a new map by compare-and-swap (a stale revision is
// refused); every replica follows it at once, and a restart keeps it. A
// replica's NATS user cannot write the bucket.
func TestShardMapsLiveInKV(t *testing.T) {
	startsSmallRegions(t, "starts four replicas")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us", "eu"}, 2, 1, ""
	d := startConfig(t, cfg)
	urls, cfgs := d.URLs(), d.Configs() // us-1 us-2 eu-1 eu-2
	for _, u := range urls {
		testkit.WaitFor(t, 60*time.Second, func() error {
			if st, _, err := testkit.DoJSON("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}

	nc, err := nats.Connect(d.Cluster().ClientURL("eu"),
		nats.UserInfo(natsperm.AdminUser, d.NATSPassword(natsperm.AdminUser)))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, node.ShardsBucket)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := node.ReadShardMaps(ctx, kv)
	if err != nil || len(stored) != 2 {
		t.Fatalf("stored maps: %d, %v; want us and eu", len(stored), err)
	}
	byRegion := map[string]shard.Map{}
	for _, m := range stored {
		byRegion[m.Region] = m
	}
	for i, u := range urls {
		want := byRegion[cfgs[i].Region]
		if m := getShards(t, u); !m.Equal(want) || m.Revision != want.Revision || m.Revision == 0 {
			t.Fatalf("%s answers its region's map at revision %d (equal %v), want the stored one at %d",
				cfgs[i].Replica, m.Revision, m.Equal(want), want.Revision)
		}
	}

	// The operator gives every eu shard to both eu replicas.
	euAll, err := shard.Assign("eu", []string{"eu-1", "eu-2"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	euOld := byRegion["eu"]
	if _, err := node.PutShardMap(ctx, kv, euAll, euOld.Revision+1); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("a write at a revision that is not the stored one: %v, want refused", err)
	}
	// Seeding (what a start and `tallyd admin shards assign` do) leaves a
	// stored map alone: only a move changes it.
	if kept, wrote, err := node.SeedShardMap(ctx, kv, euAll); !errors.Is(err, node.ErrShardMapDiffers) || wrote || kept.Revision != euOld.Revision {
		t.Fatalf("seed eu over its stored map: revision %d (want %d kept), wrote %v, %v", kept.Revision, euOld.Revision, wrote, err)
	}
	euNew, err := node.PutShardMap(ctx, kv, euAll, euOld.Revision) // one step of a move, written by hand
	if err != nil || euNew.Revision <= euOld.Revision {
		t.Fatalf("write eu: revision %d after %d, %v", euNew.Revision, euOld.Revision, err)
	}
	if _, err := node.PutShardMap(ctx, kv, euOld, euOld.Revision); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("a write at the stale revision %d: %v, want refused", euOld.Revision, err)
	}

	// Every replica follows at once: us's replication compares eu's
	// shards with the new holders, and eu's replicas serve by it (a
	// one-step assignment; a serving region moves with shards move).
	for i, n := range d.Nodes() {
		testkit.WaitFor(t, 30*time.Second, func() error {
			for _, m := range n.ShardMaps() {
				if m.Region == "eu" && m.Equal(euAll) && m.Revision == euNew.Revision {
					return nil
				}
			}
			return fmt.Errorf("%s does not see eu's map at revision %d", cfgs[i].Replica, euNew.Revision)
		})
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		if m := getShards(t, urls[2]); m.Revision != euNew.Revision || !m.Equal(euAll) {
			return fmt.Errorf("eu-1 serves by revision %d, want %d", m.Revision, euNew.Revision)
		}
		return nil
	})
	// A restart keeps the stored map.
	setUp := func(id string, up bool, want string) {
		t.Helper()
		if _, err := d.SetReplicaUp(id, up); err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 60*time.Second, func() error {
			for _, st := range d.ReplicaStates() {
				if st.Replica == id && st.State != want {
					return fmt.Errorf("%s is %s, want %s", id, st.State, want)
				}
			}
			return nil
		})
	}
	setUp("eu-1", false, "down")
	setUp("eu-1", true, "up")
	if m := getShards(t, urls[2]); m.Revision != euNew.Revision || !m.Equal(euAll) {
		t.Fatalf("eu-1 serves by revision %d after a restart, want %d", m.Revision, euNew.Revision)
	}

	// A replica's user may read the bucket, not write, purge or delete it.
	violations := make(chan error, 16)
	rnc, err := nats.Connect(d.Cluster().ClientURL("us"),
		nats.UserInfo(natsperm.ReplicaUser("us-1"), d.NATSPassword(natsperm.ReplicaUser("us-1"))),
		nats.CustomInboxPrefix("_INBOX_us-1"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer rnc.Close()
	for _, subject := range []string{"$KV." + node.ShardsBucket + "." + node.ShardMapKey("us"),
		"$JS.API.STREAM.PURGE.KV_" + node.ShardsBucket, "$JS.API.STREAM.DELETE.KV_" + node.ShardsBucket,
		"$JS.API.STREAM.UPDATE.KV_" + node.ShardsBucket} {
		if err := rnc.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-violations:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Errorf("us-1's user publishing on %s: %v", subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("us-1's user published on %s", subject)
		}
	}
	if m, err := node.ReadShardMaps(ctx, mustKV(t, rnc)); err != nil || len(m) != 2 {
		t.Fatalf("us-1's user reads %d maps: %v", len(m), err)
	}
}

func mustKV(t *testing.T, nc *nats.Conn) jetstream.KeyValue {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), node.ShardsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/testkit"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// A region of three replicas with two copies of each shard, and a region
// of one: every like is written at one holder of its item's shard, the
// fast path loses half its messages, and still every holder in both
// regions reads every count exactly, while a replica keeps nothing of the
// shards it does not hold.
func TestShardedRegionConvergesOnHoldersOnly(t *testing.T) {
	s := startNATS(t)
	us := []string{"us-1", "us-2", "us-3"}
	usMap, err := shard.Assign("us", us, 2)
	if err != nil {
		t.Fatal(err)
	}
	view := shard.Maps{usMap, shard.Single("eu", "eu-1")}
	ids := append(append([]string(nil), us...), "eu-1")
	nodes := map[string]*node{}
	for _, id := range ids {
		reg := "us"
		if id == "eu-1" {
			reg = "eu"
		}
		nodes[id] = startNode(t, s.ClientURL(), reg, id, filepath.Join(t.TempDir(), id), ids,
			func(c *Config) { c.Shards = view })
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close()
		}
	})
	for _, n := range nodes {
		waitAccepting(t, n)
		n.faults.SetFaults(Faults{Drop: 0.5, Seed: 3})
	}

	ctx := context.Background()
	rng := rand.New(rand.NewPCG(4, 4))
	const items = 40
	want := map[string]int64{}
	liked := map[[2]string]bool{} // a user liking twice, at two replicas, counts once
	for i := range 400 {
		item, user := fmt.Sprintf("item%d", rng.IntN(items)), fmt.Sprintf("user%d", i%150)
		holders := append(usMap.Holders(shard.Of(item)), "eu-1")
		n := nodes[holders[rng.IntN(len(holders))]]
		if _, err := n.replica.Like(ctx, item, user); err != nil {
			t.Fatal(err)
		}
		if !liked[[2]string{item, user}] {
			liked[[2]string{item, user}] = true
			want[item]++
		}
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for item, w := range want {
			for _, id := range append(usMap.Holders(shard.Of(item)), "eu-1") {
				rd, err := nodes[id].replica.Likes(item)
				if err != nil {
					return err
				}
				if rd.Value != w || rd.Unreconciled != 0 {
					return fmt.Errorf("%s reads %s = %d (unreconciled %d), want %d", id, item, rd.Value, rd.Unreconciled, w)
				}
			}
		}
		return nil
	})
	for _, id := range us {
		held := usMap.Held(id)
		d := nodes[id].store.Digests()
		kept := 0
		for seg, x := range d {
			if x == 0 {
				continue
			}
			if !held.Has(storage.SegmentShard(seg)) {
				t.Errorf("%s keeps entries in segment %d of shard %d, which it does not hold", id, seg, storage.SegmentShard(seg))
			}
			kept++
		}
		if kept == 0 {
			t.Errorf("%s keeps nothing", id)
		}
	}
}

package deploy_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/httpapi"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/shard"
)

// Shards move while likes flow at random replicas of both regions: us
// goes from two copies to three (every replica syncs the shards it
// joins before serving them), then us-2 is drained (its shards served
// only by us-1 and us-3, kept by us-2 as passive copies until they
// compare equal with every holder, then dropped when the map settles).
// Every like acknowledged during the moves is counted exactly, once, at
// every replica of both regions, and the drained us-2 still takes likes
// by forwarding them.
func TestShardMovesWhileServing(t *testing.T) {
	startsShardedRegions(t, "starts six replicas")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us", "eu"}, 3, 2, ""
	d := startConfig(t, withMoveRequestTimeout(cfg))
	urls, cfgs := d.URLs(), d.Configs() // us-1 us-2 us-3 eu-1 eu-2 eu-3
	waitReady(t, urls)
	reps := []string{"us-1", "us-2", "us-3"}

	load := startLikeLoad(t, urls, 30, 7)
	move := func(target shard.Map) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		res, err := d.MoveShards(ctx, target, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("moved %d shard copies: synced in %s, released in %s", res.Moved, res.Synced, res.Released)
	}
	time.Sleep(time.Second) // likes in flight before the first move
	three, err := shard.Assign("us", reps, 3)
	if err != nil {
		t.Fatal(err)
	}
	move(three)
	for _, h := range getShards(t, urls[0]).API().Replicas {
		if h.Count != shard.Count {
			t.Fatalf("after the move to three copies %s serves %d shards", h.Replica, h.Count)
		}
	}
	// The drain through the local deployment's admin route, as an
	// operator of `tallyd local` would.
	admin, err := client.New(client.Config{BaseURL: urls[2]})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mv, err := admin.MoveShards(ctx, "us", 2, []string{"us-2"})
	if err != nil || mv.State != "moving" {
		t.Fatalf("PUT /v1/admin/shards/us: %+v %v", mv, err)
	}
	if _, err := admin.MoveShards(ctx, "us", 2, []string{"us-2"}); client.Code(err) != "moving" {
		t.Fatalf("a second move while the first runs: %v, want 409 moving", err)
	}
	testkit.WaitFor(t, 90*time.Second, func() error {
		m, err := admin.Shards(ctx)
		if err != nil {
			return err
		}
		for _, h := range m.Replicas {
			switch {
			case len(h.Joining) > 0:
				return fmt.Errorf("%s still joining %v", h.Replica, h.Joining)
			case h.Replica == "us-2" && (h.Count != 1 || len(h.Leaving) > 0):
				return fmt.Errorf("us-2 serves %d shards, still keeps %v it left (released %v)", h.Count, h.Leaving, h.Released)
			}
		}
		return nil
	})
	liked, total, resent := load.finish()

	m := getShards(t, urls[0])
	if held, left := m.Held("us-2"), m.Leaving("us-2"); held.Len() != 1 || !held.Has(shard.Global) || left.Len() != 0 {
		t.Fatalf("drained us-2 serves %d shards and keeps %d it left, after the map settled", held.Len(), left.Len())
	}
	// us-2 takes a like by forwarding it to a holder.
	req, _ := http.NewRequest("PUT", urls[1]+"/v1/likes/post1/after-drain", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if by := resp.Header.Get(httpapi.ServedByHeader); resp.StatusCode != 200 || (by != "us-1" && by != "us-3") {
		t.Fatalf("a like at the drained us-2: %d, served by %q", resp.StatusCode, by)
	}
	liked["post1"]["after-drain"] = true
	total++
	t.Logf("%d likes acknowledged during the moves, %d sent again after no answer or a refusal", total, resent)
	if total < 100 {
		t.Fatalf("only %d likes acknowledged", total)
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		for i, u := range urls {
			for item, users := range liked {
				_, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item, "")
				if err != nil {
					return err
				}
				if b["count"] != float64(len(users)) || b["approx"] != false {
					return fmt.Errorf("%s: %s = %v, want %d", cfgs[i].Replica, item, b, len(users))
				}
			}
		}
		return nil
	})
}

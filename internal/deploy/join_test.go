package deploy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/deploy"
	"github.com/tally-dev/tally/shard"
)

// A region grows and shrinks while likes flow at random replicas of both
// regions: a fourth replica joins us through the local deployment's admin
// route (its shards spread to it in bounded steps, each synced before it
// serves), then us-1 is drained (its shards move away, the rights of a
// budget granted there to a holder) and stopped. Every like acknowledged
// is counted exactly, once, at every running replica of both regions, the
// new one included, and the region spends the whole budget without us-1.
func TestReplicaJoinsAndDrainsWhileServing(t *testing.T) {
	startsShardedRegions(t, "starts seven replicas")
	cfg := deploy.DefaultConfig()
	cfg.Regions, cfg.Replicas, cfg.Copies, cfg.Milestones = []string{"us", "eu"}, 3, 2, ""
	// Fixed ports, as tallyd local's --port and --resp-port: the replica
	// that joins takes the next ones after the six.
	cfg.Port, cfg.RESP = consecutiveFreePorts(t, 7), true
	for cfg.RESPPort == 0 || (cfg.RESPPort < cfg.Port+7 && cfg.Port < cfg.RESPPort+7) {
		cfg.RESPPort = consecutiveFreePorts(t, 7)
	}
	d := startConfig(t, withMoveRequestTimeout(cfg))
	waitReady(t, d.URLs())

	load := startLikeLoad(t, d.URLs(), 30, 11) // the new replica joins the targets, the drained one leaves
	ctx := context.Background()
	admin, err := client.New(client.Config{BaseURL: d.URLs()[0]})
	if err != nil {
		t.Fatal(err)
	}
	// done waits until region us serves by a settled map (nobody joining
	// or keeping shards it left: those are dropped) and check holds for
	// every replica.
	done := func(check func(api.ShardHolding) error) {
		t.Helper()
		testkit.WaitFor(t, 120*time.Second, func() error {
			m, err := admin.Shards(ctx)
			if err != nil {
				return err
			}
			if len(m.Replicas) != 4 {
				return fmt.Errorf("%d replicas in the map of us", len(m.Replicas))
			}
			for _, h := range m.Replicas {
				if len(h.Joining) > 0 {
					return fmt.Errorf("%s still joining %d ranges", h.Replica, len(h.Joining))
				}
				if len(h.Leaving) > 0 {
					return fmt.Errorf("%s still keeps %d ranges it left", h.Replica, len(h.Leaving))
				}
				if err := check(h); err != nil {
					return err
				}
			}
			return nil
		})
	}
	time.Sleep(time.Second) // likes in flight before the region grows

	mv, err := admin.AddReplica(ctx, "us", 300) // two steps: some 510 shard copies move
	if err != nil || mv.Added != "us-4" || mv.State != "moving" {
		t.Fatalf("PUT /v1/admin/shards/us {add:1}: %+v %v", mv, err)
	}
	if _, err := admin.AddReplica(ctx, "us", 0); client.Code(err) != "moving" {
		t.Fatalf("a second join while the first moves: %v, want 409 moving", err)
	}
	done(func(h api.ShardHolding) error {
		if h.Count < 400 { // 1023 keyed shards, 2 copies each, over 4
			return fmt.Errorf("%s serves %d shards", h.Replica, h.Count)
		}
		return nil
	})
	m := getShards(t, d.URLs()[0])
	if !slices.Contains(m.Replicas(), "us-4") {
		t.Fatalf("the map of us lists %v", m.Replicas())
	}
	urls, cfgs := d.URLs(), d.Configs()
	if cfgs[len(cfgs)-1].Replica != "us-4" {
		t.Fatalf("the deployment's last replica is %s", cfgs[len(cfgs)-1].Replica)
	}
	// us-4 listens on the ports after the deployment's six, not on
	// random ones.
	resps := d.RESPAddrs()
	if want := fmt.Sprintf("http://127.0.0.1:%d", cfg.Port+6); urls[6] != want {
		t.Errorf("us-4 listens at %s, want %s, the next port after --port's six", urls[6], want)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", cfg.RESPPort+6); len(resps) != 7 || resps[6] != want {
		t.Errorf("us-4's RESP addresses %v, want %s last, the next port after --resp-port's six", resps, want)
	}
	load.setTargets(urls)
	held := m.Held("us-4")
	t.Logf("us-4 joined: it serves %d shards", held.Len())

	// A budget on a shard us-1 serves, granted there: us-1 holds its
	// rights, which must not stay with it when it is drained.
	budget, held1 := "", m.Held("us-1")
	for i := 0; budget == ""; i++ {
		if k := fmt.Sprintf("bud:%d", i); held1.Has(shard.Of(k)) {
			budget = k
		}
	}
	at1, err := client.New(client.Config{BaseURL: urls[0]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := at1.Grant(ctx, budget, 100); err != nil {
		t.Fatal(err)
	}

	// Drain us-1, then stop it.
	// The join's last step may still be finishing: 409 until it is.
	testkit.WaitFor(t, 30*time.Second, func() error {
		_, err := admin.MoveShards(ctx, "us", 0, []string{"us-1"})
		return err
	})
	done(func(h api.ShardHolding) error {
		if h.Replica == "us-1" && h.Count != 1 {
			return fmt.Errorf("us-1 still serves %d shards", h.Count)
		}
		return nil
	})
	load.setTargets(urls[1:])
	other, err := client.New(client.Config{BaseURL: urls[1]})
	if err != nil {
		t.Fatal(err)
	}
	// us-1 handed the budget's rights to a holder when it left the shard.
	testkit.WaitFor(t, 30*time.Second, func() error {
		b, err := other.Budget(ctx, budget)
		if err != nil {
			return err
		}
		if b.Rights["us-1"] != 0 || b.Remaining != 100 {
			return fmt.Errorf("budget %s after the drain: %+v", budget, b)
		}
		return nil
	})
	if _, err := other.SetReplicaUp(ctx, "us-1", false); err != nil {
		t.Fatal(err)
	}
	// With us-1 down, the region spends the whole budget.
	for i := range 10 {
		testkit.WaitFor(t, 30*time.Second, func() error {
			_, err := other.Spend(ctx, budget, client.SpendRequest{By: 10, IdempotencyKey: fmt.Sprintf("s%d", i)})
			return err
		})
	}
	time.Sleep(time.Second) // likes while us-1 is down
	liked, total, resent := load.finish()
	t.Logf("%d likes acknowledged while us grew and shrank, %d sent again after no answer or a refusal", total, resent)
	if total < 100 {
		t.Fatalf("only %d likes acknowledged", total)
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		for i, u := range urls {
			if cfgs[i].Replica == "us-1" {
				continue
			}
			for item, users := range liked {
				_, b, err := testkit.DoJSON("GET", u+"/v1/likes/"+item, "")
				if err != nil {
					return err
				}
				if b["count"] != float64(len(users)) {
					return fmt.Errorf("%s: %s = %v, want %d", cfgs[i].Replica, item, b, len(users))
				}
			}
		}
		return nil
	})
}

// consecutiveFreePorts returns the first of n consecutive free loopback
// ports, below Linux's ephemeral range (32768 up), where no outgoing
// connection takes one before a replica listens on it.
func consecutiveFreePorts(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(12000)
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			_ = l.Close()
		}
		if len(ls) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

package replication

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/internal/localnet"
)

// Three regions, each replica on its own region's nats-server, joined by
// gateways through cuttable links: the topology of `tallyd local`.
func TestPartitionedRegionConvergesAfterHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-region super-cluster")
	}
	t.Parallel() // mostly waits on NATS and replication timers
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, nodes := startSuperCluster(ctx, t)
	us, eu, ap := nodes[0], nodes[1], nodes[2]
	if _, err := us.replica.Likes().Like(ctx, "post", "warmup"); err != nil {
		t.Fatal(err)
	}
	converged(t, nodes, "post", 1, 15*time.Second)

	// Isolate us.
	for _, other := range []string{"eu", "ap"} {
		if err := cl.SetLink("us", other, false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		for _, n := range []*node{us, eu} {
			if _, err := n.replica.Likes().Like(ctx, "post", fmt.Sprintf("%s-u%d", n.id, i)); err != nil {
				t.Fatalf("local write during partition failed at %s: %v", n.id, err)
			}
		}
		// The same user likes on both sides of the cut.
		for _, n := range []*node{us, ap} {
			if _, err := n.replica.Likes().Like(ctx, "post", fmt.Sprintf("both-%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := eu.replica.Counters().Incr(ctx, "views", 2, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := us.replica.Counters().Incr(ctx, "views", 1, ""); err != nil {
			t.Fatal(err)
		}
		// A keyed increment, and the client's retry of it on the other
		// side of the cut: applied twice for now, it must count once.
		for _, n := range []*node{us, eu} {
			if res, err := n.replica.Counters().Incr(ctx, "views", 3, fmt.Sprintf("req-%d", i)); err != nil || res.Duplicate {
				t.Fatalf("keyed increment at %s: %+v, %v", n.id, res, err)
			}
		}
	}
	// While cut off, us sees only its own side, and knows it.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if !us.rep.Stale() {
			return fmt.Errorf("us does not consider its peers stale")
		}
		return nil
	})
	if rd, _ := us.replica.Likes().Count("post"); rd.Value != 1+50+50 {
		t.Fatalf("us during partition reads %d, want its own side only (101)", rd.Value)
	}

	healed := time.Now()
	for _, other := range []string{"eu", "ap"} {
		if err := cl.SetLink("us", other, true); err != nil {
			t.Fatal(err)
		}
	}
	// warmup + us's 50 + eu's 50 + 50 users who liked on both sides.
	converged(t, nodes, "post", 1+50+50+50, 20*time.Second)
	t.Logf("converged %s after heal", time.Since(healed).Round(time.Millisecond))
	// 150 unkeyed, and 50 keys of 3 each counted once.
	for _, n := range nodes {
		testkit.WaitFor(t, 5*time.Second, func() error {
			if rd, _ := n.replica.Counters().Get("views"); rd.Value != 300 || rd.Unreconciled != 0 {
				return fmt.Errorf("%s views %d (%d keys unreconciled), want 300", n.id, rd.Value, rd.Unreconciled)
			}
			return nil
		})
	}
	// A third retry after the heal, at the region that saw none, is a
	// duplicate.
	for i := range 50 {
		if res, err := ap.replica.Counters().Incr(ctx, "views", 3, fmt.Sprintf("req-%d", i)); err != nil || !res.Duplicate || res.Value != 300 {
			t.Fatalf("retry %d at ap after the heal: %+v, %v", i, res, err)
		}
	}
}

// startSuperCluster starts the topology of `tallyd local` (three regions,
// us, eu and ap, each with its own nats-server, joined by gateways through
// cuttable links) and one replica per region (us-1, eu-1, ap-1), and waits
// until every replica accepts writes. Everything stops at the test's end.
func startSuperCluster(ctx context.Context, t *testing.T) (*localnet.Cluster, []*node) {
	t.Helper()
	regions := []string{"us", "eu", "ap"}
	cfg := localnet.DefaultConfig()
	cfg.Regions, cfg.Dir = regions, t.TempDir()
	cl, err := localnet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	ids := []string{"us-1", "eu-1", "ap-1"}
	var nodes []*node
	for i, r := range regions {
		nodes = append(nodes, startNode(t, cl.ClientURL(r), r, ids[i], filepath.Join(t.TempDir(), ids[i]), ids))
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close()
		}
	})
	for _, n := range nodes {
		testkit.WaitFor(t, 30*time.Second, func() error {
			if !n.replica.Accepting() {
				return fmt.Errorf("%s not accepting", n.id)
			}
			return nil
		})
	}
	return cl, nodes
}

package replication_test

// Whole replicas, wired as tallyd runs them (package node), replicating
// over one real NATS server. Tests that need the replicator's internals
// (fault injection, metrics, forged messages) are in cluster_test.go.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/node"
)

// startNATS runs one real embedded nats-server.
func startNATS(t *testing.T) *server.Server { return testkit.StartNATS(t, false) }

// replica is one running node and the config it runs.
type replica struct {
	*node.Node
	cfg node.Config
}

func (r *replica) id() string { return r.cfg.Replica }

func (r *replica) close(t *testing.T) {
	t.Helper()
	if err := r.Close(context.Background()); err != nil {
		t.Errorf("close %s: %v", r.id(), err)
	}
}

// startNode starts replica id of regionName on the NATS server at url,
// with peers (its own id among them is skipped) and short intervals.
func startNode(t *testing.T, url, regionName, id, dir string, peers []string) *replica {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.Region, cfg.Replica, cfg.DataDir, cfg.Listen = regionName, id, dir, "127.0.0.1:0"
	cfg.NATS = url
	cfg.Peers = slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == id })
	cfg.FlushInterval, cfg.AntiEntropyInterval, cfg.PeerTimeout = "5ms", "200ms", "1s"
	n, err := node.Start(context.Background(), cfg, node.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &replica{Node: n, cfg: cfg}
}

// startCluster starts one replica per region on one NATS server and waits
// until every one accepts writes.
func startCluster(t *testing.T, regions ...string) ([]*replica, string) {
	t.Helper()
	s := startNATS(t)
	var ids []string
	for _, r := range regions {
		ids = append(ids, r+"-1")
	}
	var nodes []*replica
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close(t)
		}
	})
	for i, r := range regions {
		nodes = append(nodes, startNode(t, s.ClientURL(), r, ids[i], filepath.Join(t.TempDir(), ids[i]), ids))
	}
	for _, n := range nodes {
		testkit.WaitFor(t, 10*time.Second, func() error {
			if !n.Replica().Accepting() {
				return fmt.Errorf("%s not accepting writes", n.id())
			}
			return nil
		})
	}
	return nodes, s.ClientURL()
}

// converged waits until every node reads want for the item and all stores
// have equal digests.
func converged(t *testing.T, nodes []*replica, item string, want int64, timeout time.Duration) {
	t.Helper()
	testkit.WaitFor(t, timeout, func() error {
		for _, n := range nodes {
			rd, err := n.Replica().Likes().Count(item)
			if err != nil {
				return err
			}
			if rd.Value != want || rd.Unreconciled != 0 {
				return fmt.Errorf("%s reads %d (unreconciled %d), want %d", n.id(), rd.Value, rd.Unreconciled, want)
			}
		}
		root := nodes[0].Store().Root()
		for _, n := range nodes[1:] {
			if n.Store().Root() != root {
				return fmt.Errorf("%s digest differs from %s", n.id(), nodes[0].id())
			}
		}
		return nil
	})
}

func TestWritesEverywhereConvergeExactly(t *testing.T) {
	t.Parallel() // mostly waits on NATS and replication timers
	nodes, _ := startCluster(t, "us", "eu", "ap")
	ctx := context.Background()
	var wg sync.WaitGroup
	const perNode = 200
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range perNode {
				if _, err := n.Replica().Likes().Like(ctx, "post", fmt.Sprintf("%s-user%d", n.id(), u)); err != nil {
					t.Error(err)
					return
				}
				if _, err := n.Replica().Counters().Incr(ctx, "views", int64(i+1), ""); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	converged(t, nodes, "post", 3*perNode, 10*time.Second)
	for _, n := range nodes {
		rd, _ := n.Replica().Counters().Get("views")
		if rd.Value != perNode*(1+2+3) {
			t.Fatalf("%s views %d", n.id(), rd.Value)
		}
	}
}

func TestSameUserTwoRegionsCountsOnce(t *testing.T) {
	t.Parallel() // mostly waits on NATS and replication timers
	nodes, _ := startCluster(t, "us", "eu", "ap")
	ctx := context.Background()
	// 50 users each like in us and eu at the same moment.
	var wg sync.WaitGroup
	for _, n := range nodes[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range 50 {
				if _, err := n.Replica().Likes().Like(ctx, "clip", fmt.Sprintf("u%d", u)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	converged(t, nodes, "clip", 50, 10*time.Second)

	// The latest action wins: u0 unlikes in ap, after both likes.
	if _, err := nodes[2].Replica().Likes().Unlike(ctx, "clip", "u0"); err != nil {
		t.Fatal(err)
	}
	converged(t, nodes, "clip", 49, 10*time.Second)
	for _, n := range nodes {
		if liked, _ := n.Replica().Likes().Liked("clip", "u0"); liked {
			t.Fatalf("%s still says u0 likes clip", n.id())
		}
	}
}

func TestWipedReplicaRecoversOwnEntriesBeforeWriting(t *testing.T) {
	t.Parallel() // mostly waits on NATS and replication timers
	nodes, url := startCluster(t, "us", "eu", "ap")
	ctx := context.Background()
	us := nodes[0]
	for i := range 100 {
		if _, err := us.Replica().Counters().Incr(ctx, "views", 1, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := us.Replica().Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	converged(t, nodes, "post", 100, 10*time.Second)

	// us loses its disk.
	us.close(t)
	if err := os.RemoveAll(us.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	ids := []string{"us-1", "eu-1", "ap-1"}
	fresh := startNode(t, url, "us", "us-1", us.cfg.DataDir, ids)
	nodes[0] = fresh
	t.Cleanup(func() { fresh.close(t) })
	if !fresh.Replica().Fresh() {
		t.Fatal("wiped store not seen as fresh")
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if !fresh.Replica().Accepting() {
			return fmt.Errorf("not accepting yet")
		}
		return nil
	})
	// By the time it accepts writes, its own entries are back.
	rd, err := fresh.Replica().Counters().Get("views")
	if err != nil || rd.Value != 100 {
		t.Fatalf("recovered views %d, %v; want 100", rd.Value, err)
	}
	// It counts on from there, and no increment is swallowed.
	for range 10 {
		if _, err := fresh.Replica().Counters().Incr(ctx, "views", 1, ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fresh.Replica().Likes().Like(ctx, "post", "new-user"); err != nil {
		t.Fatal(err)
	}
	// Re-liking a recovered user does not count twice.
	if res, err := fresh.Replica().Likes().Like(ctx, "post", "u1"); err != nil || res.Changed {
		t.Fatalf("re-like of recovered user: %+v %v", res, err)
	}
	converged(t, nodes, "post", 101, 10*time.Second)
	for _, n := range nodes {
		testkit.WaitFor(t, 5*time.Second, func() error {
			rd, _ := n.Replica().Counters().Get("views")
			if rd.Value != 110 {
				return fmt.Errorf("%s views %d, want 110", n.id(), rd.Value)
			}
			return nil
		})
	}
}

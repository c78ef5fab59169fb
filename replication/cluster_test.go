package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// startNATS runs one real embedded nats-server.
func startNATS(t *testing.T) *server.Server { return startNATSWith(t, nil) }

// startNATSWith is startNATS with the server's options changed by tweak.
func startNATSWith(t *testing.T, tweak func(*server.Options)) *server.Server {
	return testkit.StartNATSWith(t, tweak)
}

// node is one replica with its store and replicator.
type node struct {
	id      string
	dir     string
	store   *storage.Store
	replica *region.Replica
	rep     *Replicator
	nc      *nats.Conn
	faults  *FaultyTransport
}

func (n *node) close() {
	n.rep.Close()
	n.faults.Close()
	_ = n.replica.Close()
	_ = n.store.Close()
	n.nc.Close()
}

func startNode(t *testing.T, url, regionName, id, dir string, peers []string, tweak ...func(*Config)) *node {
	t.Helper()
	return startNodeWith(t, url, regionName, id, dir, peers, nil, tweak...)
}

// startNodeWith is startNode with the region's config changed by rtweak.
func startNodeWith(t *testing.T, url, regionName, id, dir string, peers []string, rtweak func(*region.Config), tweak ...func(*Config)) *node {
	t.Helper()
	st, err := storage.Open(storage.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ob := NewOutbox()
	rcfg := region.Config{Region: regionName, Replica: id, Store: st, HoldWrites: true, OnCommit: ob.Add}
	if rtweak != nil {
		rtweak(&rcfg)
	}
	rep, err := region.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := Dial(DialConfig{URL: url, Name: id})
	if err != nil {
		t.Fatal(err)
	}
	ft := NewFaultyTransport(NewNATS(nc), Faults{})
	var others []string
	for _, p := range peers {
		if p != id {
			others = append(others, p)
		}
	}
	cfg := Config{
		Replica: rep, Store: st, Outbox: ob, Transport: ft,
		FlushInterval: 5 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		AntiEntropyInterval: 200 * time.Millisecond, PeerTimeout: time.Second,
		Peers: others,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &node{id: id, dir: dir, store: st, replica: rep, rep: r, nc: nc, faults: ft}
}

// startCluster starts one replica per region on one NATS server.
func startCluster(t *testing.T, regions ...string) ([]*node, string) {
	return startClusterWith(t, nil, regions...)
}

func startClusterWith(t *testing.T, tweak func(*Config), regions ...string) ([]*node, string) {
	t.Helper()
	s := startNATS(t)
	var ids []string
	for _, r := range regions {
		ids = append(ids, r+"-1")
	}
	var nodes []*node
	for i, r := range regions {
		var tw []func(*Config)
		if tweak != nil {
			tw = append(tw, tweak)
		}
		n := startNode(t, s.ClientURL(), r, ids[i], filepath.Join(t.TempDir(), ids[i]), ids, tw...)
		nodes = append(nodes, n)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close()
		}
	})
	for _, n := range nodes {
		waitAccepting(t, n)
	}
	return nodes, s.ClientURL()
}

// waitAccepting waits until n's replica accepts writes (recovered).
func waitAccepting(t *testing.T, n *node) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if !n.replica.Accepting() {
			return fmt.Errorf("%s not accepting writes", n.id)
		}
		return nil
	})
}

// converged waits until every node reads want for the item and all stores
// have equal digests.
func converged(t *testing.T, nodes []*node, item string, want int64, timeout time.Duration) {
	t.Helper()
	testkit.WaitFor(t, timeout, func() error {
		for _, n := range nodes {
			rd, err := n.replica.Likes().Count(item)
			if err != nil {
				return err
			}
			if rd.Value != want || rd.Unreconciled != 0 {
				return fmt.Errorf("%s reads %d (unreconciled %d), want %d", n.id, rd.Value, rd.Unreconciled, want)
			}
		}
		root := nodes[0].store.Root()
		for _, n := range nodes[1:] {
			if n.store.Root() != root {
				return fmt.Errorf("%s digest differs from %s", n.id, nodes[0].id)
			}
		}
		return nil
	})
}

func TestLossyDuplicatingReorderingNetworkConverges(t *testing.T) {
	nodes, _ := startCluster(t, "us", "eu", "ap")
	for _, n := range nodes {
		n.faults.SetFaults(Faults{Drop: 0.5, Dup: 0.3, Delay: 30 * time.Millisecond, Seed: 7})
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	model := map[string]bool{}
	for i := range 600 {
		n := nodes[rng.IntN(len(nodes))]
		user := fmt.Sprintf("u%d", rng.IntN(80))
		like := rng.IntN(3) != 0
		var err error
		if like {
			_, err = n.replica.Likes().Like(ctx, "hot", user)
		} else {
			_, err = n.replica.Likes().Unlike(ctx, "hot", user)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Actions are sequential, so each one is the user's latest so far:
		// with HLCs that never go back, it must win everywhere.
		model[user] = like
		if i%100 == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	want := int64(0)
	for _, liked := range model {
		if liked {
			want++
		}
	}
	converged(t, nodes, "hot", want, 15*time.Second)
}

// Overlapping ids added in three regions over a lossy, duplicating
// network: every replica ends with the same sketches (equal digests), and
// their union equals the sketch of every id; with the fast path gone,
// anti-entropy alone gets there too.
func TestUniquesConvergeOverNATS(t *testing.T) {
	t.Parallel() // mostly waits on NATS and replication timers
	for _, drop := range []float64{0.5, 1} {
		t.Run(fmt.Sprint("drop", drop), func(t *testing.T) {
			nodes, _ := startCluster(t, "us", "eu", "ap")
			for _, n := range nodes {
				n.faults.SetFaults(Faults{Drop: drop, Dup: 0.3, Delay: 10 * time.Millisecond, Seed: 3})
			}
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(2, 2))
			ref := new(crdt.HLL)
			for range 60 {
				ids := make([]string, 200)
				for i := range ids {
					ids[i] = fmt.Sprintf("viewer%d", rng.IntN(20_000))
					ref.AddID(ids[i])
				}
				n := nodes[rng.IntN(len(nodes))]
				if _, err := n.replica.Apply(ctx, region.Op{Kind: region.OpUniques, Item: "video", IDs: ids}); err != nil {
					t.Fatal(err)
				}
			}
			testkit.WaitFor(t, 30*time.Second, func() error {
				root := nodes[0].store.Root()
				for _, n := range nodes {
					u, err := n.replica.Uniques().Read([]string{"video"})
					if err != nil {
						return err
					}
					if !u.Sketch.Equal(ref) {
						return fmt.Errorf("%s: sketch differs from the sketch of every id (estimate %.0f, want %.0f)", n.id, u.Estimate, ref.Estimate())
					}
					if n.store.Root() != root {
						return fmt.Errorf("%s digest differs from %s", n.id, nodes[0].id)
					}
				}
				return nil
			})
		})
	}
}

// With the fast path gone entirely, anti-entropy alone converges, even when
// it may pull only a few segments per round.
func TestAntiEntropyAloneConvergesInBoundedRounds(t *testing.T) {
	nodes, _ := startClusterWith(t, func(c *Config) { c.MaxSegmentsPerRound = 8 }, "us", "eu")
	for _, n := range nodes {
		n.faults.SetFaults(Faults{Drop: 1}) // drop every fast-path message
	}
	ctx := context.Background()
	// 60 items, 5 likes each: an item's records share its shard's few
	// segments, so the items spread the likes over many segments.
	const items = 60
	for i := range 300 {
		n := nodes[i%2]
		if _, err := n.replica.Likes().Like(ctx, fmt.Sprintf("item%d", i%items), fmt.Sprintf("user%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range items {
		converged(t, nodes, fmt.Sprintf("item%d", i), 300/items, 30*time.Second)
	}
	var pulled float64
	for _, n := range nodes {
		pulled += testutilCounter(n.rep.m.aeSegments)
	}
	if pulled < 300/8 {
		t.Fatalf("only %v segments pulled: convergence did not come from anti-entropy", pulled)
	}
}

func testutilCounter(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// A delta published on another replica's subject is dropped: the subject,
// which NATS permissions tie to a region, authenticates the sender.
func TestSpoofedDeltaIgnored(t *testing.T) {
	nodes, _ := startCluster(t, "us", "eu")
	us, eu := nodes[0], nodes[1]
	forged := AppendDelta(nil, &Delta{Replica: "us-1", Region: "us", Seq: 1, Vectors: []OwnEntry{{Kind: storage.Counters, Item: "c", PN: crdt.PN{P: 1000}}}})
	if err := eu.nc.Publish(deltaSubject("eu", "eu-1"), forged); err != nil { // eu's own subject, claiming to be us-1
		t.Fatal(err)
	}
	genuine := AppendDelta(nil, &Delta{Replica: "eu-1", Region: "eu", Seq: 1 << 40, Vectors: []OwnEntry{{Kind: storage.Counters, Item: "c", PN: crdt.PN{P: 5}}}})
	if err := eu.nc.Publish(deltaSubject("eu", "eu-1"), genuine); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		rd, _ := us.replica.Counters().Get("c")
		if rd.Vector.Get("eu-1").P != 5 {
			return fmt.Errorf("genuine delta not merged yet: %+v", rd)
		}
		return nil
	})
	if rd, _ := us.replica.Counters().Get("c"); rd.Vector.Get("us-1").P != 0 {
		t.Fatalf("forged delta raised us-1's own entry: %+v", rd)
	}
}

// A second process running with the same replica id is reported.
func TestDuplicateReplicaIDDetected(t *testing.T) {
	nodes, _ := startCluster(t, "us", "eu")
	us := nodes[0]
	impostor := AppendDelta(nil, &Delta{Replica: "us-1", Region: "us", Incarnation: 42, Seq: 1})
	testkit.WaitFor(t, 5*time.Second, func() error {
		if err := nodes[1].nc.Publish(deltaSubject("us", "us-1"), impostor); err != nil {
			return err
		}
		if testutilCounter(us.rep.m.ownIDConflicts) == 0 {
			return fmt.Errorf("not detected yet")
		}
		return nil
	})
	// Its own messages, which it also receives, never count as conflicts.
	// (First let the impostor's retries above drain.)
	if err := nodes[1].nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	before := testutilCounter(us.rep.m.ownIDConflicts)
	if _, err := us.replica.Counters().Incr(context.Background(), "c", 1, ""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a few flushes of its own
	if after := testutilCounter(us.rep.m.ownIDConflicts); after != before {
		t.Fatalf("own deltas counted as conflicts: %v -> %v", before, after)
	}
}

// spendUntilExhausted spends 1 of budget gift at n, again and again,
// until n answers budget_exhausted or the deadline passes; a
// rights_elsewhere is retried after 2 ms. spent counts the spends made.
func spendUntilExhausted(t *testing.T, n *node, deadline time.Time, spent *atomic.Int64) {
	for time.Now().Before(deadline) {
		_, err := n.replica.Apply(context.Background(), region.Op{Kind: region.OpSpend, Item: "gift", By: 1})
		switch {
		case err == nil:
			spent.Add(1)
		case errors.Is(err, region.ErrRightsElsewhere):
			time.Sleep(2 * time.Millisecond)
		case errors.Is(err, region.ErrBudgetExhausted):
			return
		default:
			t.Error(err)
			return
		}
	}
}

// Budget spends from three regions over real NATS, with a lossy fast path:
// rights move to the regions that ask, every spend the budget covers
// succeeds somewhere, and not one more.
func TestBudgetSpendsOverNATS(t *testing.T) {
	nodes, _ := startCluster(t, "us", "eu", "ap")
	for _, n := range nodes {
		n.faults.SetFaults(Faults{Drop: 0.3, Dup: 0.2, Delay: 5 * time.Millisecond, Seed: 5})
	}
	ctx := context.Background()
	const granted = 300
	if _, err := nodes[0].replica.Apply(ctx, region.Op{Kind: region.OpGrant, Item: "gift", By: granted}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, func() error { // everyone has heard of the grant
		for _, n := range nodes {
			if rd, err := n.replica.Budgets().Get("gift"); err != nil || rd.Remaining != granted {
				return fmt.Errorf("%s: %+v %v", n.id, rd, err)
			}
		}
		return nil
	})
	// eu and ap hold no rights at first: every spend of theirs is paid by a
	// transfer. us, the holder, joins once they have spent a third, so that
	// transfers and the holder's own spends overlap.
	var spent [3]atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i == 0 && spent[1].Load()+spent[2].Load() < granted/3 {
				if time.Now().After(deadline) {
					return
				}
				time.Sleep(time.Millisecond)
			}
			spendUntilExhausted(t, n, deadline, &spent[i])
		}()
	}
	wg.Wait()
	got := [3]int64{spent[0].Load(), spent[1].Load(), spent[2].Load()}
	if total := got[0] + got[1] + got[2]; total != granted {
		t.Fatalf("spent %v = %d in all, want exactly %d", got, total, granted)
	}
	if got[1]+got[2] < granted/3 {
		t.Fatalf("spent %v: too few rights reached eu and ap", got)
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, n := range nodes {
			rd, err := n.replica.Budgets().Get("gift")
			if err != nil {
				return err
			}
			if rd.Remaining != 0 || rd.Spent != granted {
				return fmt.Errorf("%s: %+v", n.id, rd)
			}
		}
		return nil
	})
}

// A replica about to be retired hands its budget rights off over real NATS
// (with a lossy fast path); once it is gone, the others spend every unit,
// its grant included, and not one more.
func TestBudgetHandoffOverNATS(t *testing.T) {
	nodes, _ := startCluster(t, "us", "eu", "ap")
	for _, n := range nodes {
		n.faults.SetFaults(Faults{Drop: 0.3, Dup: 0.2, Delay: 5 * time.Millisecond, Seed: 9})
	}
	ctx := context.Background()
	us, eu, ap := nodes[0], nodes[1], nodes[2]
	for _, g := range []struct {
		n  *node
		by int64
	}{{us, 200}, {eu, 50}} {
		if _, err := g.n.replica.Apply(ctx, region.Op{Kind: region.OpGrant, Item: "gift", By: g.by}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := us.replica.Budgets().HandOffRights(ctx, "eu-1")
	if err != nil || h.Moved != 200 || h.Held != 0 {
		t.Fatalf("handoff: %+v %v", h, err)
	}
	testkit.WaitFor(t, 30*time.Second, func() error { // eu and ap hear of the transfer
		for _, n := range []*node{eu, ap} {
			if rd, err := n.replica.Budgets().Get("gift"); err != nil || rd.Remaining != 250 || rd.Rights["us-1"] != 0 {
				return fmt.Errorf("%s: %+v %v", n.id, rd, err)
			}
		}
		return nil
	})
	us.close() // retired

	var spent [2]atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for i, n := range []*node{eu, ap} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			spendUntilExhausted(t, n, deadline, &spent[i])
		}()
	}
	wg.Wait()
	if got := spent[0].Load() + spent[1].Load(); got != 250 {
		t.Fatalf("with us retired, eu and ap spent %d+%d, want exactly 250", spent[0].Load(), spent[1].Load())
	}
}

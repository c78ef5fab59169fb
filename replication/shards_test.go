package replication

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// A region of three replicas with two copies of each shard, and a region
// of one: every like is written at one holder of its item's shard, the
// fast path loses half its messages, and still every holder in both
// regions reads every count exactly, while a replica keeps nothing of the
// shards it does not hold.
func TestShardedRegionConvergesOnHoldersOnly(t *testing.T) {
	t.Parallel() // mostly waits on NATS and replication timers
	s := startNATS(t)
	us := []string{"us-1", "us-2", "us-3"}
	usMap, err := shard.Assign("us", us, 2)
	if err != nil {
		t.Fatal(err)
	}
	view := shard.Maps{usMap, shard.Single("eu", "eu-1")}
	ids := append(append([]string(nil), us...), "eu-1")
	nodes := startSharded(t, s.ClientURL(), ids, view)
	for _, n := range nodes {
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
		if _, err := n.replica.Likes().Like(ctx, item, user); err != nil {
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
				rd, err := nodes[id].replica.Likes().Count(item)
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

// swapView is a ShardView a test replaces, as the shard map bucket's watch
// does.
type swapView struct{ p atomic.Pointer[shard.Maps] }

func (v *swapView) Holds(replica string, s int) bool { return (*v.p.Load()).Holds(replica, s) }
func (v *swapView) Joins(replica string, s int) bool { return (*v.p.Load()).Joins(replica, s) }

// Sharded, a shard's changes travel on its own subject and only its
// holders subscribe to it: a replica's subscriptions are the shards it
// holds, every non-empty delta on the wire speaks for one shard, the
// replica's own subject carries heartbeats only, and when the map gives a
// replica another shard it follows at its next anti-entropy round.
func TestShardDeltasReachHoldersOnly(t *testing.T) {
	s := startNATS(t)
	us := []string{"us-1", "us-2", "us-3"}
	two, err := shard.Assign("us", us, 2)
	if err != nil {
		t.Fatal(err)
	}
	view := &swapView{}
	view.p.Store(&shard.Maps{two})
	nodes := startSharded(t, s.ClientURL(), us, view)
	subscribed := func(id string) []int {
		r := nodes[id].rep
		r.subMu.Lock()
		defer r.subMu.Unlock()
		return slices.Sorted(maps.Keys(r.shardSubs))
	}
	for _, id := range us {
		held := two.Held(id)
		var want []int
		for s := range shard.Count {
			if held.Has(s) {
				want = append(want, s)
			}
		}
		if got := subscribed(id); !slices.Equal(got, want) {
			t.Fatalf("%s subscribes to the deltas of %d shards, holds %d", id, len(got), len(want))
		}
	}

	// What goes on the wire.
	spy, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	type seen struct {
		subject string
		d       *Delta
	}
	wire := make(chan seen, 4096)
	if _, err := spy.Subscribe("tally.delta.>", func(m *nats.Msg) {
		d, err := DecodeDelta(m.Data)
		if err != nil {
			t.Errorf("%s: %v", m.Subject, err)
			return
		}
		wire <- seen{m.Subject, d}
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	// An item us-3 does not hold, liked at one of its holders.
	var item string
	held3 := two.Held("us-3")
	for i := 0; item == ""; i++ {
		if c := fmt.Sprintf("item%d", i); !held3.Has(shard.Of(c)) {
			item = c
		}
	}
	holders := two.Holders(shard.Of(item))
	ctx := context.Background()
	for i := range 20 {
		if _, err := nodes[holders[0]].replica.Likes().Like(ctx, item, fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	itemSubject := fmt.Sprintf("tally.delta.us.%s.%d", holders[0], shard.Of(item))
	heartbeat := false
	for carried := false; !carried || !heartbeat; {
		var m seen
		select {
		case m = <-wire:
		case <-time.After(10 * time.Second):
			t.Fatalf("no delta on %s (carried %v) or no heartbeat (%v) within 10s", itemSubject, carried, heartbeat)
		}
		own := deltaSubject(m.d.Region, m.d.Replica)
		if m.subject == own {
			if !m.d.empty() {
				t.Fatalf("a sharded replica published changes on its own subject %s", m.subject)
			}
			heartbeat = true
			continue
		}
		on, ok := deltaSubjectOf(m.subject, own)
		if !ok {
			t.Fatalf("a delta of %s on %s", m.d.Replica, m.subject)
		}
		for _, v := range m.d.Vectors {
			if shard.Of(v.Item) != on {
				t.Fatalf("%s carries %s of shard %d", m.subject, v.Item, shard.Of(v.Item))
			}
		}
		for _, rc := range m.d.Records {
			if shard.Of(rc.Item) != on {
				t.Fatalf("%s carries a record of %s, shard %d", m.subject, rc.Item, shard.Of(rc.Item))
			}
		}
		carried = carried || (m.subject == itemSubject && len(m.d.Vectors) > 0)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		rd, err := nodes[holders[1]].replica.Likes().Count(item)
		if err != nil || rd.Value != 20 {
			return fmt.Errorf("%s reads %s = %d (%v), want 20", holders[1], item, rd.Value, err)
		}
		return nil
	})

	// The map gives every shard to every replica: us-3 now subscribes to
	// the item's shard and the item's count reaches it.
	all, err := shard.Assign("us", us, 3)
	if err != nil {
		t.Fatal(err)
	}
	view.p.Store(&shard.Maps{all})
	testkit.WaitFor(t, 10*time.Second, func() error {
		if got := len(subscribed("us-3")); got != shard.Count {
			return fmt.Errorf("us-3 subscribes to %d shards' deltas, want %d", got, shard.Count)
		}
		rd, err := nodes["us-3"].replica.Likes().Count(item)
		if err != nil || rd.Value != 20 {
			return fmt.Errorf("us-3 reads %s = %d (%v), want 20", item, rd.Value, err)
		}
		return nil
	})
}

// startSharded starts replicas ids (region: the id up to its "-"), each
// seeing view, and waits until each accepts writes.
func startSharded(t *testing.T, url string, ids []string, view ShardView) map[string]*node {
	t.Helper()
	nodes := map[string]*node{}
	for _, id := range ids {
		reg, _, _ := strings.Cut(id, "-")
		nodes[id] = startNode(t, url, reg, id, filepath.Join(t.TempDir(), id), ids,
			func(c *Config) { c.Shards = view })
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close()
		}
	})
	for _, n := range nodes {
		waitAccepting(t, n)
	}
	return nodes
}

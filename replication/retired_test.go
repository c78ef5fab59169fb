package replication

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/storage"
)

// retiredForgery is issue 27's record: a like of alice on postr in the name
// of the retired replica, stamped long ago, claiming it counted her 1000
// times. The replica holding the record's register would reconcile the
// excess away with its own, authentic entry.
func retiredForgery(retired string) Record {
	return Record{Item: "postr", User: "alice", Rec: &crdt.LikeRecord{Liked: true, HLC: 1000, Origin: retired,
		Contrib: crdt.Vector{{Replica: retired, PN: crdt.PN{P: 1000}}}}}
}

// retiredForgedPage is a page of the same forgery, plus a raised vector
// entry and a new like record in the retired replica's name.
func retiredForgedPage(retired string) *Page {
	return &Page{
		Entries: []Entry{{Kind: storage.Counters, Item: "views", Replica: retired, PN: crdt.PN{P: 1000}}},
		Records: []Record{retiredForgery(retired), {Item: "postr", User: "mallory", Rec: &crdt.LikeRecord{Liked: true, HLC: 1000,
			Origin: retired, Contrib: crdt.Vector{{Replica: retired, PN: crdt.PN{P: 1}}}}}},
	}
}

// Issue 27, item 1, over the in-memory transport: a replica is retired with
// state of its own; then us, a live peer, forges state in its name, on the
// fast path and in its anti-entropy pages. Nothing of it merges, while a
// replica that lost its disk still gets the retired replica's real state
// back from its peers.
func TestRetiredStateIsNotForgeable(t *testing.T) {
	ctx := context.Background()
	s := newScenario(t)
	startAll := func() {
		t.Helper()
		s.clock.Advance(2 * scenarioHeartbeat) // past the wait for heartbeats
		for _, name := range s.names {
			s.antiEntropy(ctx, []*scenarioNode{s.nodes[name]})
		}
		for _, name := range s.names {
			if !s.nodes[name].replica.Accepting() {
				t.Fatalf("%s does not accept writes", name)
			}
		}
	}
	s.names = []string{"us", "eu", "ap", "old"}
	for _, name := range s.names {
		s.open(name)
	}
	startAll()
	// old's own state: a like of bob's and 3 views; eu holds alice's
	// like on postr.
	if _, err := s.nodes["old"].replica.Likes().Like(ctx, "post1", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.nodes["old"].replica.Counters().Incr(ctx, "views", 3, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.nodes["eu"].replica.Likes().Like(ctx, "postr", "alice"); err != nil {
		t.Fatal(err)
	}
	for _, name := range s.names {
		s.nodes[name].rep.flush(s.nodes[name].flusher)
	}
	s.net.Deliver()
	for _, name := range s.names {
		s.mergeInbox(ctx, s.nodes[name])
	}

	// Retire old: stop it, and restart the others with it under retired.
	s.nodes["old"].close()
	delete(s.nodes, "old")
	s.names = []string{"us", "eu", "ap"}
	s.tweak = func(c *Config) { c.Retired = []string{"old"} }
	for _, name := range s.names {
		s.nodes[name].close()
		s.open(name)
	}
	startAll()
	want := func(stage string) {
		t.Helper()
		root := s.nodes["us"].store.Root()
		for _, name := range s.names {
			n := s.nodes[name]
			r, err := n.replica.Likes().Count("postr")
			if err != nil {
				t.Fatal(err)
			}
			if r.Value != 1 || r.Unreconciled != 0 || len(r.Vector) != 1 || r.Vector.Get("eu") != (crdt.PN{P: 1}) {
				t.Fatalf("%s, %s: postr counts %d %s (unreconciled %d), want 1 {eu:+1-0}", stage, name, r.Value, r.Vector.String(), r.Unreconciled)
			}
			if rec, _, _ := n.replica.Likes().Record("postr", "mallory"); rec != nil && (rec.HLC != 0 || len(rec.Contrib) != 0) {
				t.Fatalf("%s, %s: a like of mallory's in old's name was taken: %+v", stage, name, rec)
			}
			b, err := n.replica.Likes().Count("post1")
			if err != nil {
				t.Fatal(err)
			}
			v, err := n.replica.Counters().Get("views")
			if err != nil {
				t.Fatal(err)
			}
			if b.Value != 1 || b.Vector.Get("old") != (crdt.PN{P: 1}) || v.Value != 3 || v.Vector.Get("old") != (crdt.PN{P: 3}) {
				t.Fatalf("%s, %s: old's own state is post1 %s, views %s; want old:+1-0 and old:+3-0", stage, name, b.Vector.String(), v.Vector.String())
			}
			if n.store.Root() != root {
				t.Fatalf("%s: %s's digest differs from us's", stage, name)
			}
		}
	}
	want("retired")

	// The fast path: a delta on us's own subject, speaking for old.
	us := s.nodes["us"]
	d := &Delta{Replica: "us", Region: "us", Incarnation: us.rep.incarnation, Seq: us.flusher.seq[baseSubject] + 1,
		SentAtMs: s.clock.Now().UnixMilli(), Records: []Record{retiredForgery("old")}}
	us.flusher.seq[baseSubject]++
	if err := us.faults.Publish(deltaSubject("us", "us"), AppendDelta(nil, d)); err != nil {
		t.Fatal(err)
	}
	s.net.Deliver()
	for _, name := range s.names {
		s.mergeInbox(ctx, s.nodes[name])
	}
	s.clock.Advance(scenarioHeartbeat)
	s.antiEntropy(ctx, []*scenarioNode{s.nodes["eu"], s.nodes["ap"]})
	want("after the forged delta")

	// Anti-entropy: us serves forged digests and pages.
	us.close()
	delete(s.nodes, "us")
	impostor := s.net.Join("us")
	digests := make([]uint64, storage.Segments)
	for i := range digests {
		digests[i] = uint64(i) + 1 // differs from everyone's
	}
	var unsubs []func() error
	for subject, reply := range map[string][]byte{
		digestsSubject("us"): AppendDigests(nil, "us", digests),
		pageSubject("us"):    AppendPage(nil, retiredForgedPage("old")),
	} {
		unsub, err := impostor.Respond(subject, func([]byte) []byte { return reply })
		if err != nil {
			t.Fatal(err)
		}
		unsubs = append(unsubs, unsub)
	}
	for _, name := range []string{"eu", "ap"} {
		s.nodes[name].rep.round(ctx)
	}
	for _, u := range unsubs {
		_ = u()
	}
	s.open("us")
	s.antiEntropy(ctx, []*scenarioNode{s.nodes["us"]})
	want("after the forged pages")

	// ap loses its disk: it gets old's real state back from its peers.
	s.nodes["ap"].close()
	if err := os.RemoveAll(filepath.Join(s.dir, "ap")); err != nil {
		t.Fatal(err)
	}
	ap := s.open("ap")
	if !ap.replica.Fresh() {
		t.Fatal("ap is not fresh after losing its disk")
	}
	s.clock.Advance(2 * scenarioHeartbeat)
	s.antiEntropy(ctx, []*scenarioNode{ap})
	if !ap.replica.Accepting() {
		t.Fatal("ap did not recover")
	}
	want("after ap recovered from an empty disk")
	if rec, _, err := ap.replica.Likes().Record("post1", "bob"); err != nil || rec == nil || rec.Origin != "old" || rec.Contrib.Get("old") != (crdt.PN{P: 1}) {
		t.Fatalf("ap did not get bob's like back from its peers: %+v, %v", rec, err)
	}
}

// Issue 27, item 1, against real replicas (Pebble stores, one embedded
// nats-server): old-1 is retired with state of its own, and region us,
// whose credentials the attacker holds, forges state in old-1's name on
// us-1's own delta subject and in the anti-entropy pages us-1 answers.
// Before the fix eu-1, which holds alice's record, reconciled the forged
// contribution with its own entry and every region read -999.
func TestRetiredStateIsNotForgeableOverNATS(t *testing.T) {
	s := startNATS(t)
	all := []string{"us-1", "eu-1", "ap-1", "old-1"}
	live := all[:3]
	dirs := map[string]string{}
	for _, id := range all {
		dirs[id] = filepath.Join(t.TempDir(), id)
	}
	var nodes []*node
	t.Cleanup(func() {
		for _, n := range nodes {
			n.close()
		}
	})
	start := func(ids, peers []string, tweak ...func(*Config)) {
		t.Helper()
		for _, id := range ids {
			nodes = append(nodes, startNode(t, s.ClientURL(), id[:len(id)-2], id, dirs[id], peers, tweak...))
		}
		for _, n := range nodes {
			testkit.WaitFor(t, 10*time.Second, func() error {
				if !n.replica.Accepting() {
					return fmt.Errorf("%s not accepting writes", n.id)
				}
				return nil
			})
		}
	}
	stopAll := func() {
		for _, n := range nodes {
			n.close()
		}
		nodes = nil
	}
	ctx := context.Background()
	start(all, all)
	byID := func(id string) *node {
		for _, n := range nodes {
			if n.id == id {
				return n
			}
		}
		t.Fatalf("no node %s", id)
		return nil
	}
	if _, err := byID("old-1").replica.Likes().Like(ctx, "post1", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := byID("old-1").replica.Counters().Incr(ctx, "views", 3, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := byID("eu-1").replica.Likes().Like(ctx, "postr", "alice"); err != nil {
		t.Fatal(err)
	}
	converged(t, nodes, "post1", 1, 10*time.Second)
	converged(t, nodes, "postr", 1, 10*time.Second)

	// Retire old-1 (docs/operations.md, "Retiring a replica").
	stopAll()
	start(live, live, func(c *Config) { c.Retired = []string{"old-1"} })
	check := func(stage string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			n := byID(id)
			r, err := n.replica.Likes().Count("postr")
			if err != nil {
				t.Fatal(err)
			}
			if r.Value != 1 || r.Unreconciled != 0 || r.Vector.Get("eu-1") != (crdt.PN{P: 1}) || r.Vector.Get("old-1") != (crdt.PN{}) {
				t.Fatalf("%s, %s: postr counts %d %s (unreconciled %d), want 1 {eu-1:+1-0}", stage, id, r.Value, r.Vector.String(), r.Unreconciled)
			}
			if rec, _, _ := n.replica.Likes().Record("postr", "alice"); rec == nil || rec.Origin != "eu-1" || rec.Contrib.Get("old-1") != (crdt.PN{}) {
				t.Fatalf("%s, %s: alice's record took the forgery: %+v", stage, id, rec)
			}
			if rec, _, _ := n.replica.Likes().Record("postr", "mallory"); rec != nil && (rec.HLC != 0 || len(rec.Contrib) != 0) {
				t.Fatalf("%s, %s: a like of mallory's in old-1's name was taken: %+v", stage, id, rec)
			}
			v, err := n.replica.Counters().Get("views")
			if err != nil {
				t.Fatal(err)
			}
			if v.Value != 3 || v.Vector.Get("old-1") != (crdt.PN{P: 3}) {
				t.Fatalf("%s, %s: views %d %s, want old-1's 3", stage, id, v.Value, v.Vector.String())
			}
		}
	}
	check("retired", live...)

	// The attacker is region us: us-1's process is gone, its credentials
	// publish on us-1's subjects and answer us-1's anti-entropy requests.
	byID("us-1").close()
	nodes = slices.DeleteFunc(nodes, func(n *node) bool { return n.id == "us-1" })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The fast path. The delta also carries a like of zed's by us-1
	// itself, which us may say: once it is merged, so was the rest.
	d := &Delta{Replica: "us-1", Region: "us", Incarnation: 77, Seq: 1, SentAtMs: time.Now().UnixMilli(),
		Records: []Record{retiredForgery("old-1"), {Item: "postm", User: "zed", Rec: &crdt.LikeRecord{Liked: true,
			HLC: crdt.MakeHLC(time.Now().UnixMilli(), 0), Origin: "us-1", Contrib: crdt.Vector{{Replica: "us-1", PN: crdt.PN{P: 1}}}}}}}
	if err := nc.Publish(deltaSubject("us", "us-1"), AppendDelta(nil, d)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, n := range nodes {
			if rec, _, _ := n.replica.Likes().Record("postm", "zed"); rec == nil || rec.Origin != "us-1" {
				return fmt.Errorf("%s has not merged the forged delta", n.id)
			}
		}
		return nil
	})
	check("after the forged delta", "eu-1", "ap-1")

	// Anti-entropy: forged digests and pages, until both eu-1 and ap-1
	// have finished a whole round against them (each pulls at most
	// MaxSegmentsPerRound segments a round, then goes again).
	digests := make([]uint64, storage.Segments)
	for i := range digests {
		digests[i] = uint64(i) + 1
	}
	var mu sync.Mutex
	pulls := map[string]int{} // page requests by requesting connection
	page := AppendPage(nil, retiredForgedPage("old-1"))
	ds, err := nc.Subscribe(digestsSubject("us-1"), func(m *nats.Msg) { _ = m.Respond(AppendDigests(nil, "us-1", digests)) })
	if err != nil {
		t.Fatal(err)
	}
	ps, err := nc.Subscribe(pageSubject("us-1"), func(m *nats.Msg) {
		mu.Lock()
		pulls[m.Reply[:strings.LastIndexByte(m.Reply, '.')]]++
		mu.Unlock()
		_ = m.Respond(page)
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		done := 0
		for _, n := range pulls {
			if n > DefaultConfig().MaxSegmentsPerRound+pullConcurrency {
				done++
			}
		}
		if done < 2 {
			return fmt.Errorf("page requests by connection: %v", pulls)
		}
		return nil
	})
	_ = ds.Unsubscribe()
	_ = ps.Unsubscribe()
	check("after the forged pages", "eu-1", "ap-1")
}

package replication

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/storage"
)

// legacyPeer is a peer that predates some request on the page subject:
// it answers those for which unread is true with nothing, as a failed
// decode does, and counts them (several pulls may ask at once).
type legacyPeer struct {
	Transport
	unread func(data []byte) bool
	asked  atomic.Int32
}

func (t *legacyPeer) Respond(subject string, h func([]byte) []byte) (func() error, error) {
	if !strings.HasSuffix(subject, ".page") {
		return t.Transport.Respond(subject, h)
	}
	return t.Transport.Respond(subject, func(data []byte) []byte {
		if t.unread(data) {
			t.asked.Add(1)
			return nil
		}
		return h(data)
	})
}

// predatesParts reads only whole-segment page requests, as a peer before
// part digests did.
func predatesParts(data []byte) bool {
	_, err := DecodePageRequest(data)
	return err != nil
}

// predatesNamedDiffs reads everything but diff requests naming their
// asker.
func predatesNamedDiffs(data []byte) bool { return len(data) >= 2 && data[1] == typeOwnDiffReq }

// recoveredTrio starts a, b and c, recovered and in sync, with b's
// transport wrapped by wrapB if set.
func recoveredTrio(t *testing.T, wrapB func(Transport) Transport) *scenario {
	ctx := context.Background()
	s := newScenario(t)
	s.tweak = func(c *Config) {
		if c.Replica.ID() == "b" && wrapB != nil {
			c.Transport = wrapB(c.Transport)
		}
	}
	s.names = []string{"a", "b", "c"}
	for _, name := range s.names {
		s.open(name)
	}
	s.clock.Advance(2 * scenarioHeartbeat)
	for _, name := range s.names {
		s.nodes[name].steps.Flush()
	}
	s.net.Deliver()
	nodes := []*scenarioNode{s.nodes["a"], s.nodes["b"], s.nodes["c"]}
	s.antiEntropy(ctx, nodes)
	s.antiEntropy(ctx, nodes)
	for _, n := range nodes {
		if !n.rep.Recovered() {
			t.Fatalf("%s did not recover", n.name)
		}
	}
	return s
}

// likeOn writes likes of distinct items on one replica, not published,
// then moves the clock past the interval within which a peer's heartbeat
// root, equal to ours before, would skip the comparison.
func likeOn(t *testing.T, s *scenario, n *scenarioNode, user string, items int) {
	for i := range items {
		if _, err := n.replica.Likes().Like(context.Background(), fmt.Sprintf("post%d", i), user); err != nil {
			t.Fatal(err)
		}
	}
	s.clock.Advance(2 * time.Second)
}

func peerDiffering(t *testing.T, n *scenarioNode, id string) int {
	t.Helper()
	for _, p := range n.rep.Peers() {
		if p.Replica == id {
			return p.DifferingSegments
		}
	}
	t.Fatalf("%s has no peer %s", n.name, id)
	return 0
}

// Pulling from one peer what another already gave costs no entries: a
// pulls b's new likes from b, then compares with c, which lacks them.
// Their segments differ, but c holds nothing a lacks, so c sends nothing.
func TestRepairSkipsWhatWeHold(t *testing.T) {
	s := recoveredTrio(t, nil)
	a, b := s.nodes["a"], s.nodes["b"]
	likeOn(t, s, b, "alice", 40)
	lacks := float64(len(missing(t, a, b)))
	if lacks < 80 { // a like record and a vector entry per like, at least
		t.Fatalf("a lacks %v of b's entries after 40 likes, want at least 80", lacks)
	}
	entries := func() float64 { return testutil.ToFloat64(a.rep.m.aeEntries) }
	before := entries()
	if pulled := a.rep.exchange(context.Background(), a.rep.peers["b"]); pulled {
		t.Fatal("segments left for a later round")
	}
	if fromB := entries() - before; fromB != lacks {
		t.Fatalf("pulled %v entries from b, a lacked %v", fromB, lacks)
	}
	fromB := lacks
	a.rep.exchange(context.Background(), a.rep.peers["c"])
	if d := peerDiffering(t, a, "c"); d == 0 {
		t.Fatal("a's segments do not differ from c's: the test shows nothing")
	}
	if fromC := entries() - before - fromB; fromC != 0 {
		t.Fatalf("pulled %v entries from c, which holds nothing a lacks", fromC)
	}
	if got, want := s.nodes["a"].store.Root(), b.store.Root(); got != want {
		t.Fatalf("a's root %x, b's %x after the pull", got, want)
	}
}

// A peer that does not answer part digests has its differing segments
// pulled whole, and is not asked for parts again.
func TestRepairFallsBackToWholeSegments(t *testing.T) {
	var legacy *legacyPeer
	s := recoveredTrio(t, func(tr Transport) Transport {
		legacy = &legacyPeer{Transport: tr, unread: predatesParts}
		return legacy
	})
	a, b := s.nodes["a"], s.nodes["b"]
	likeOn(t, s, b, "alice", 10)
	a.rep.exchange(context.Background(), a.rep.peers["b"])
	if got, want := a.store.Root(), b.store.Root(); got != want {
		t.Fatalf("a's root %x, b's %x after the pull", got, want)
	}
	if n := legacy.asked.Load(); n != 1 {
		t.Fatalf("legacy peer asked %d requests it cannot read, want 1 (then whole segments)", n)
	}
	if a.rep.partsOf("b") != partsNo {
		t.Fatal("b not marked as pulled whole")
	}
	likeOn(t, s, b, "bob", 20)
	a.rep.exchange(context.Background(), a.rep.peers["b"])
	if got, want := a.store.Root(), b.store.Root(); got != want {
		t.Fatalf("second pull: a's root %x, b's %x", got, want)
	}
	if n := legacy.asked.Load(); n != 1 {
		t.Fatalf("legacy peer asked %d unreadable requests after being known, want still 1", n)
	}
}

// missing lists the entry hashes of from's store that to's does not hold.
func missing(t *testing.T, to, from *scenarioNode) []uint64 {
	t.Helper()
	held := map[uint64]bool{}
	var out []uint64
	for _, n := range []*scenarioNode{to, from} {
		for seg := range storage.Segments {
			if err := n.store.SegmentHashes(seg, func(_ []byte, _ int, h uint64) {
				if n == to {
					held[h] = true
				} else if !held[h] {
					out = append(out, h)
				}
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// A diff page holds the entries of the parts asked for whose hashes the
// asker did not list, and nothing else.
func TestServeDiffLeavesOutHeld(t *testing.T) {
	s := recoveredTrio(t, nil)
	b := s.nodes["b"]
	likeOn(t, s, b, "alice", 200)
	type ent struct {
		sub  int
		hash uint64
	}
	seg, most := -1, 0
	var ents []ent
	for g := range storage.Segments {
		var es []ent
		if err := b.store.SegmentHashes(g, func(_ []byte, sub int, h uint64) { es = append(es, ent{sub, h}) }); err != nil {
			t.Fatal(err)
		}
		if len(es) > most {
			seg, most, ents = g, len(es), es
		}
	}
	if most < 3 {
		t.Fatalf("fullest segment has %d entries", most)
	}
	count := func(q *DiffRequest) int {
		t.Helper()
		pg, err := DecodeDiffPage(b.rep.servePage(AppendDiffRequest(nil, q)))
		if err != nil {
			t.Fatal(err)
		}
		if pg.Next != nil {
			t.Fatal("one segment's few entries took more than a page")
		}
		return len(pg.Entries) + len(pg.Records) + len(pg.Sketches)
	}
	// Every part, every other entry held: the others come.
	q := &DiffRequest{Segment: seg, Parts: ^uint64(0)}
	for i, e := range ents {
		if i%2 == 0 {
			q.Have = append(q.Have, e.hash)
		}
	}
	if got, want := count(q), len(ents)-len(q.Have); got != want {
		t.Fatalf("%d entries, %d held: got %d, want %d", len(ents), len(q.Have), got, want)
	}
	// One part, nothing held: that part's entries come.
	q = &DiffRequest{Segment: seg, Parts: 1 << ents[0].sub}
	want := 0
	for _, e := range ents {
		if e.sub == ents[0].sub {
			want++
		}
	}
	if got := count(q); got != want {
		t.Fatalf("part %d: got %d entries, want %d", ents[0].sub, got, want)
	}
}

// leftView is a ShardView in which every replica holds every shard, but
// left, which holds none; joiner joins every shard.
type leftView struct{ left, joiner string }

func (v *leftView) Holds(replica string, _ int) bool { return replica != v.left }
func (v *leftView) Joins(replica string, _ int) bool { return replica == v.joiner }

// storedHashes is the set of the entry hashes of n's store.
func storedHashes(t *testing.T, n *scenarioNode) map[uint64]bool {
	t.Helper()
	out := map[uint64]bool{}
	for seg := range storage.Segments {
		if err := n.store.SegmentHashes(seg, func(_ []byte, _ int, h uint64) { out[h] = true }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// joinAfter is joinAfterLeave's deployment: a, b and c converged after
// writing (wrote: how many entries each wrote; byC: the hashes of c's),
// then c left every shard and d, with an empty store and its diff
// requests recorded in asks, joined them all.
type joinAfter struct {
	s     *scenario
	nodes []*scenarioNode // a, b, c
	d     *scenarioNode
	wrote map[string]int
	byC   map[uint64]bool
	asks  *diffAsks
}

// joinAfterLeave builds a joinAfter; arm, if set, adjusts every
// replica's Config.
func joinAfterLeave(t *testing.T, arm func(*Config)) joinAfter {
	t.Helper()
	ctx := context.Background()
	view := &leftView{}
	s := newScenario(t)
	s.tweak = func(c *Config) {
		c.Shards = view
		if arm != nil {
			arm(c)
		}
	}
	s.names = []string{"a", "b", "c"}
	var nodes []*scenarioNode
	for _, name := range s.names {
		nodes = append(nodes, s.open(name))
	}
	s.clock.Advance(2 * scenarioHeartbeat)
	s.heartbeats()
	s.antiEntropy(ctx, nodes)
	wrote := map[string]int{}
	var byC map[uint64]bool
	for i, n := range nodes {
		before := storedHashes(t, n)
		likeOn(t, s, n, "by-"+n.name, 20+10*i)
		after := storedHashes(t, n)
		for h := range before {
			delete(after, h)
		}
		wrote[n.name] = len(after)
		if n.name == "c" {
			byC = after
		}
	}
	s.antiEntropy(ctx, nodes)
	s.antiEntropy(ctx, nodes)
	s.heartbeats() // the writes' deltas go now, before d listens
	for _, n := range nodes[1:] {
		if got, want := n.store.Root(), nodes[0].store.Root(); got != want {
			t.Fatalf("%s's root %x, a's %x: the three did not converge", n.name, got, want)
		}
	}

	view.left, view.joiner = "c", "d"
	s.names = append(s.names, "d")
	asks := &diffAsks{}
	s.tweak = func(c *Config) {
		c.Shards = view
		if arm != nil {
			arm(c)
		}
		if c.Replica.ID() == "d" {
			asks.Transport = c.Transport
			c.Transport = asks
		}
	}
	d := s.open("d")
	s.clock.Advance(2 * scenarioHeartbeat)
	s.heartbeats()
	return joinAfter{s: s, nodes: nodes, d: d, wrote: wrote, byC: byC, asks: asks}
}

// A difference is asked for by name (DiffRequest.For), and the peer
// sends what the asker takes from it and nothing else: its own entries,
// and the state of a replica that left the shard, which only a holder
// can give. a, b and c write and compare until equal; then c leaves
// every shard and d joins them. d pulls from a exactly a's and c's
// entries (not b's, which it would refuse from a), then from b exactly
// b's, and holds everything.
func TestDiffPagesCarryWhatTheAskerTakes(t *testing.T) {
	ctx := context.Background()
	j := joinAfterLeave(t, nil)
	s, d, wrote, byC, asks, nodes := j.s, j.d, j.wrote, j.byC, j.asks, j.nodes
	entries := func() int { return int(testutil.ToFloat64(d.rep.m.aeEntries)) }
	before := entries()
	d.rep.exchange(ctx, d.rep.peers["a"])
	if e := d.rep.peers["a"].lastErr; e != "" {
		t.Fatalf("d's exchange with a: %s", e)
	}
	if got, want := entries()-before, wrote["a"]+wrote["c"]; got != want {
		t.Fatalf("d pulled %d entries from a; a wrote %d and c, which left, %d (b wrote %d)", got, wrote["a"], wrote["c"], wrote["b"])
	}
	// c holds everything; d, only b's entries not.
	if m := missing(t, d, s.nodes["c"]); len(m) != wrote["b"] {
		t.Fatalf("d lacks %d of c's entries after pulling from a, want b's %d", len(m), wrote["b"])
	}
	before = entries()
	asks.mu.Lock()
	asks.have = nil
	asks.mu.Unlock()
	d.rep.exchange(ctx, d.rep.peers["b"])
	if got, want := entries()-before, wrote["b"]; got != want {
		t.Fatalf("d pulled %d entries from b, which wrote %d", got, want)
	}
	// d holds a's entries and c's, and nothing of b's: it tells b of
	// c's only, which b may give it as relays. Of a's b can send
	// nothing, and listing them would only cost bytes.
	asks.mu.Lock()
	defer asks.mu.Unlock()
	if len(asks.have) == 0 {
		t.Fatal("d listed no hash to b: it holds c's entries, which b may give")
	}
	for _, h := range asks.have {
		if !byC[h] {
			t.Fatalf("d listed to b the hash %x of an entry c did not write", h)
		}
	}
	for _, n := range nodes {
		if m := missing(t, d, n); len(m) != 0 {
			t.Fatalf("d lacks %d of %s's entries", len(m), n.name)
		}
	}
}

// diffAsks keeps the hashes a replica's diff requests list (several
// segments are pulled at once).
type diffAsks struct {
	Transport
	mu   sync.Mutex
	have []uint64
}

func (t *diffAsks) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	if q, err := DecodeDiffRequest(data); err == nil {
		t.mu.Lock()
		t.have = append(t.have, q.Have...)
		t.mu.Unlock()
	}
	return t.Transport.Request(ctx, subject, data)
}

// A peer that predates diff requests naming their asker is asked for
// every entry instead, once it answered one with nothing, and not asked
// so again while it runs. (The segments pulled at once when it first
// answers nothing may each have asked it once.)
func TestRepairFallsBackToPlainDiffs(t *testing.T) {
	var legacy *legacyPeer
	s := recoveredTrio(t, func(tr Transport) Transport {
		legacy = &legacyPeer{Transport: tr, unread: predatesNamedDiffs}
		return legacy
	})
	a, b := s.nodes["a"], s.nodes["b"]
	likeOn(t, s, b, "alice", 10)
	a.rep.exchange(context.Background(), a.rep.peers["b"])
	if got, want := a.store.Root(), b.store.Root(); got != want {
		t.Fatalf("a's root %x, b's %x after the pull", got, want)
	}
	first := legacy.asked.Load()
	if first < 1 || first > pullConcurrency {
		t.Fatalf("legacy peer asked %d requests naming the asker, want 1 to %d", first, pullConcurrency)
	}
	likeOn(t, s, b, "bob", 20)
	a.rep.exchange(context.Background(), a.rep.peers["b"])
	if got, want := a.store.Root(), b.store.Root(); got != want {
		t.Fatalf("second pull: a's root %x, b's %x", got, want)
	}
	if n := legacy.asked.Load(); n != first {
		t.Fatalf("legacy peer asked %d requests naming the asker after being known, want still %d", n, first)
	}
}

// Naming an asker gives nothing a request without a name does not: a
// request naming another replica (any process on the NATS account can
// send one, a compromised replica naming its peer) gets a subset of the
// plain answer, the named replica's entries and the sender's.
func TestDiffForAnotherAskerGivesNoMore(t *testing.T) {
	s := recoveredTrio(t, nil)
	a, b, c := s.nodes["a"], s.nodes["b"], s.nodes["c"]
	likeOn(t, s, a, "by-a", 30)
	likeOn(t, s, b, "by-b", 30)
	likeOn(t, s, c, "by-c", 30)
	ctx := context.Background()
	for _, n := range []*scenarioNode{a, b, c} {
		for _, p := range []string{"a", "b", "c"} {
			if p != n.name {
				n.rep.exchange(ctx, n.rep.peers[p])
			}
		}
	}
	page := func(seg int, asker string) map[string]bool {
		t.Helper()
		pg, err := DecodeDiffPage(a.rep.servePage(AppendDiffRequest(nil, &DiffRequest{Segment: seg, For: asker, Parts: ^uint64(0)})))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, e := range pg.Entries {
			out[fmt.Sprintf("v %c %s %s %+v", e.Kind, e.Item, e.Replica, e.PN)] = true
		}
		for _, r := range pg.Records {
			for _, e := range r.Rec.Contributions() {
				out[fmt.Sprintf("r %s %s %s %+v", r.Item, r.User, e.Replica, e.PN)] = true
			}
		}
		return out
	}
	named, checked := 0, 0
	for seg := range storage.Segments {
		plain := page(seg, "")
		for k := range page(seg, "c") {
			named++
			if !plain[k] {
				t.Fatalf("segment %d: a request naming c got %q, which the plain answer has not", seg, k)
			}
			if !strings.Contains(k, " a ") && !strings.Contains(k, " c ") {
				t.Fatalf("segment %d: a request naming c got %q, neither a's nor c's", seg, k)
			}
		}
		checked += len(plain)
	}
	if named == 0 || named >= checked {
		t.Fatalf("named answers held %d entries, plain ones %d: want some, and fewer", named, checked)
	}
}

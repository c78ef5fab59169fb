package replication

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// setView is a ShardView of fixed sets; a replica it does not name holds
// every shard.
type setView map[string]*shard.Set

func (v setView) Holds(replica string, s int) bool {
	set, ok := v[replica]
	return !ok || set.Has(s)
}

func (v setView) Joins(string, int) bool { return false }

// digestMeter counts what one replica's digest requests carry, both ways,
// per peer asked.
type digestMeter struct {
	Transport
	mu    sync.Mutex
	bytes map[string]int // by the peer's digests subject
	asks  map[string]int
}

func (m *digestMeter) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	reply, err := m.Transport.Request(ctx, subject, data)
	if strings.HasSuffix(subject, ".digests") {
		m.mu.Lock()
		m.bytes[subject] += len(data) + len(reply)
		m.asks[subject]++
		m.mu.Unlock()
	}
	return reply, err
}

// take returns the counts so far and starts again from zero.
func (m *digestMeter) take() (bytes, asks map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	bytes, asks = m.bytes, m.asks
	m.bytes, m.asks = map[string]int{}, map[string]int{}
	return bytes, asks
}

// oldDigests answers digest requests as a replica that predates
// DigestsRequest did: it ignores what the request says and sends every
// digest.
type oldDigests struct{ Transport }

func (o oldDigests) Respond(subject string, h func([]byte) []byte) (func() error, error) {
	if strings.HasSuffix(subject, ".digests") {
		return o.Transport.Respond(subject, func([]byte) []byte { return h(nil) })
	}
	return o.Transport.Respond(subject, h)
}

// shardedScenario opens replicas ids holding the shards view gives them,
// each with a digestMeter (those in old answering digest requests as
// before DigestsRequest), and runs them to recovery.
func shardedScenario(t *testing.T, view ShardView, old map[string]bool, ids ...string) (*scenario, map[string]*digestMeter) {
	t.Helper()
	s := newScenario(t)
	meters := map[string]*digestMeter{}
	s.tweak = func(c *Config) {
		c.Shards = view
		m := &digestMeter{Transport: c.Transport}
		m.take()
		meters[c.Replica.ID()] = m
		c.Transport = m
		if old[c.Replica.ID()] {
			c.Transport = oldDigests{m}
		}
	}
	s.names = ids
	var nodes []*scenarioNode
	for _, id := range ids {
		nodes = append(nodes, s.open(id))
	}
	s.clock.Advance(2 * scenarioHeartbeat) // past the wait for heartbeats
	s.heartbeats()
	s.antiEntropy(context.Background(), nodes)
	for _, n := range nodes {
		if !n.rep.Recovered() {
			t.Fatalf("%s has not recovered", n.name)
		}
	}
	return s, meters
}

// heartbeats has every replica publish a heartbeat and hear everyone's.
func (s *scenario) heartbeats() {
	for _, id := range s.names {
		s.nodes[id].steps.Flush()
	}
	s.net.Deliver()
	for _, id := range s.names {
		s.mergeInbox(context.Background(), s.nodes[id])
	}
}

// likeIn writes likes at replica n, of items of the shards in, each by a
// new user. Nothing is published until the replica's Flush step: the
// replicas differ where the test says.
func likeIn(t *testing.T, rng *rand.Rand, n *scenarioNode, in []int, likes int) {
	t.Helper()
	if len(in) == 0 {
		return
	}
	for i := 0; i < likes; {
		item := fmt.Sprintf("item%d", rng.IntN(1<<20))
		s := shard.Of(item)
		if !containsInt(in, s) {
			continue
		}
		if _, err := n.replica.Likes().Like(context.Background(), item, fmt.Sprintf("u%d", rng.Uint64())); err != nil {
			t.Fatal(err)
		}
		i++
	}
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (v setView) shared(a, b string) shard.Set { return v[a].And(*v[b]) }

func members(ss shard.Set) []int {
	var out []int
	for s := range shard.Count {
		if ss.Has(s) {
			out = append(out, s)
		}
	}
	return out
}

// A sharded replica compares with a peer exactly the segments of the
// shards both hold: over random layouts, the segments its comparison
// finds differing are those of the shared shards whose digests differ,
// the round pulls those and leaves every other segment as it was, and a
// peer holding none of its shards is not asked anything at all. The same
// holds with a peer that predates DigestsRequest (odd seeds), which
// answers with every digest.
func TestShardedComparisonFindsExactlyTheSharedDifferences(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			// a and b overlap at random; c holds only shards a does not.
			sa, sb, sc := new(shard.Set), new(shard.Set), new(shard.Set)
			for s := range 64 { // the first 64 shards: enough to draw from, quick to fill
				if rng.IntN(2) == 0 {
					sa.Add(s)
				} else {
					sc.Add(s)
				}
				if rng.IntN(3) == 0 {
					sb.Add(s)
				}
			}
			if seed == 0 {
				*sb = *sc // b shares nothing with a either
			}
			view := setView{"a": sa, "b": sb, "c": sc}
			s, meters := shardedScenario(t, view, map[string]bool{"b": seed%2 == 1}, "a", "b", "c")
			a, b := s.nodes["a"], s.nodes["b"]
			// Both write in their own shards, shared or not.
			likeIn(t, rng, a, members(*sa), 60)
			likeIn(t, rng, b, members(*sb), 60)
			shared := view.shared("a", "b")
			da, db := a.store.Digests(), b.store.Digests()
			want := 0
			for seg := range storage.Segments {
				if shared.Has(storage.SegmentShard(seg)) && da[seg] != db[seg] {
					want++
				}
			}
			meters["a"].take()
			s.antiEntropy(ctx, []*scenarioNode{a}) // the heartbeats of the start are still fresh

			got := -1
			for _, p := range a.rep.Peers() {
				if p.Replica == "b" {
					got = p.DifferingSegments
					if p.Error != "" {
						t.Fatalf("comparison with b failed: %s", p.Error)
					}
				}
			}
			if got != want {
				t.Fatalf("a found %d segments differing from b, want %d (the shared shards' differing segments)", got, want)
			}
			after := a.store.Digests()
			for seg := range storage.Segments {
				sh := storage.SegmentShard(seg)
				switch {
				case shared.Has(sh) && db[seg] != 0 && da[seg] != db[seg] && after[seg] == da[seg]:
					// (b's likes are not a's: what b has there is new to a.)
					t.Errorf("segment %d of shared shard %d differed and was not pulled", seg, sh)
				case !shared.Has(sh) && after[seg] != da[seg]:
					t.Errorf("segment %d of shard %d, not shared with b, changed", seg, sh)
				}
			}
			_, asks := meters["a"].take()
			if n := asks[digestsSubject("c")]; n != 0 {
				t.Errorf("a asked c, which shares no shard with it, for digests %d times", n)
			}
			if n, sharesB := asks[digestsSubject("b")], shared.Len() > 0; (n == 1) != sharesB {
				t.Errorf("a asked b for digests %d times; they share %d shards", n, shared.Len())
			}
			// b pulls a's side too: then every shared segment agrees, and
			// the next comparison finds nothing.
			s.antiEntropy(ctx, []*scenarioNode{b, a})
			da, db = a.store.Digests(), b.store.Digests()
			for seg := range storage.Segments {
				if shared.Has(storage.SegmentShard(seg)) && da[seg] != db[seg] {
					t.Fatalf("segment %d still differs after both pulled", seg)
				}
			}
			for _, p := range a.rep.Peers() {
				if p.DifferingSegments != 0 || p.Error != "" {
					t.Fatalf("a still differs from %s in %d segments (%q)", p.Replica, p.DifferingSegments, p.Error)
				}
			}
		})
	}
}

// Sharded, the digest bytes of an anti-entropy round grow with the
// segments each pair of replicas shares, not with the pairs: over the
// transport, a pair sharing no shard exchanges nothing, and a pair
// sharing k shards exchanges its request (the shards and a summary) and
// either a short "equal" or the 8-byte digests of its 4k segments; once
// everything agrees, only the requests and "equal" answers go.
func TestShardedDigestBytesFollowSharedSegments(t *testing.T) {
	ctx := context.Background()
	var ids []string
	var maps shard.Maps
	// One copy in us: its replicas share only the global shard, which
	// every replica holds.
	for region, copies := range map[string]int{"us": 1, "eu": 2} {
		var members []string
		for i := 1; i <= 6; i++ {
			members = append(members, fmt.Sprintf("%s-%d", region, i))
		}
		m, err := shard.Assign(region, members, copies)
		if err != nil {
			t.Fatal(err)
		}
		maps = append(maps, m)
		ids = append(ids, members...)
	}
	s, meters := shardedScenario(t, maps, nil, ids...)
	var nodes []*scenarioNode
	for _, id := range ids {
		nodes = append(nodes, s.nodes[id])
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 600 {
		item := fmt.Sprintf("item%d", i)
		var holders []string
		for _, m := range maps {
			holders = append(holders, m.Holders(shard.Of(item))...)
		}
		if _, err := s.nodes[holders[rng.IntN(len(holders))]].replica.Likes().Like(ctx, item, fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	keeps := func(id string) shard.Set {
		for _, m := range maps {
			if slices.Contains(m.Replicas(), id) {
				return m.Keeps(id)
			}
		}
		return shard.All()
	}
	shared := func(a, b string) shard.Set { return keeps(a).And(keeps(b)) }
	eqLen := func(id string) int { return len(AppendShardDigests(nil, &ShardDigests{Replica: id, Equal: true})) }
	fullLen := func(id string, ss shard.Set) int {
		return len(AppendShardDigests(nil, &ShardDigests{Replica: id, Digests: make([]uint64, ss.Len()*storage.SegmentsPerShard)}))
	}
	reqLen := func(ss shard.Set) int { return len(AppendDigestsRequest(nil, &DigestsRequest{Shards: ss})) }
	oldPair := len(AppendDigests(nil, "us-1", make([]uint64, storage.Segments)))

	for _, m := range meters {
		m.take()
	}
	s.antiEntropy(ctx, nodes) // every replica pulls what its peers wrote
	var total, sharing, sharedSegs, fulls int
	for _, a := range ids {
		bytes, asks := meters[a].take()
		for _, b := range ids {
			if a == b {
				continue
			}
			ss := shared(a, b)
			got, n := bytes[digestsSubject(b)], asks[digestsSubject(b)]
			if ss.Len() == 0 {
				if n != 0 || got != 0 {
					t.Errorf("%s asked %s, which shares no shard with it: %d requests, %d bytes", a, b, n, got)
				}
				continue
			}
			sharing++
			sharedSegs += ss.Len() * storage.SegmentsPerShard
			equal, full := reqLen(ss)+eqLen(b), reqLen(ss)+fullLen(b, ss)
			if n != 1 || got != equal && got != full {
				t.Errorf("%s and %s share %d shards: %d requests, %d bytes, want 1 of %d (equal) or %d (digests)", a, b, ss.Len(), n, got, equal, full)
			}
			if got == full {
				fulls++
			}
			total += got
		}
	}
	pairs := len(ids) * (len(ids) - 1)
	t.Logf("round with differences: %d bytes of digest exchanges over %d of %d pairs (%d with digests) sharing %d segments; every digest to every peer would be %d",
		total, sharing, pairs, fulls, sharedSegs, pairs*oldPair)
	if fulls == 0 {
		t.Fatal("the layout does not test it: no pair sent digests")
	}
	// 8 bytes a shared segment, and per pair a header, the summary and
	// the shards as runs (at most 4 bytes a shared shard: 4 segments'
	// digests are 32).
	if limit := 8*sharedSegs + sharing*24 + sharedSegs/storage.SegmentsPerShard*4; total > limit {
		t.Errorf("%d digest bytes for %d shared segments, more than %d", total, sharedSegs, limit)
	}

	// Converged: summaries only.
	s.antiEntropy(ctx, nodes)
	for _, n := range nodes {
		for _, p := range n.rep.Peers() {
			if p.DifferingSegments != 0 || p.Error != "" {
				t.Fatalf("%s differs from %s in %d segments (%q)", n.name, p.Replica, p.DifferingSegments, p.Error)
			}
		}
	}
	for _, m := range meters {
		m.take()
	}
	s.antiEntropy(ctx, nodes)
	idle := 0
	for _, a := range ids {
		bytes, _ := meters[a].take()
		for _, b := range ids {
			if ss := shared(a, b); a != b && ss.Len() > 0 {
				if got, want := bytes[digestsSubject(b)], reqLen(ss)+eqLen(b); got != want {
					t.Errorf("idle, %s and %s exchanged %d digest bytes, want %d (the request and \"equal\")", a, b, got, want)
				}
			}
			idle += bytes[digestsSubject(b)]
		}
	}
	t.Logf("idle round: %d bytes of digest exchanges; every digest to every peer would be %d", idle, pairs*oldPair)
}

// A read's staleness names the peers holding its key's shard, each with
// how long ago it was last heard from, by the replica's clock: what Peers
// says of those peers, and nothing of the others.
func TestStalenessForNamesTheKeysHolders(t *testing.T) {
	var sb, sc shard.Set
	sb.Add(1)
	sc.Add(2)
	s, _ := shardedScenario(t, setView{"b": &sb, "c": &sc}, nil, "a", "b", "c")
	a := s.nodes["a"]
	s.clock.Advance(1500 * time.Millisecond)
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); shard.Of(k) == 1 {
			key = k
		}
	}
	got := a.rep.StalenessFor(key)
	want := map[string]int64{}
	for _, p := range a.rep.Peers() {
		if p.Replica == "b" {
			want["b"] = p.LastHeardAgoMs
		}
	}
	if len(got) != 1 || got["b"] != want["b"] || got["b"] < 1500 {
		t.Fatalf("staleness of %s (shard 1, held by b and not c): %v, want %v (at least 1500 ms)", key, got, want)
	}
}

package replication

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// likeFive has five users like post1 at the first node and waits for every
// node to count them. It returns user u1's record as it was then.
func likeFive(t *testing.T, nodes []*node) *crdt.LikeRecord {
	t.Helper()
	for i := range 5 {
		if _, err := nodes[0].replica.Likes().Like(context.Background(), "post1", fmt.Sprintf("u%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	converged(t, nodes, "post1", 5, 10*time.Second)
	rec, _, err := nodes[1].replica.Likes().Record("post1", "u1")
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// unchanged waits long enough for the forgery to have been merged (a few
// flush and anti-entropy intervals) and checks that every node still
// counts five likes, holds u1's record as before, and knows no new peer.
func unchanged(t *testing.T, nodes []*node, rec *crdt.LikeRecord, peers int) {
	t.Helper()
	time.Sleep(600 * time.Millisecond)
	for _, n := range nodes {
		rd, err := n.replica.Likes().Count("post1")
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := n.replica.Likes().Record("post1", "u1")
		if rd.Value != 5 || rd.Unreconciled != 0 || !got.Equal(rec) {
			t.Fatalf("%s after the forgery: count %d (vector %v, unreconciled %d), u1 %+v (was %+v)",
				n.id, rd.Value, rd.Vector, rd.Unreconciled, got, rec)
		}
		if ps := n.rep.Peers(); len(ps) != peers {
			t.Fatalf("%s knows %d peers, want %d: %+v", n.id, len(ps), peers, ps)
		}
	}
}

func refused(n *node, reason string) float64 {
	return testutil.ToFloat64(n.rep.m.refused.WithLabelValues(reason))
}

// The forged fast-path deltas of issue 12: one from a replica nobody
// configured, one on a real peer's subject (its credentials stolen)
// speaking for another replica, one naming an unknown replica.
func TestForgedDeltaChangesNothing(t *testing.T) {
	nodes, url := startCluster(t, "us", "eu", "ap")
	rec := likeFive(t, nodes)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	forged := func(rc *crdt.LikeRecord) []Record { return []Record{{Item: "post1", User: "u1", Rec: rc}} }
	stranger := &Delta{Replica: "us-9", Region: "us", Incarnation: 1, Seq: 1, SentAtMs: time.Now().UnixMilli(),
		Records: forged(&crdt.LikeRecord{Origin: "eu-1", HLC: rec.HLC + 1, Contrib: crdt.Vector{{Replica: "zz", PN: crdt.PN{P: 1000}}}})}
	// ap-1's credentials can publish as ap-1, but not for eu-1 or us-1.
	relay := &Delta{Replica: "ap-1", Region: "ap", Incarnation: 2, Seq: 1, SentAtMs: time.Now().UnixMilli(),
		Records: forged(&crdt.LikeRecord{Origin: "eu-1", HLC: rec.HLC + 1,
			Contrib: crdt.Vector{{Replica: "eu-1", PN: crdt.PN{N: 1000}}, {Replica: "us-1", PN: crdt.PN{N: 1000}}}})}
	// And a block of u1 in eu-1's and us-1's names: taken, it would take
	// u1's like out of the count.
	for _, origin := range []string{"eu-1", "us-1"} {
		relay.Records = append(relay.Records, Record{Item: region.BlockRecordItem, User: "u1",
			Rec: crdt.FlagRecord(crdt.Flag{Value: crdt.Block{Blocked: true}, HLC: rec.HLC + 1, Origin: origin})})
	}
	unknown := &Delta{Replica: "ap-1", Region: "ap", Incarnation: 2, Seq: 2, SentAtMs: time.Now().UnixMilli(),
		Records: forged(&crdt.LikeRecord{Contrib: crdt.Vector{{Replica: "zz", PN: crdt.PN{P: 1000}}}})}
	for _, d := range []*Delta{stranger, relay, unknown} {
		if err := nc.Publish(deltaSubject(d.Region, d.Replica), AppendDelta(nil, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	unchanged(t, nodes, rec, 2)
	for _, n := range nodes {
		if n.rep.Stale() {
			t.Fatalf("%s reads are approx after the forgery: a stranger became a peer", n.id)
		}
	}
	for _, n := range nodes[:2] { // ap-1 ignores deltas on its own subject
		if refused(n, refusedUnknownSender) != 1 || refused(n, refusedUnknownReplica) != 1 {
			t.Fatalf("%s refused unknown_sender %v, unknown_replica %v; want 1 and 1", n.id,
				refused(n, refusedUnknownSender), refused(n, refusedUnknownReplica))
		}
	}
}

// A forged anti-entropy page: ap-1 is down and an impostor answers its
// requests, claiming us-1's and eu-1's entries are huge and that an unknown
// replica contributed to a like. Nothing of it is merged.
func TestForgedAntiEntropyPageChangesNothing(t *testing.T) {
	nodes, url := startCluster(t, "us", "eu", "ap")
	rec := likeFive(t, nodes)
	nodes[2].close()
	nodes = nodes[:2]

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	digests := make([]uint64, storage.Segments)
	for i := range digests {
		digests[i] = uint64(i) + 1 // differs from everyone's
	}
	var pg Page
	for _, id := range []string{"us-1", "eu-1"} {
		pg.Entries = append(pg.Entries, Entry{Kind: storage.Likes, Item: "post1", Replica: id, PN: crdt.PN{N: 1000}})
	}
	pg.Records = []Record{
		{Item: "post1", User: "u1", Rec: &crdt.LikeRecord{Origin: "us-1", HLC: rec.HLC + 1, Contrib: crdt.Vector{{Replica: "us-1", PN: crdt.PN{N: 1000}}}}},
		{Item: "post1", User: "u2", Rec: &crdt.LikeRecord{Origin: "ap-1", HLC: rec.HLC + 1, Contrib: crdt.Vector{{Replica: "zz", PN: crdt.PN{P: 1000}}}}},
	}
	page := AppendPage(nil, &pg)
	subs := []*nats.Subscription{}
	for subject, reply := range map[string][]byte{digestsSubject("ap-1"): AppendDigests(nil, "ap-1", digests), pageSubject("ap-1"): page} {
		s, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(reply) })
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Every replica has pulled from the impostor at least once.
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, n := range nodes {
			if refused(n, refusedUnknownReplica) == 0 {
				return fmt.Errorf("%s has not pulled the forged page yet", n.id)
			}
		}
		return nil
	})
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
	unchanged(t, nodes, rec, 2)
	for _, n := range nodes {
		if got, _, _ := n.replica.Likes().Record("post1", "u2"); got.Origin != "us-1" || got.Contrib.Get("zz") != (crdt.PN{}) {
			t.Fatalf("%s: u2's record took the forged page: %+v", n.id, got)
		}
	}
}

// Two processes with one replica id: the second to start hears the first
// before its recovery ends, stops, and never acknowledges a write; the
// first goes on.
func TestDuplicateReplicaIDStopsTheLaterProcess(t *testing.T) {
	nodes, url := startCluster(t, "us", "eu")
	second := startNode(t, url, "us", "us-1", t.TempDir(), []string{"us-1", "eu-1"})
	defer second.close()
	testkit.WaitFor(t, 5*time.Second, func() error {
		if !errors.Is(second.replica.Err(), region.ErrIDConflict) {
			return fmt.Errorf("second us-1: Err() = %v", second.replica.Err())
		}
		return nil
	})
	if _, err := second.replica.Counters().Incr(context.Background(), "c", 1, ""); !errors.Is(err, region.ErrIDConflict) && !errors.Is(err, region.ErrNotReady) {
		t.Fatalf("second us-1 accepted a write: %v", err)
	}
	time.Sleep(500 * time.Millisecond) // past the second's recovery wait
	if second.replica.Accepting() {
		t.Fatal("second us-1 accepts writes")
	}
	if _, err := nodes[0].replica.Counters().Incr(context.Background(), "c", 1, ""); err != nil {
		t.Fatalf("first us-1 stopped too: %v", err)
	}
	if err := nodes[0].replica.Err(); err != nil {
		t.Fatal(err)
	}
}

// One replica whose wall clock is 30 s behind the others' follows them;
// the others stay where they are.
func TestClockFollowsThePeersMedian(t *testing.T) {
	s := startNATS(t)
	ids := []string{"us-1", "eu-1", "ap-1"}
	var nodes []*node
	for _, id := range ids {
		var rt func(*region.Config)
		if id == "eu-1" {
			rt = func(c *region.Config) {
				start := time.Now()
				c.Now = func() time.Time { return time.Now().Add(-30 * time.Second) }
				c.Monotonic = func() time.Duration { return time.Since(start) }
			}
		}
		n := startNodeWith(t, s.ClientURL(), id[:2], id, t.TempDir(), ids, rt)
		t.Cleanup(n.close)
		nodes = append(nodes, n)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, n := range nodes {
			corr := n.replica.ClockCorrectionMs()
			want := int64(0)
			if n.id == "eu-1" {
				want = 30_000
			}
			if corr < want-1000 || corr > want+1000 {
				return fmt.Errorf("%s: clock correction %d ms, want about %d", n.id, corr, want)
			}
		}
		return nil
	})
}

// Whose state a message may carry: its sender's, this replica's own (for
// the region to judge), a retired replica's only in a page pulled while an
// empty store recovers; never a live peer's as a relay, and never an
// unknown replica's.
func TestAuthorityRules(t *testing.T) {
	r := &Replicator{self: "us", peers: map[string]*peer{"eu": {id: "eu"}, "ap": {id: "ap"}},
		retired: map[string]bool{"old": true}, m: newMetrics(nil), log: hclog.NewNullLogger()}
	r.storePeerSet()
	for _, c := range []struct {
		owner string
		want  bool
	}{{"eu", true}, {"us", true}, {"old", false}, {"ap", false}, {"zz", false}} {
		if got := r.vetEntry("eu", c.owner); got != c.want {
			t.Errorf("eu relaying %s's entry: %v, want %v", c.owner, got, c.want)
		}
	}
	if got := refused(&node{rep: r}, refusedUnknownReplica); got != 1 {
		t.Errorf("unknown_replica refusals %v, want 1", got)
	}
	rec := &crdt.LikeRecord{Liked: true, HLC: 9, Origin: "ap", Contrib: crdt.Vector{}.Set("ap", crdt.PN{P: 1}).Set("eu", crdt.PN{N: 1}).Set("old", crdt.PN{P: 1})}
	got, ok := r.vetRecord("eu", rec, aePage)
	want := &crdt.LikeRecord{Contrib: crdt.Vector{}.Set("eu", crdt.PN{N: 1})}
	if !ok || !got.(*crdt.LikeRecord).Equal(want) {
		t.Errorf("eu's record: %+v, want %+v", got, want)
	}
	if _, ok := r.vetRecord("eu", &crdt.LikeRecord{Contrib: crdt.Vector{}.Set("zz", crdt.PN{P: 1})}, aePage); ok {
		t.Error("a record naming an unknown replica was kept")
	}

	// The retired id, by how the state came and when.
	for _, c := range []struct {
		fresh, recovered bool
		src              source
		want             bool
	}{
		{fresh: true, recovered: false, src: aePage, want: true}, // an empty store recovering: the only case
		{fresh: true, recovered: false, src: fastPath},
		{fresh: true, recovered: true, src: aePage},
		{fresh: false, recovered: false, src: aePage}, // a restart with data: it has the state
		{fresh: false, recovered: true, src: aePage},
		{fresh: false, recovered: true, src: fastPath},
	} {
		r.fresh = c.fresh
		r.recovered.Store(c.recovered)
		name := fmt.Sprintf("fresh=%v recovered=%v page=%v", c.fresh, c.recovered, c.src == aePage)
		if c.src == aePage {
			if got := r.vetEntry("eu", "old"); got != c.want {
				t.Errorf("%s: retired entry taken %v, want %v", name, got, c.want)
			}
		}
		forged := &crdt.LikeRecord{Liked: true, HLC: 1000, Origin: "old", Contrib: crdt.Vector{}.Set("old", crdt.PN{P: 1000})}
		got, ok := r.vetRecord("eu", forged, c.src)
		if ok != c.want || c.want && !got.(*crdt.LikeRecord).Equal(forged) {
			t.Errorf("%s: retired record kept %v (%+v), want %v", name, ok, got, c.want)
		}
	}
}

// heldBy is a ShardView in which every replica holds every shard but the
// ones it left, and joins those of joining.
type heldBy struct{ left, joining map[string]shard.Set }

func (h heldBy) Holds(replica string, s int) bool {
	l := h.left[replica]
	return !l.Has(s)
}

func (h heldBy) Joins(replica string, s int) bool {
	j := h.joining[replica]
	return j.Has(s)
}

// State of a live peer in a shard it keeps no longer (a drained replica,
// after the move settled) is taken from another replica as a retired
// one's: only in a page pulled while an empty store recovers. Of the
// shards the peer still keeps, a relay of it is left out as ever.
func TestAuthorityOfAPeerThatLeftAShard(t *testing.T) {
	const item, kept = "item3", "other7"
	var left shard.Set
	left.Add(shard.Of(item))
	if shard.Of(kept) == shard.Of(item) {
		t.Fatal("pick two names on two shards")
	}
	r := &Replicator{self: "us", peers: map[string]*peer{"eu": {id: "eu"}, "ap": {id: "ap"}},
		m: newMetrics(nil), log: hclog.NewNullLogger(), cfg: Config{Shards: heldBy{left: map[string]shard.Set{"ap": left}}}}
	r.storePeerSet()
	rec := &crdt.LikeRecord{Liked: true, HLC: 9, Origin: "us", Contrib: crdt.Vector{}.Set("us", crdt.PN{P: 1, N: 1}).Set("ap", crdt.PN{P: 1})}
	for _, c := range []struct {
		fresh, recovered bool
		src              source
		want             bool
	}{
		{fresh: true, recovered: false, src: aePage, want: true},
		{fresh: true, recovered: false, src: fastPath},
		{fresh: true, recovered: true, src: aePage},
		{fresh: false, recovered: false, src: aePage},
	} {
		r.fresh = c.fresh
		r.recovered.Store(c.recovered)
		name := fmt.Sprintf("fresh=%v recovered=%v page=%v", c.fresh, c.recovered, c.src == aePage)
		if c.src == aePage {
			if got := r.vetEntryOf("eu", "ap", item); got != c.want {
				t.Errorf("%s: ap's entry of the shard it left taken %v, want %v", name, got, c.want)
			}
			if r.vetEntryOf("eu", "ap", kept) {
				t.Errorf("%s: ap's entry of a shard it keeps taken from eu", name)
			}
		}
		got, ok := r.vetRecordOf("eu", item, rec, c.src)
		if !ok {
			t.Fatalf("%s: the record was refused whole", name)
		}
		if has := got.(*crdt.LikeRecord).Contrib.Get("ap") != (crdt.PN{}); has != c.want {
			t.Errorf("%s: ap's contribution kept %v, want %v", name, has, c.want)
		}
		got, _ = r.vetRecordOf("eu", kept, rec, c.src)
		if got.(*crdt.LikeRecord).Contrib.Get("ap") != (crdt.PN{}) {
			t.Errorf("%s: ap's contribution of a shard it keeps taken from eu", name)
		}
	}
}

// A replica joining a shard in a move takes, from the anti-entropy pages
// of that shard, the state of a peer that left it and of a retired
// replica (nobody else can give it that state), though it has recovered
// and its store is not empty; on the fast path, or of a shard it is not
// joining, it leaves such relays out as ever. Without it a second drain
// handed a shard to a replica that never got the first drained replica's
// entries (testdata/shards/drain_twice.txt).
func TestAJoiningReplicaTakesStateOfReplicasThatLeftTheShard(t *testing.T) {
	const item, other = "item3", "other7"
	var s shard.Set
	s.Add(shard.Of(item))
	if shard.Of(other) == shard.Of(item) {
		t.Fatal("pick two names on two shards")
	}
	r := &Replicator{self: "us", peers: map[string]*peer{"eu": {id: "eu"}, "ap": {id: "ap"}},
		retired: map[string]bool{"old": true}, m: newMetrics(nil), log: hclog.NewNullLogger(),
		cfg: Config{Shards: heldBy{left: map[string]shard.Set{"ap": s}, joining: map[string]shard.Set{"us": s}}}}
	r.storePeerSet()
	r.recovered.Store(true)
	rec := &crdt.LikeRecord{Liked: true, HLC: 9, Origin: "eu",
		Contrib: crdt.Vector{}.Set("eu", crdt.PN{P: 1}).Set("ap", crdt.PN{P: 1}).Set("old", crdt.PN{P: 1})}
	for _, owner := range []string{"ap", "old"} {
		if !r.vetEntryOf("eu", owner, item) {
			t.Errorf("%s's entry of the shard being joined left out of a page", owner)
		}
		if owner == "old" && r.vetEntryOf("eu", owner, other) {
			t.Errorf("%s's entry of a shard not being joined taken from a page", owner)
		}
	}
	if r.vetEntryOf("eu", "ap", other) {
		t.Error("ap's entry of a shard it keeps taken from eu")
	}
	for _, c := range []struct {
		name string
		src  source
		want bool
	}{{name: item, src: aePage, want: true}, {name: item, src: fastPath}, {name: other, src: aePage}} {
		got, ok := r.vetRecordOf("eu", c.name, rec, c.src)
		if !ok {
			t.Fatalf("%s page=%v: the record was refused whole", c.name, c.src == aePage)
		}
		contrib := got.(*crdt.LikeRecord).Contrib
		for _, owner := range []string{"ap", "old"} {
			if has := contrib.Get(owner) != (crdt.PN{}); has != c.want {
				t.Errorf("%s page=%v: %s's contribution kept %v, want %v", c.name, c.src == aePage, owner, has, c.want)
			}
		}
	}
}

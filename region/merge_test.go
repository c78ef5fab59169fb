package region

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/storage"
)

// mailbox collects a replica's commits so a test decides when to deliver.
type mailbox struct {
	mu  sync.Mutex // protects out
	out []Changes
}

func (m *mailbox) onCommit(c Changes) {
	m.mu.Lock()
	m.out = append(m.out, c)
	m.mu.Unlock()
}

func (m *mailbox) take() []Changes {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.out
	m.out = nil
	return out
}

// deliver sends everything from's mailbox holds to to, as replication would:
// its own vector entries and its changed records.
func deliver(t *testing.T, from *Replica, box *mailbox, to *Replica) {
	t.Helper()
	for _, c := range box.take() {
		var vecs []VectorMerge
		for _, v := range c.Vectors {
			vecs = append(vecs, VectorMerge{Kind: v.Kind, Item: v.Item, Vec: crdt.Vector{}.Set(from.ID(), v.Own)})
		}
		var recs []RecordMerge
		for _, r := range c.Records {
			recs = append(recs, RecordMerge(r))
		}
		if err := to.Merge(context.Background(), vecs, recs); err != nil {
			t.Fatal(err)
		}
	}
}

// stepClock is a wall clock that advances 1 ms per reading, so every batch
// gets a later HLC than the one before it, whichever replica reads it.
type stepClock struct {
	mu sync.Mutex // protects ms
	ms int64
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ms++
	return time.UnixMilli(1_700_000_000_000 + c.ms)
}

func pair(t *testing.T) (a, b *Replica, boxA, boxB *mailbox) {
	boxA, boxB = &mailbox{}, &mailbox{}
	clock := &stepClock{}
	a, _ = openReplica(t, t.TempDir(), "A", func(c *Config) { c.OnCommit, c.Now, c.LikeLists = boxA.onCommit, clock.now, true })
	b, _ = openReplica(t, t.TempDir(), "B", func(c *Config) { c.OnCommit, c.Now, c.LikeLists = boxB.onCommit, clock.now, true })
	return a, b, boxA, boxB
}

// exchange delivers until neither side has anything left to say.
func exchange(t *testing.T, a, b *Replica, boxA, boxB *mailbox) {
	t.Helper()
	for range 10 {
		deliver(t, a, boxA, b)
		deliver(t, b, boxB, a)
		boxA.mu.Lock()
		idle := len(boxA.out) == 0
		boxA.mu.Unlock()
		boxB.mu.Lock()
		idle = idle && len(boxB.out) == 0
		boxB.mu.Unlock()
		if idle {
			return
		}
	}
	t.Fatal("replicas did not go quiet")
}

// The worked example of crdt/doc.go, through real replicas and stores.
func TestConcurrentLikeReconciles(t *testing.T) {
	a, b, boxA, boxB := pair(t)
	ctx := context.Background()
	if _, err := a.Likes().Like(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Likes().Like(ctx, "post", "u"); err != nil { // unaware of A's like
		t.Fatal(err)
	}
	if got := mustLikes(t, a, "post").Value; got != 1 {
		t.Fatalf("A before exchange: %d", got)
	}
	deliver(t, a, boxA, b) // B merges A's record and vector: both likes count for now
	if rd := mustLikes(t, b, "post"); rd.Value != 1 || rd.Unreconciled != 0 {
		// B wrote later, so B is the winner: it reconciles at once.
		t.Fatalf("B after merge: %+v", rd)
	}
	exchange(t, a, b, boxA, boxB)
	for _, r := range []*Replica{a, b} {
		rd := mustLikes(t, r, "post")
		if rd.Value != 1 || rd.Unreconciled != 0 {
			t.Fatalf("%s converged to %+v, want 1", r.ID(), rd)
		}
	}
	// Then u unlikes at A: the latest action wins everywhere.
	if _, err := a.Likes().Unlike(ctx, "post", "u"); err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, boxA, boxB)
	for _, r := range []*Replica{a, b} {
		if rd := mustLikes(t, r, "post"); rd.Value != 0 {
			t.Fatalf("%s after unlike: %+v", r.ID(), rd)
		}
		if liked, _ := r.Likes().Liked("post", "u"); liked {
			t.Fatalf("%s still says liked", r.ID())
		}
	}
	ra, _, _ := a.Likes().Record("post", "u")
	rb, _, _ := b.Likes().Record("post", "u")
	if !ra.Equal(rb) {
		t.Fatalf("records differ: %+v vs %+v", ra, rb)
	}
}

// A replica that sees a conflicting record it did not win counts both likes
// and marks the item unreconciled (so reads say approx) until the winner's
// fix arrives.
func TestUnreconciledMarksApprox(t *testing.T) {
	a, b, boxA, boxB := pair(t)
	ctx := context.Background()
	_, _ = a.Likes().Like(ctx, "post", "u")
	// B must act in a later millisecond for its HLC to be later: in the
	// same one, the tie-break by replica id would let A win.
	time.Sleep(2 * time.Millisecond)
	_, _ = b.Likes().Like(ctx, "post", "u") // later HLC: B wins
	deliver(t, b, boxB, a)                  // A sees B's winning record; only B may fix it
	rd := mustLikes(t, a, "post")
	if rd.Value != 2 || rd.Unreconciled != 1 {
		t.Fatalf("A before the fix: %+v, want count 2 with 1 unreconciled", rd)
	}
	exchange(t, a, b, boxA, boxB)
	for _, r := range []*Replica{a, b} {
		if rd := mustLikes(t, r, "post"); rd.Value != 1 || rd.Unreconciled != 0 {
			t.Fatalf("%s after exchange: %+v", r.ID(), rd)
		}
	}
}

func TestOwnEntryRecoveredFromPeer(t *testing.T) {
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.HoldWrites = true })
	peerView := crdt.Vector{}.Set("A", crdt.PN{P: 7}).Set("B", crdt.PN{P: 2, N: 1})
	// Recovery: writes are held, and a peer's view of our own entry is
	// the repair of a lost or old store.
	if err := a.Merge(context.Background(), []VectorMerge{{Kind: storage.Counters, Item: "c", Vec: peerView}}, nil); err != nil {
		t.Fatal(err)
	}
	a.AcceptWrites()
	res, err := a.Counters().Incr(context.Background(), "c", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	// The new increment lands on top of the recovered entry, not under it.
	if res.Value != 9 {
		t.Fatalf("value %d, want 9 (7 recovered + 1 new + 2 - 1 from B)", res.Value)
	}
	// Merging an older view again changes nothing.
	_ = a.Merge(context.Background(), []VectorMerge{{Kind: storage.Counters, Item: "c", Vec: peerView}}, nil)
	if rd, _ := a.Counters().Get("c"); rd.Value != 9 {
		t.Fatalf("replayed merge moved the value to %d", rd.Value)
	}
}

// Once a replica acknowledges writes it is the only authority on its own
// entries: a peer's higher claim is refused and counted, while the
// peer's own entry in the same message still merges.
func TestOwnEntryNotRaisedByPeerAfterRecovery(t *testing.T) {
	a, _ := openReplica(t, t.TempDir(), "A", nil)
	ctx := context.Background()
	if _, err := a.Counters().Incr(ctx, "c", 3, ""); err != nil {
		t.Fatal(err)
	}
	forged := crdt.Vector{}.Set("A", crdt.PN{N: 1000}).Set("B", crdt.PN{P: 2})
	if err := a.Merge(ctx, []VectorMerge{{Kind: storage.Counters, Item: "c", Vec: forged}}, nil); err != nil {
		t.Fatal(err)
	}
	if rd, _ := a.Counters().Get("c"); rd.Value != 5 || rd.Vector.Get("A") != (crdt.PN{P: 3}) {
		t.Fatalf("after a forged own entry: %+v, want 5 with A = {3 0}", rd)
	}
	if got := testutil.ToFloat64(a.metrics.refusedOwn); got != 1 {
		t.Fatalf("refused own_entry = %v, want 1", got)
	}
}

// The forgery of issue 12: a record claiming this replica is the origin,
// the user does not like the item and some replica contributed 1000. After
// recovery none of it may move the count.
func TestForgedOwnRecordRefused(t *testing.T) {
	a, _ := openReplica(t, t.TempDir(), "A", nil)
	ctx := context.Background()
	for _, u := range []string{"u1", "u2", "u3"} {
		if _, err := a.Likes().Like(ctx, "post", u); err != nil {
			t.Fatal(err)
		}
	}
	before, _, _ := a.Likes().Record("post", "u1")
	forged := &crdt.LikeRecord{Liked: false, HLC: before.HLC + 1000, Origin: "A",
		Contrib: crdt.Vector{}.Set("A", crdt.PN{N: 5})}
	if err := a.Merge(ctx, nil, []RecordMerge{{Item: "post", User: "u1", Rec: forged}}); err != nil {
		t.Fatal(err)
	}
	rd := mustLikes(t, a, "post")
	after, _, _ := a.Likes().Record("post", "u1")
	if rd.Value != 3 || rd.Unreconciled != 0 || !after.Equal(before) {
		t.Fatalf("after the forged record: count %+v, record %+v (was %+v)", rd, after, before)
	}
	if got := testutil.ToFloat64(a.metrics.refusedOwn); got != 1 {
		t.Fatalf("refused own_entry = %v, want 1", got)
	}
}

// A record stamped far ahead of the clock is not adopted, so it cannot
// revert an acknowledged unlike; once the clock is within the bound the
// same record merges.
func TestFutureStampQuarantined(t *testing.T) {
	clock := &stepClock{}
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.Now = clock.now })
	ctx := context.Background()
	if _, err := a.Likes().Unlike(ctx, "post9", "alice"); err != nil {
		t.Fatal(err)
	}
	year := int64(365 * 24 * 3600 * 1000)
	future := &crdt.LikeRecord{Liked: true, HLC: crdt.MakeHLC(clock.now().UnixMilli()+year, 0), Origin: "B",
		Contrib: crdt.Vector{}.Set("B", crdt.PN{P: 1})}
	if err := a.Merge(ctx, nil, []RecordMerge{{Item: "post9", User: "alice", Rec: future}}); err != nil {
		t.Fatal(err)
	}
	if liked, _ := a.Likes().Liked("post9", "alice"); liked {
		t.Fatal("a record stamped a year ahead reverted the acknowledged unlike")
	}
	if got := testutil.ToFloat64(a.metrics.refusedFuture); got != 1 {
		t.Fatalf("refused future_stamp = %v, want 1", got)
	}
	// A later local action is stamped by the wall clock, not the future.
	res, err := a.Likes().Like(ctx, "post9", "bob")
	if err != nil || !res.Changed {
		t.Fatal(res, err)
	}
	rec, _, _ := a.Likes().Record("post9", "bob")
	if rec.HLC.WallMs() > clock.now().UnixMilli()+1000 {
		t.Fatalf("local stamp %v follows the refused future stamp", rec.HLC)
	}
	// Within the bound a remote stamp ahead of us is fine (clock skew).
	soon := future.Clone()
	soon.HLC = crdt.MakeHLC(clock.now().UnixMilli()+30_000, 0)
	if err := a.Merge(ctx, nil, []RecordMerge{{Item: "post9", User: "alice", Rec: soon}}); err != nil {
		t.Fatal(err)
	}
	if liked, _ := a.Likes().Liked("post9", "alice"); !liked {
		t.Fatal("a record 30 s ahead (within the drift bound) was refused")
	}
}

// Entries past 2^62 (MaxEntry) are structurally impossible and never merged.
func TestEntryPastCapRefused(t *testing.T) {
	a, _ := openReplica(t, t.TempDir(), "A", nil)
	ctx := context.Background()
	huge := crdt.Vector{}.Set("B", crdt.PN{P: MaxEntry + 1})
	_ = a.Merge(ctx, []VectorMerge{{Kind: storage.Counters, Item: "c", Vec: huge}}, nil)
	rec := &crdt.LikeRecord{Liked: true, HLC: 5, Origin: "B", Contrib: huge}
	_ = a.Merge(ctx, nil, []RecordMerge{{Item: "post", User: "u", Rec: rec}})
	if rd, _ := a.Counters().Get("c"); rd.Value != 0 {
		t.Fatalf("counter after an entry past the cap: %+v", rd)
	}
	if _, ok, _ := a.Likes().Record("post", "u"); ok {
		t.Fatal("a record with a contribution past the cap was merged")
	}
	if got := testutil.ToFloat64(a.metrics.refusedCap); got != 2 {
		t.Fatalf("refused entry_cap = %v, want 2", got)
	}
}

// A replica whose clock ran an hour ahead and was set right: the stored
// clock is reported, new stamps follow the wall clock, and an action on a
// record stamped ahead still wins over it.
func TestStoredClockAheadNotFollowed(t *testing.T) {
	dir := t.TempDir()
	real := time.UnixMilli(1_700_000_000_000)
	ahead, closeA := openReplica(t, dir, "A", func(c *Config) { c.Now = func() time.Time { return real.Add(time.Hour) } })
	ctx := context.Background()
	if _, err := ahead.Likes().Like(ctx, "post", "alice"); err != nil {
		t.Fatal(err)
	}
	closeA()
	a, _ := openReplica(t, dir, "A", func(c *Config) { c.Now = func() time.Time { return real } })
	if got := a.ClockAheadMs(); got < 3_500_000 {
		t.Fatalf("ClockAheadMs = %d, want about an hour", got)
	}
	if _, err := a.Likes().Like(ctx, "post", "bob"); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := a.Likes().Record("post", "bob"); rec.HLC.WallMs() != real.UnixMilli() {
		t.Fatalf("new stamp %v follows the stored clock, want the wall clock %d", rec.HLC, real.UnixMilli())
	}
	before, _, _ := a.Likes().Record("post", "alice")
	if _, err := a.Likes().Unlike(ctx, "post", "alice"); err != nil {
		t.Fatal(err)
	}
	after, _, _ := a.Likes().Record("post", "alice")
	if after.Liked || after.HLC <= before.HLC {
		t.Fatalf("unlike on a record stamped ahead: %+v (was %+v): it would lose to the old stamp", after, before)
	}
}

// During recovery a replica does not reconcile: its own entries are not
// all back, and a change to its own vector entry made from a stale base
// would be swallowed by the recovered value (max). Accepting writes runs
// the pass it put off. (Found by the chaos suite: a wiped replica ended
// with its vector entry one below its records.)
func TestReconciliationWaitsForRecovery(t *testing.T) {
	a, _ := openReplica(t, t.TempDir(), "A", func(c *Config) { c.HoldWrites = true })
	ctx := context.Background()
	// A's own record, as a peer kept it: A was the last to act (like),
	// but the contribution that made it count is not here yet.
	rec := &crdt.LikeRecord{Liked: true, HLC: 5, Origin: "A", Contrib: crdt.Vector{}.Set("A", crdt.PN{P: 1, N: 1})}
	if err := a.Merge(ctx, nil, []RecordMerge{{Item: "post", User: "u", Rec: rec}}); err != nil {
		t.Fatal(err)
	}
	// Then A's own vector entry, as the peers last saw it.
	own := crdt.Vector{}.Set("A", crdt.PN{P: 1, N: 1})
	if err := a.Merge(ctx, []VectorMerge{{Kind: storage.Likes, Item: "post", Vec: own}}, nil); err != nil {
		t.Fatal(err)
	}
	if rd := mustLikes(t, a, "post"); rd.Value != 0 || rd.Unreconciled != 1 {
		t.Fatalf("while recovering: %+v, want 0 with the record left unreconciled", rd)
	}
	a.AcceptWrites()
	testkit.WaitFor(t, 5*time.Second, func() error {
		if rd := mustLikes(t, a, "post"); rd.Value != 1 || rd.Unreconciled != 0 || rd.Vector.Get("A") != (crdt.PN{P: 2, N: 1}) {
			return fmt.Errorf("after recovery: %+v, want 1 with A = {2 1}", rd)
		}
		return nil
	})
	got, _, _ := a.Likes().Record("post", "u")
	if got.Excess() != 0 || got.Contrib.Get("A") != (crdt.PN{P: 2, N: 1}) {
		t.Fatalf("record after recovery: %+v", got)
	}
}

package region

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
	"github.com/tally-dev/tally/storage"
)

// fakeSeq is a sequencer computable by hand: numbers from next on, as many
// as avail allows; avail models a lease that can run out or be fenced off.
type fakeSeq struct {
	mu      sync.Mutex
	next    uint64
	avail   uint64
	taken   uint64 // numbers handed out
	durable uint64 // numbers committed, as told by Durable
}

func (f *fakeSeq) Take(n uint64) (uint64, uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := min(n, f.avail)
	if k == 0 {
		return 0, 0, false
	}
	s := f.next
	f.next += k
	f.avail -= k
	f.taken += k
	return s, s + k, true
}

func (f *fakeSeq) Snapshot() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Appendf(nil, "next=%d", f.next)
}

func (f *fakeSeq) Durable() {
	f.mu.Lock()
	f.durable = f.taken
	f.mu.Unlock()
}

func (f *fakeSeq) give(n uint64) {
	f.mu.Lock()
	f.avail += n
	f.mu.Unlock()
}

// claimsOf lists the replica's claim intents as "n:item/user".
func claimsOf(t *testing.T, r *Replica) []string {
	t.Helper()
	var out []string
	if err := r.Numbers().Claims("likes", func(n uint64, l storage.CountedLike) bool {
		out = append(out, fmt.Sprintf("%d:%s/%s", n, l.Item, l.User))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// finalize tells r the ranks of numbers [start, used): number p has rank
// base + p - start + 1, as the allocator would once every block below is
// closed.
func finalize(t *testing.T, r *Replica, start, used, base uint64) {
	t.Helper()
	if err := r.Numbers().Finalize(context.Background(), "likes", []FinalBlock{{Start: start, Used: used, Base: base}}); err != nil {
		t.Fatal(err)
	}
}

func numberingConfig(seq Sequencer, claimed chan<- struct{}) func(*Config) {
	return func(c *Config) {
		c.Sequences = []*Numbering{{
			Sequence:  "likes",
			Seq:       seq,
			Milestone: func(n uint64) bool { return n%5 == 0 },
			OnClaim: func() {
				select {
				case claimed <- struct{}{}:
				default:
				}
			},
		}}
	}
}

func TestCountedLikesAreNumberedInline(t *testing.T) {
	seq := &fakeSeq{next: 1, avail: 100}
	claimed := make(chan struct{}, 1)
	r, _ := openReplica(t, t.TempDir(), "a", numberingConfig(seq, claimed))
	ctx := context.Background()
	for i := 1; i <= 7; i++ {
		if _, err := r.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// No number: a repeat like, an unlike, and a re-like (it counts
	// again, but only a user's first like of an item takes a number).
	for _, op := range []Op{{Kind: OpLike, Item: "post", User: "u1"}, {Kind: OpUnlike, Item: "post", User: "u2"}, {Kind: OpLike, Item: "post", User: "u2"}} {
		if _, err := r.Do(ctx, []Op{op}); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Numbers().Numbered("likes"); got != 7 {
		t.Fatalf("numbered %d likes, want 7 (the first likes only)", got)
	}
	if c := mustLikes(t, r, "post").Value; c != 7 {
		t.Fatalf("count %d, want 7", c)
	}
	// One user toggling like/unlike in one batch takes no number at all.
	var toggles []Op
	for i := range 5000 {
		kind := OpUnlike
		if i%2 == 1 {
			kind = OpLike
		}
		toggles = append(toggles, Op{Kind: kind, Item: "post", User: "u3"})
	}
	if _, err := r.Do(ctx, toggles); err != nil {
		t.Fatal(err)
	}
	if got := r.Numbers().Numbered("likes"); got != 7 {
		t.Fatalf("numbered %d after 5,000 toggles of one user, want still 7", got)
	}
	// A new user's like does: the sequence moves by one.
	if _, err := r.Likes().Like(ctx, "post", "u8"); err != nil {
		t.Fatal(err)
	}
	if seq.durable != 8 || seq.next != 9 {
		t.Fatalf("sequencer durable %d next %d, want 8 and 9", seq.durable, seq.next)
	}
	// A number is not a rank: nothing is claimed before the ranks are
	// known, however many likes there are.
	if c := claimsOf(t, r); len(c) != 0 {
		t.Fatalf("claims before the ranks are known: %v", c)
	}
	finalize(t, r, 1, 9, 0)
	if got, want := fmt.Sprint(claimsOf(t, r)), "[5:post/u5]"; got != want {
		t.Fatalf("claims %s, want %s", got, want)
	}
	select {
	case <-claimed:
	default:
		t.Fatal("OnClaim not called")
	}
	snap, err := NumberingSnapshot(r.store, "likes")
	if err != nil || string(snap) != "next=9" {
		t.Fatalf("stored snapshot %q %v, want next=9", snap, err)
	}
	if err := r.Numbers().SettleClaim("likes", 5); err != nil {
		t.Fatal(err)
	}
	if c := claimsOf(t, r); len(c) != 0 {
		t.Fatalf("claims after settle: %v", c)
	}
}

// TestUnnumberedLikesQueueAndDrainInOrder: with no numbers usable, likes
// are still acknowledged and counted; they queue durably across a restart
// and are numbered first, in order, when numbers come back.
func TestUnnumberedLikesQueueAndDrainInOrder(t *testing.T) {
	dir := t.TempDir()
	seq := &fakeSeq{next: 1, avail: 2}
	claimed := make(chan struct{}, 1)
	r, closeFn := openReplica(t, dir, "a", numberingConfig(seq, claimed))
	ctx := context.Background()
	for i := 1; i <= 6; i++ {
		res, err := r.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i))
		if err != nil || !res.Changed {
			t.Fatalf("like %d while unnumbered: %+v %v", i, res, err)
		}
	}
	if got := mustLikes(t, r, "post").Value; got != 6 {
		t.Fatalf("count %d, want 6: numbering must not stand in the like's way", got)
	}
	if r.Numbers().Unnumbered("likes") != 4 || r.Numbers().Numbered("likes") != 2 {
		t.Fatalf("unnumbered %d numbered %d, want 4 and 2", r.Numbers().Unnumbered("likes"), r.Numbers().Numbered("likes"))
	}
	closeFn()

	// Restart: the queue is durable.
	r, _ = openReplica(t, dir, "a", numberingConfig(seq, claimed))
	if r.Numbers().Unnumbered("likes") != 4 {
		t.Fatalf("unnumbered after restart %d, want 4", r.Numbers().Unnumbered("likes"))
	}
	// A new like while the queue waits goes behind it.
	if _, err := r.Likes().Like(ctx, "other", "u7"); err != nil {
		t.Fatal(err)
	}
	seq.give(100)
	r.Numbers().Ready()
	testkit.WaitFor(t, 10*time.Second, func() error { return numbered(r) })
	finalize(t, r, 1, 8, 0)
	// Numbers 3..7 went to u3..u6 then u7, so milestone 5 is u5's.
	if got, want := fmt.Sprint(claimsOf(t, r)), "[5:post/u5]"; got != want {
		t.Fatalf("claims %s, want %s", got, want)
	}
	if seq.next != 8 || seq.durable != 7 {
		t.Fatalf("sequencer next %d durable %d, want 8 and 7", seq.next, seq.durable)
	}
}

// TestDrainSpansManyCommits: a long queue drains in bounded batches.
func TestDrainSpansManyCommits(t *testing.T) {
	seq := &fakeSeq{next: 1}
	claimed := make(chan struct{}, 1)
	r, _ := openReplica(t, t.TempDir(), "a", numberingConfig(seq, claimed))
	ctx := context.Background()
	const n = drainBatch*2 + 10
	ops := make([]Op, 0, 1000)
	for i := 0; i < n; i++ {
		ops = append(ops, Op{Kind: OpLike, Item: "hot", User: fmt.Sprintf("u%d", i)})
		if len(ops) == cap(ops) || i == n-1 {
			if _, err := r.Do(ctx, ops); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	if r.Numbers().Unnumbered("likes") != n {
		t.Fatalf("unnumbered %d, want %d", r.Numbers().Unnumbered("likes"), n)
	}
	seq.give(n)
	r.Numbers().Ready()
	testkit.WaitFor(t, 10*time.Second, func() error { return numbered(r) })
	finalize(t, r, 1, n+1, 0)
	if got := len(claimsOf(t, r)); got != n/5 {
		t.Fatalf("%d claims, want %d", got, n/5)
	}
}

// TestRestartAsksForNumbers: likes queued before a restart are numbered
// after it without any new like to set the writer going.
func TestRestartAsksForNumbers(t *testing.T) {
	dir := t.TempDir()
	seq := &fakeSeq{next: 1}
	claimed := make(chan struct{}, 1)
	r, closeFn := openReplica(t, dir, "a", numberingConfig(seq, claimed))
	for i := 0; i < 3; i++ {
		if _, err := r.Likes().Like(context.Background(), "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	closeFn()
	seq.give(10)
	r, _ = openReplica(t, dir, "a", numberingConfig(seq, claimed))
	testkit.WaitFor(t, 10*time.Second, func() error { return numbered(r) })
	if r.Numbers().Numbered("likes") != 3 {
		t.Fatalf("numbered %d, want 3", r.Numbers().Numbered("likes"))
	}
}

// numbered reports whether every counted like of r has its number.
func numbered(r *Replica) error {
	if n := r.Numbers().Unnumbered("likes"); n != 0 {
		return fmt.Errorf("%d likes unnumbered", n)
	}
	return nil
}

// Ranks, not numbers, decide milestones: with 100 numbers below used by
// others or left as holes (Base 40 of them used), this replica's numbers
// 101.. have ranks 41..; rank 45, a milestone, is the fifth like here.
// The block's likes are forgotten once taken, and taking it again claims
// nothing new.
func TestMilestonesGoByRank(t *testing.T) {
	seq := &fakeSeq{next: 101, avail: 100}
	claimed := make(chan struct{}, 1)
	r, _ := openReplica(t, t.TempDir(), "a", numberingConfig(seq, claimed))
	ctx := context.Background()
	for i := 1; i <= 8; i++ {
		if _, err := r.Likes().Like(ctx, "post", fmt.Sprintf("u%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := r.Numbers().PendingClaims("likes"); err != nil || n != 0 {
		t.Fatalf("pending claims %d %v before the ranks are known, want 0", n, err)
	}
	finalize(t, r, 101, 109, 40)
	if got, want := fmt.Sprint(claimsOf(t, r)), "[45:post/u5]"; got != want {
		t.Fatalf("claims %s, want %s", got, want)
	}
	if n, err := r.Numbers().PendingClaims("likes"); err != nil || n != 1 {
		t.Fatalf("pending claims %d %v, want 1", n, err)
	}
	if _, _, ok, _ := r.store.Numbered("likes", 105); ok {
		t.Fatal("the block's likes are still recorded after its ranks were taken")
	}
	if err := r.Numbers().SettleClaim("likes", 45); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Numbers().PendingClaims("likes"); err != nil || n != 0 {
		t.Fatalf("pending claims %d %v after settling, want 0", n, err)
	}
	finalize(t, r, 101, 109, 40)
	if c := claimsOf(t, r); len(c) != 0 {
		t.Fatalf("taking a block again claimed %v", c)
	}
}

// Several sequences number side by side: the global likes sequence, a
// per-item sequence that numbers only one item's likes, and a numbered
// counter whose increments take one number per unit, split over blocks
// when a block runs out, the rest queued until numbers come back.
func TestItemAndCounterSequences(t *testing.T) {
	dir := t.TempDir()
	all, video, search := &fakeSeq{next: 1, avail: 100}, &fakeSeq{next: 1, avail: 100}, &fakeSeq{next: 1, avail: 10}
	cfg := func(c *Config) {
		c.Sequences = []*Numbering{
			{Sequence: "likes", Seq: all, Milestone: func(n uint64) bool { return n%5 == 0 }},
			{Sequence: "launch", Seq: video, Match: func(k string) bool { return k == "video:launch" },
				Milestone: func(n uint64) bool { return n == 3 }},
			{Sequence: "search", Counts: CountIncrements, Seq: search, Match: func(k string) bool { return strings.HasPrefix(k, "search:") },
				Milestone: func(n uint64) bool { return n%4 == 0 },
				Next:      func(n uint64) (uint64, bool) { return (n + 3) / 4 * 4, true }},
		}
	}
	r, closeFn := openReplica(t, dir, "a", cfg)
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		for _, item := range []string{"video:launch", "video:other"} {
			if _, err := r.Likes().Like(ctx, item, fmt.Sprintf("u%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if r.Numbers().Numbered("likes") != 8 || r.Numbers().Numbered("launch") != 4 || r.Numbers().Numbered("search") != 0 {
		t.Fatalf("numbered likes %d launch %d search %d, want 8, 4, 0", r.Numbers().Numbered("likes"), r.Numbers().Numbered("launch"), r.Numbers().Numbered("search"))
	}
	// Increments: 3 units, then 6 (the block of 10 is spent after one of
	// them), a decrement, an unmatched key and an idempotent retry take
	// none.
	for _, op := range []Op{
		{Kind: OpIncr, Item: "search:cats", By: 3, IdemKey: "k1"},
		{Kind: OpIncr, Item: "search:cats", By: 3, IdemKey: "k1"},
		{Kind: OpIncr, Item: "search:dogs", By: -2},
		{Kind: OpIncr, Item: "views:x", By: 50},
		{Kind: OpIncr, Item: "search:dogs", By: 6},
		{Kind: OpIncr, Item: "search:owls", By: 5},
	} {
		if _, err := r.Do(ctx, []Op{op}); err != nil {
			t.Fatal(err)
		}
	}
	if r.Numbers().Numbered("search") != 10 || r.Numbers().Unnumbered("search") != 1 {
		t.Fatalf("search numbered %d queued %d, want 10 numbers and one increment waiting", r.Numbers().Numbered("search"), r.Numbers().Unnumbered("search"))
	}
	closeFn()

	r, _ = openReplica(t, dir, "a", cfg)
	if r.Numbers().Unnumbered("search") != 1 {
		t.Fatalf("queued after restart %d, want 1", r.Numbers().Unnumbered("search"))
	}
	search.give(100)
	r.Numbers().Ready()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := r.Numbers().Unnumbered("search"); n != 0 {
			return fmt.Errorf("%d increments still queued", n)
		}
		return nil
	})
	if search.next != 15 {
		t.Fatalf("search sequence at %d, want 15: 3+6+5 units", search.next)
	}
	// Ranks: numbers 1..14 are ranks 1..14 (no holes).
	if err := r.Numbers().Finalize(ctx, "search", []FinalBlock{{Start: 1, Used: 11, Base: 0}, {Start: 11, Used: 15, Base: 10}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Numbers().Finalize(ctx, "launch", []FinalBlock{{Start: 1, Used: 5, Base: 0}}); err != nil {
		t.Fatal(err)
	}
	got := func(seq string) string {
		var out []string
		if err := r.Numbers().Claims(seq, func(n uint64, l storage.CountedLike) bool {
			out = append(out, fmt.Sprintf("%d:%s/%s", n, l.Item, l.User))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(out)
	}
	// Units 1-3 cats, 4-9 dogs, 10-14 owls (number 10 in the first block,
	// 11-14 drained after the restart).
	if g, want := got("search"), "[4:search:dogs/ 8:search:dogs/ 12:search:owls/]"; g != want {
		t.Fatalf("search claims %s, want %s", g, want)
	}
	if g, want := got("launch"), "[3:video:launch/u3]"; g != want {
		t.Fatalf("launch claims %s, want %s", g, want)
	}
	if g := got("likes"); g != "[]" {
		t.Fatalf("likes claims %s before its ranks are known", g)
	}
	if err := r.Numbers().Finalize(ctx, "nope", []FinalBlock{{Start: 1, Used: 2}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("finalize of an unknown sequence: %v", err)
	}
}

func TestMilestonesIn(t *testing.T) {
	every := func(k uint64) *Numbering {
		return &Numbering{Milestone: func(n uint64) bool { return n%k == 0 }}
	}
	next := func(k uint64) *Numbering {
		c := every(k)
		c.Next = func(n uint64) (uint64, bool) {
			m := (n + k - 1) / k * k
			return m, m >= n // false on overflow
		}
		return c
	}
	collect := func(c *Numbering, a, b uint64) string {
		var out []uint64
		for m := range milestonesIn(c, a, b) {
			out = append(out, m)
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		a, b uint64
		want string
	}{{1, 20, "[7 14]"}, {7, 7, "[7]"}, {8, 13, "[]"}, {5, 4, "[]"}, {1<<64 - 10, 1<<64 - 1, "[18446744073709551607 18446744073709551614]"}} {
		if g := collect(every(7), c.a, c.b); g != c.want {
			t.Errorf("scan [%d,%d] = %s, want %s", c.a, c.b, g, c.want)
		}
		if g := collect(next(7), c.a, c.b); g != c.want {
			t.Errorf("next [%d,%d] = %s, want %s", c.a, c.b, g, c.want)
		}
	}
	if g := collect(next(1), 1<<64-3, 1<<64-1); g != "[18446744073709551613 18446744073709551614 18446744073709551615]" {
		t.Errorf("next at the top = %s", g)
	}
}

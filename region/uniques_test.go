package region

import (
	"context"
	"fmt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// sketchMsg is one page of a replica's own sketch on its way to a peer.
type sketchMsg struct {
	to   int
	m    SketchMerge
	dups int
}

// sketchNet delivers the replicas' sketch pages when and how often the
// test says. The pages in flight wait in one pool per receiving replica.
type sketchNet struct {
	t     *testing.T
	rs    []*Replica
	boxes []*mailbox
	pools [][]*sketchMsg // by the replica each page is on its way to
}

func newSketchNet(t *testing.T, n int, clock *testkit.Clock) *sketchNet {
	net := &sketchNet{t: t, pools: make([][]*sketchMsg, n)}
	for i := range n {
		box := &mailbox{}
		r, _ := openWin(t, t.TempDir(), fmt.Sprintf("r%d", i), winOpts{clock: clock, box: box, nosync: true,
			windows: &WindowConfig{Uniques: DefaultUniqueLevels()}})
		net.rs = append(net.rs, r)
		net.boxes = append(net.boxes, box)
	}
	return net
}

func (n *sketchNet) collect() {
	for i, box := range n.boxes {
		for _, c := range box.take() {
			for j := range n.rs {
				if j == i {
					continue
				}
				for _, s := range c.Sketches {
					n.pools[j] = append(n.pools[j], &sketchMsg{to: j, m: SketchMerge{Kind: s.Kind, Name: s.Name, Replica: n.rs[i].ID(), Page: s.Page, Regs: s.Regs}})
				}
			}
		}
	}
}

// inFlight is the number of pages not yet delivered.
func (n *sketchNet) inFlight() int {
	total := 0
	for _, p := range n.pools {
		total += len(p)
	}
	return total
}

// deliverSome merges up to limit random pages into one random replica,
// keeping a copy of some to deliver again. The replica is that of a page
// drawn from all in flight, and its pages are drawn from its own pool in
// random order: the same draw as shuffling every page in flight and
// taking the first limit for that replica, which cost a pass over every
// page in flight (up to 18,000 here) per delivery, most of the test's
// time under -race.
func (n *sketchNet) deliverSome(rng *rand.Rand, limit int, dupP float64) {
	n.t.Helper()
	n.collect()
	total := n.inFlight()
	if total == 0 {
		return
	}
	to, k := 0, rng.IntN(total)
	for k >= len(n.pools[to]) {
		k -= len(n.pools[to])
		to++
	}
	pool := n.pools[to]
	take := min(limit, len(pool))
	// A partial Fisher-Yates shuffle moves take random pages, in random
	// order, to the end of the pool.
	for i := range take {
		j := rng.IntN(len(pool) - i)
		last := len(pool) - 1 - i
		pool[j], pool[last] = pool[last], pool[j]
	}
	drawn := slices.Clone(pool[len(pool)-take:])
	slices.Reverse(drawn) // in the order drawn
	batch := make([]SketchMerge, 0, take)
	keep := pool[:len(pool)-take]
	for _, m := range drawn {
		batch = append(batch, m.m)
		if m.dups < 2 && rng.Float64() < dupP {
			m.dups++
			keep = append(keep, m)
		}
	}
	n.pools[to] = keep
	if err := n.rs[to].MergeSketches(context.Background(), batch); err != nil {
		n.t.Fatal(err)
	}
}

func mustUniques(t *testing.T, r *Replica, keys ...string) UniqueRead {
	t.Helper()
	u, err := r.Uniques().Read(keys)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Three replicas add overlapping ids, with client times, and exchange their
// own sketch pages in random order, late and duplicated. After the
// exchange every replica's union equals, register for register, the sketch
// one node builds from every id, for the all-time count and for every
// hourly slot; the estimate is within the stated error of the distinct
// count. Before the exchange ends they differ (the check can fail).
func TestUniquesConvergeUnderRandomDelivery(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 16))
			clock := testkit.NewClock(winT0)
			net := newSketchNet(t, 3, clock)
			ref := new(crdt.HLL)
			hourRef := map[int64]*crdt.HLL{}
			distinct := map[string]bool{}
			ctx := context.Background()
			sawDiff := false
			for round := range 60 {
				clock.Advance(time.Duration(rng.IntN(120)) * time.Second)
				i := rng.IntN(len(net.rs))
				ids := make([]string, 1+rng.IntN(400))
				for k := range ids {
					ids[k] = fmt.Sprintf("user%d", rng.IntN(12_000)) // overlapping across replicas
				}
				at := clock.Now().UnixMilli() - int64(rng.IntN(240_000))
				if _, err := net.rs[i].Apply(ctx, Op{Kind: OpUniques, Item: "video:1", IDs: ids, At: at}); err != nil {
					t.Fatal(err)
				}
				h := crdt.SlotStart(at, 3600)
				if hourRef[h] == nil {
					hourRef[h] = new(crdt.HLL)
				}
				for _, id := range ids {
					ref.AddID(id)
					hourRef[h].AddID(id)
					distinct[id] = true
				}
				net.deliverSome(rng, 1+rng.IntN(30), 0.2)
				if round%10 == 9 {
					for _, r := range net.rs {
						if !mustUniques(t, r, "video:1").Sketch.Equal(ref) {
							sawDiff = true
						}
					}
				}
			}
			if !sawDiff {
				t.Fatal("every replica held the full sketch before the exchange ended: the test checks nothing")
			}
			for i := 0; ; i++ {
				net.collect()
				if net.inFlight() == 0 {
					break
				}
				if i > 100_000 {
					t.Fatal("the replicas did not go quiet")
				}
				net.deliverSome(rng, 1+rng.IntN(30), 0.1)
			}
			n := float64(len(distinct))
			for _, r := range net.rs {
				u := mustUniques(t, r, "video:1")
				if !u.Sketch.Equal(ref) {
					t.Fatalf("%s: union of sketches differs from the sketch of every id", r.ID())
				}
				if len(u.Replicas) != 3 {
					t.Fatalf("%s: read found sketches of %v, want all three replicas", r.ID(), u.Replicas)
				}
				if rel := math.Abs(u.Estimate-n) / n; rel > 5*crdt.HLLStdError {
					t.Fatalf("%s: estimate %.0f for %v distinct ids: relative error %.4f", r.ID(), u.Estimate, n, rel)
				}
				for h, want := range hourRef {
					w, err := r.Uniques().Window([]string{"video:1"}, h*1000, h*1000+3600_000)
					if err != nil {
						t.Fatal(err)
					}
					if w.SlotWidth != time.Hour || !w.Sketch.Equal(want) {
						t.Fatalf("%s: hour %d: slot %v, sketch equal %v", r.ID(), h, w.SlotWidth, w.Sketch.Equal(want))
					}
				}
			}
		})
	}
}

// An add writes only the pages whose registers rose; adding the same ids
// again writes nothing and sends nothing. Sketches survive a restart.
func TestUniquesWriteOnlyRaisedPages(t *testing.T) {
	dir := t.TempDir()
	clock := testkit.NewClock(winT0)
	box := &mailbox{}
	r, closeR := openWin(t, dir, "r0", winOpts{clock: clock, box: box, windows: &WindowConfig{Uniques: []WindowLevel{}}})
	ctx := context.Background()
	ids := make([]string, 3000)
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
	}
	res, err := r.Apply(ctx, Op{Kind: OpUniques, Item: "k", IDs: ids})
	if err != nil || !res.Changed {
		t.Fatalf("first add: %+v %v", res, err)
	}
	ch := box.take()
	pages := 0
	for _, c := range ch {
		pages += len(c.Sketches)
	}
	if pages != crdt.HLLPages {
		t.Fatalf("3000 ids changed %d pages, want all %d", pages, crdt.HLLPages)
	}
	res, err = r.Apply(ctx, Op{Kind: OpUniques, Item: "k", IDs: ids[:100]})
	if err != nil || res.Changed {
		t.Fatalf("repeated ids: %+v %v", res, err)
	}
	for _, c := range box.take() {
		if len(c.Sketches) != 0 {
			t.Fatalf("repeated ids sent %d pages", len(c.Sketches))
		}
	}
	before := mustUniques(t, r, "k")
	if rel := math.Abs(before.Estimate-3000) / 3000; rel > 5*crdt.HLLStdError {
		t.Fatalf("estimate %.1f for 3000", before.Estimate)
	}
	closeR()
	r2, _ := openWin(t, dir, "r0", winOpts{clock: clock, windows: &WindowConfig{Uniques: []WindowLevel{}}})
	if after := mustUniques(t, r2, "k"); !after.Sketch.Equal(before.Sketch) || after.Estimate != before.Estimate {
		t.Fatalf("after restart estimate %.1f, before %.1f", after.Estimate, before.Estimate)
	}
	if _, err := r2.Uniques().Window([]string{"k"}, clock.Now().UnixMilli()-3600_000, clock.Now().UnixMilli()); err == nil {
		t.Fatal("windowed read with unique windows off answered")
	}
}

// Once writes are accepted, a peer cannot raise this replica's own
// sketch; another replica's pages merge.
func TestUniquesOwnSketchProtected(t *testing.T) {
	clock := testkit.NewClock(winT0)
	r, _ := openWin(t, t.TempDir(), "r0", winOpts{clock: clock})
	var regs crdt.HLLPage
	regs[3] = 7
	ctx := context.Background()
	if err := r.MergeSketches(ctx, []SketchMerge{
		{Kind: storage.Uniques, Name: "k", Replica: "r0", Page: 1, Regs: regs},
		{Kind: storage.Uniques, Name: "k", Replica: "r1", Page: 2, Regs: regs},
		{Kind: storage.Uniques, Name: "bad/name", Replica: "r1", Page: 2, Regs: regs},
		{Kind: storage.Uniques, Name: "k", Replica: "r1", Page: 64, Regs: regs},
	}); err != nil {
		t.Fatal(err)
	}
	u := mustUniques(t, r, "k")
	if u.Sketch.Page(1)[3] != 0 || u.Sketch.Page(2)[3] != 7 {
		t.Fatalf("own page raised to %d, peer page %d", u.Sketch.Page(1)[3], u.Sketch.Page(2)[3])
	}
	if len(u.Replicas) != 1 || u.Replicas[0] != "r1" {
		t.Fatalf("replicas %v", u.Replicas)
	}
	if got := testutil.ToFloat64(r.metrics.refusedOwn); got != 1 {
		t.Fatalf("own_entry refusals %v, want 1", got)
	}
}

// Unique-count slots expire by the rule of their name: the sweeper
// deletes them (digests back to what they were), reads skip them and a
// late merge does not bring them back.
func TestUniquesWindowExpiry(t *testing.T) {
	clock := testkit.NewClock(winT0)
	levels := []WindowLevel{{Width: time.Hour, Keep: time.Hour}}
	r, _ := openWin(t, t.TempDir(), "r0", winOpts{clock: clock, windows: &WindowConfig{Uniques: levels}})
	ctx := context.Background()
	empty := r.store.Root()
	if _, err := r.Apply(ctx, Op{Kind: OpUniques, Item: "k", IDs: []string{"a", "b", "c"}}); err != nil {
		t.Fatal(err)
	}
	from, to, err := r.Uniques().Range(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w, err := r.Uniques().Window([]string{"k"}, from, to)
	if err != nil || math.Round(w.Estimate) != 3 {
		t.Fatalf("last hour: %.2f %v", w.Estimate, err)
	}
	bk := crdt.Slot{Key: "k", Width: 3600, Start: crdt.SlotStart(clock.Now().UnixMilli(), 3600), Keep: 3600}
	var page crdt.HLLPage
	page[0] = 1
	clock.Advance(3*time.Hour + 5*time.Minute)
	n, err := r.Windows().Expire(ctx)
	if err != nil || n != 1 {
		t.Fatalf("expired %d slots, %v; want 1", n, err)
	}
	if err := r.MergeSketches(ctx, []SketchMerge{{Kind: storage.UniquesWindows, Name: bk.Name(), Replica: "r1", Page: 0, Regs: page}}); err != nil {
		t.Fatal(err)
	}
	// What is left is the all-time sketch: remove it to compare digests.
	all := mustUniques(t, r, "k")
	if math.Round(all.Estimate) != 3 {
		t.Fatalf("all-time estimate %.2f", all.Estimate)
	}
	tx := r.store.NewBatch()
	if err := tx.DeleteSketch(storage.Uniques, "k"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx.Close()
	if r.store.Root() != empty {
		t.Fatal("digests after expiry differ from an empty store's: a slot page is left")
	}
}

// The own-page cache stays within its byte bound, counts replaced and
// dropped pages, and starts over when full.
func TestPageCacheBytes(t *testing.T) {
	c := newPageCache(10 * (pageEntryBytes + 100))
	enc := make([]byte, 100)
	for i := range 10 {
		c.put(skey{kind: storage.Uniques, name: "k", replica: "r", page: uint8(i)}, enc)
	}
	if len(c.pages) != 10 || c.size != 10*(pageEntryBytes+100) {
		t.Fatalf("10 pages: %d kept, size %d", len(c.pages), c.size)
	}
	c.put(skey{kind: storage.Uniques, name: "k", replica: "r", page: 3}, enc[:50]) // a replacement fits
	c.drop(skey{kind: storage.Uniques, name: "k", replica: "r", page: 4})
	if len(c.pages) != 9 || c.size != 9*(pageEntryBytes+100)-50 {
		t.Fatalf("after replace and drop: %d kept, size %d", len(c.pages), c.size)
	}
	c.put(skey{kind: storage.Uniques, name: "k", replica: "r", page: 20}, enc)
	c.put(skey{kind: storage.Uniques, name: "k", replica: "r", page: 21}, enc) // over the bound: starts over
	if len(c.pages) != 1 || c.size != pageEntryBytes+100 {
		t.Fatalf("after overflow: %d kept, size %d", len(c.pages), c.size)
	}
}

package region

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/tally-dev/tally/internal/base/testkit"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// winT0 is where the window tests' clocks start: not on a second, minute
// or hour boundary.
var winT0 = time.UnixMilli(1_700_000_000_000 + 12_345)

// winOpts is how a window test opens a replica.
type winOpts struct {
	clock   *testkit.Clock
	windows *WindowConfig
	box     *mailbox
	reg     prometheus.Registerer
	nosync  bool // DurabilityNone: many commits, nothing to crash
}

// openWin opens a replica on a real Pebble store in dir. The returned func
// closes replica and store (also done at cleanup).
func openWin(t *testing.T, dir, id string, o winOpts) (*Replica, func()) {
	t.Helper()
	scfg := storage.Config{Dir: dir, RecordFilterBytes: 1 << 20}
	if o.nosync {
		scfg.Durability = storage.DurabilityNone
	}
	return openReplicaStore(t, scfg, id, func(cfg *Config) {
		cfg.Now, cfg.Windows, cfg.Registerer = o.clock.Now, o.windows, o.reg
		if o.box != nil {
			cfg.OnCommit = o.box.onCommit
		}
	})
}

// threeLevels is 1 s kept 3 h, 1 min kept 15 days, 1 h kept forever.
func threeLevels() []WindowLevel {
	return []WindowLevel{
		{Width: time.Second, Keep: 3 * time.Hour},
		{Width: time.Minute, Keep: 15 * 24 * time.Hour},
		{Width: time.Hour},
	}
}

// secModel is the test's reference for slots: the net change of
// every (family, key) per second, the family total ("") included. Every
// level's slot is a sum of it.
type secModel map[storage.Kind]map[string]map[int64]int64

func (m secModel) add(kind storage.Kind, key string, atMs, delta int64) {
	if delta == 0 {
		return
	}
	if m[kind] == nil {
		m[kind] = map[string]map[int64]int64{}
	}
	sec := crdt.SlotStart(atMs, 1)
	for _, k := range []string{key, ""} {
		if m[kind][k] == nil {
			m[kind][k] = map[int64]int64{}
		}
		m[kind][k][sec] += delta
	}
}

// sum is the net change of (kind, key) over the seconds [from, to).
func (m secModel) sum(kind storage.Kind, key string, from, to int64) int64 {
	var s int64
	for sec, d := range m[kind][key] {
		if sec >= from && sec < to {
			s += d
		}
	}
	return s
}

// bySlot folds the model into slots of width: start -> net change.
func (m secModel) bySlot(kind storage.Kind, key string, width int64) map[int64]int64 {
	out := map[int64]int64{}
	for sec, d := range m[kind][key] {
		out[crdt.SlotStart(sec*1000, width)] += d
	}
	return out
}

// keys are the model's keys of kind, "" first.
func (m secModel) keys(kind storage.Kind) []string {
	var out []string
	for k := range m[kind] {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mustSeries(t *testing.T, r *Replica, kind storage.Kind, key string, fromMs, toMs int64, step time.Duration) Window {
	t.Helper()
	w, err := r.Windows().Series(kind, key, fromMs, toMs, step)
	if err != nil {
		t.Fatalf("%s: Series(%s, %q, %d, %d, %v): %v", r.ID(), kind, key, fromMs, toMs, step, err)
	}
	return w
}

// checkSeries reads (kind, key) over [fromMs, toMs) (aligned to step) at
// step and compares every point with the model.
func checkSeries(t *testing.T, r *Replica, m secModel, kind storage.Kind, key string, fromMs, toMs int64, step time.Duration) Window {
	t.Helper()
	w := mustSeries(t, r, kind, key, fromMs, toMs, step)
	st := int64(step / time.Second)
	if w.From.UnixMilli() != fromMs || w.To.UnixMilli() != toMs || w.Width != step {
		t.Fatalf("%s: Series(%s, %q, step %v) spans [%d, %d) width %v; want [%d, %d)", r.ID(), kind, key, step,
			w.From.UnixMilli(), w.To.UnixMilli(), w.Width, fromMs, toMs)
	}
	if want := (toMs - fromMs) / 1000 / st; int64(len(w.Points)) != want {
		t.Fatalf("%s: Series(%s, %q, step %v): %d points, want %d", r.ID(), kind, key, step, len(w.Points), want)
	}
	model := m.bySlot(kind, key, st) // fromMs is a multiple of step
	for i, p := range w.Points {
		s := fromMs/1000 + int64(i)*st
		if p.Start.Unix() != s {
			t.Fatalf("%s: point %d starts at %d, want %d", r.ID(), i, p.Start.Unix(), s)
		}
		if got, want := p.Value(), model[s]; got != want {
			t.Fatalf("%s: Series(%s, %q, step %v) point at %s = %d (%v), model %d", r.ID(), kind, key, step,
				p.Start.UTC().Format(time.TimeOnly), got, p.Vector, want)
		}
	}
	return w
}

// storedLevel reads the stored slots of one level of (kind, key) in
// [from, to) seconds: start -> vector. Slots expired by nowMs are left
// out (gone by rule, swept or not).
func storedLevel(t *testing.T, r *Replica, kind storage.Kind, key string, width, from, to, nowMs int64) map[int64]crdt.Vector {
	t.Helper()
	out := map[int64]crdt.Vector{}
	err := r.store.WindowSeries(kind.Windows(), key, width, from, to, func(b crdt.Slot, v crdt.Vector) {
		if b.Expired(nowMs) {
			return
		}
		if _, dup := out[b.Start]; dup {
			t.Errorf("%s: two slots of %s %q width %d start at %d", r.ID(), kind, key, width, b.Start)
		}
		out[b.Start] = v.Clone()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkLevel compares every slot of one level with the model: each
// level is booked on its own, so each must be exact by itself.
func checkLevel(t *testing.T, r *Replica, m secModel, kind storage.Kind, key string, width, keep, from, to int64) {
	t.Helper()
	got := storedLevel(t, r, kind, key, width, from, to, r.pclock.NowMs())
	model := m.bySlot(kind, key, width)
	starts := map[int64]bool{}
	for s := range got {
		starts[s] = true
	}
	for s := range model {
		if s >= from && s < to {
			starts[s] = true
		}
	}
	for s := range starts {
		v := got[s]
		if want := model[s]; v.Value() != want {
			t.Fatalf("%s: %s %q slot %ds at %s = %d (%v), model %d", r.ID(), kind, key, width,
				time.Unix(s, 0).UTC().Format(time.TimeOnly), v.Value(), v, want)
		}
	}
	// And each carries its level's retention in its name.
	_ = r.store.WindowSeries(kind.Windows(), key, width, from, to, func(b crdt.Slot, _ crdt.Vector) {
		if b.Keep != keep {
			t.Fatalf("%s: slot %q has keep %d, want %d", r.ID(), b.Name(), b.Keep, keep)
		}
	})
}

// randAt is a client time within the bounds around nowMs, or zero (now).
func randAt(rng *rand.Rand, nowMs int64, wc *WindowConfig) int64 {
	past, future := wc.Past.Milliseconds(), wc.Future.Milliseconds()
	switch rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return nowMs - past // the bounds are inclusive
	case 2:
		return nowMs + future
	case 3:
		return nowMs + rng.Int64N(future+1)
	default:
		return nowMs - rng.Int64N(past+1)
	}
}

// Every change of an own entry is booked into every level at the event's
// time, and the family total is the sum over keys: Series at 1 s, 1 min
// and 1 h, WindowOf over random ranges and each stored level agree with a
// model of the events. Later, with the 1 s slots expired, the coarser
// levels still answer exactly.
func TestWindowRollupExact(t *testing.T) {
	clock := testkit.NewClock(winT0)
	wc := &WindowConfig{Rules: []WindowRule{{Levels: threeLevels()}}, Past: 5 * time.Minute, Future: time.Minute}
	r, _ := openWin(t, t.TempDir(), "A", winOpts{clock: clock, windows: wc})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(90, 91))
	m := secModel{}
	liked := map[[2]string]bool{}
	lastAt := map[[2]string]int64{} // the time of the action each state is from
	keyedBy := map[string]int64{}   // idempotency key -> amount applied
	minAt, maxAt := clock.Now().UnixMilli(), clock.Now().UnixMilli()
	for range 250 {
		clock.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
		nowMs := clock.Now().UnixMilli()
		ops := make([]Op, 1+rng.IntN(4))
		for i := range ops {
			op := Op{At: randAt(rng, nowMs, wc)}
			switch rng.IntN(4) {
			case 0:
				op.Kind, op.Item, op.By = OpIncr, []string{"views:1", "views:2", "clicks"}[rng.IntN(3)], int64(rng.IntN(16)-5)
			case 1:
				op.Kind, op.Item, op.IdemKey = OpIncr, "views:1", fmt.Sprintf("req%d", rng.IntN(30))
				op.By = int64(len(op.IdemKey))
				if rng.IntN(10) == 0 {
					op.By++ // a key reused with another amount: refused
				}
			default:
				op.Kind = []OpKind{OpLike, OpUnlike}[rng.IntN(2)]
				op.Item, op.User = []string{"p:1", "p:2", "p:3"}[rng.IntN(3)], fmt.Sprintf("u%d", rng.IntN(8))
			}
			ops[i] = op
		}
		res, err := r.Do(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		for i, op := range ops {
			at := op.At
			if at == 0 {
				at = nowMs
			}
			minAt, maxAt = min(minAt, at), max(maxAt, at)
			switch {
			case op.Kind == OpIncr && op.IdemKey == "":
				if res[i].Err != nil {
					t.Fatalf("%+v: %v", op, res[i].Err)
				}
				m.add(storage.Counters, op.Item, at, op.By)
			case op.Kind == OpIncr:
				by, done := keyedBy[op.IdemKey]
				switch {
				case done && by != op.By:
					if !errors.Is(res[i].Err, ErrIdempotencyMismatch) {
						t.Fatalf("%+v: %v, want ErrIdempotencyMismatch", op, res[i].Err)
					}
				case done:
					if res[i].Err != nil || !res[i].Duplicate {
						t.Fatalf("%+v: %+v, want a duplicate", op, res[i])
					}
				default:
					if res[i].Err != nil || res[i].Duplicate {
						t.Fatalf("%+v: %+v", op, res[i])
					}
					keyedBy[op.IdemKey] = op.By
					m.add(storage.Counters, op.Item, at, op.By)
				}
			default:
				if res[i].Err != nil {
					t.Fatalf("%+v: %v", op, res[i].Err)
				}
				k := [2]string{op.Item, op.User}
				if at < lastAt[k] {
					// Older, by its client's time, than the state it
					// finds: it changes nothing (a tie goes to the
					// larger HLC, this action's).
					if res[i].Liked != liked[k] || res[i].Changed {
						t.Fatalf("%+v: %+v over a state at %d", op, res[i], lastAt[k])
					}
					break
				}
				lastAt[k] = at
				switch want := op.Kind == OpLike; {
				case want && !liked[k]:
					m.add(storage.Likes, op.Item, at, 1)
				case !want && liked[k]:
					m.add(storage.Likes, op.Item, at, -1)
				}
				liked[k] = op.Kind == OpLike
			}
		}
	}

	// Everything booked lies in [from, to), whole hours.
	from := crdt.SlotStart(minAt, 3600) * 1000
	to := (crdt.SlotStart(maxAt, 3600) + 3600) * 1000
	fams := []storage.Kind{storage.Likes, storage.Counters}
	for _, kind := range fams {
		keys := m.keys(kind)
		if len(keys) < 3 || keys[0] != "" {
			t.Fatalf("model of %s has keys %q: the test books too little", kind, keys)
		}
		for _, key := range keys {
			var perStep []Window
			for _, step := range []time.Duration{time.Second, time.Minute, time.Hour} {
				perStep = append(perStep, checkSeries(t, r, m, kind, key, from, to, step))
			}
			for _, l := range []struct{ width, keep int64 }{{1, 3 * 3600}, {60, 15 * 86400}, {3600, 0}} {
				checkLevel(t, r, m, kind, key, l.width, l.keep, from/1000, to/1000)
			}
			if perStep[2].Closed {
				t.Fatalf("%s %q: the current hour's window says closed", kind, key)
			}
			// WindowOf over random ranges, ends not on a second: widened
			// to whole seconds (the finest level covering them).
			for range 40 {
				a := from + rng.Int64N(to-from)
				b := a + 1 + rng.Int64N(to-a)
				w, err := r.Windows().Of(kind, key, a, b)
				if err != nil {
					t.Fatal(err)
				}
				fs, ts := crdt.SlotStart(a, 1), crdt.SlotStart(b-1, 1)+1
				if len(w.Points) != 1 || w.From.Unix() != fs || w.To.Unix() != ts || w.Sum().Value() != w.Points[0].Value() {
					t.Fatalf("WindowOf(%d, %d) = %+v; want one point over [%d, %d)", a, b, w, fs, ts)
				}
				if got, want := w.Points[0].Value(), m.sum(kind, key, fs, ts); got != want {
					t.Fatalf("WindowOf(%s, %q, %d, %d) = %d, model %d", kind, key, a, b, got, want)
				}
			}
		}
		// The family total is the sum over the keys, point by point, as
		// the replica reads them.
		total := mustSeries(t, r, kind, "", from, to, time.Minute)
		sum := make([]int64, len(total.Points))
		for _, key := range keys[1:] {
			for i, p := range mustSeries(t, r, kind, key, from, to, time.Minute).Points {
				sum[i] += p.Value()
			}
		}
		for i, p := range total.Points {
			if p.Value() != sum[i] {
				t.Fatalf("%s total at %v = %d, sum over keys %d", kind, p.Start, p.Value(), sum[i])
			}
		}
	}
	// The all-time counts agree with the slots' sum.
	for _, key := range m.keys(storage.Counters)[1:] {
		if rd, _ := r.Counters().Get(key); rd.Value != m.sum(storage.Counters, key, 0, 1<<40) {
			t.Fatalf("counter %q = %d, slots say %d", key, rd.Value, m.sum(storage.Counters, key, 0, 1<<40))
		}
	}

	// WindowRange: the last 10 minutes are the 600 latest seconds.
	nowMs := clock.Now().UnixMilli()
	if f, e, err := r.Windows().Range(storage.Likes, "p:1", 10*time.Minute); err != nil ||
		e != (crdt.SlotStart(nowMs, 1)+1)*1000 || e-f != 600_000 {
		t.Fatalf("WindowRange(10m) = [%d, %d), %v at now %d", f, e, err, nowMs)
	}

	// Four hours later the 1 s slots are past their retention: reads
	// skip them, the sweep deletes them, and minutes and hours still
	// answer exactly (pickLevel moves to the 1 min level).
	clock.Advance(4 * time.Hour)
	for _, kind := range fams {
		w := checkSeries(t, r, m, kind, "", from, to, time.Minute)
		if !w.Closed {
			t.Fatalf("a window that ended hours ago is not closed")
		}
		if _, err := r.Windows().Series(kind, "", from, to, time.Second); !errors.Is(err, ErrNoWindow) {
			t.Fatalf("Series at 1 s after the 1 s slots expired: %v, want ErrNoWindow", err)
		}
	}
	if _, err := r.Windows().Expire(ctx); err != nil {
		t.Fatal(err)
	}
	if refs, _ := r.store.ExpiredWindows(clock.Now().UnixMilli(), 0); len(refs) != 0 {
		t.Fatalf("after the sweep %d slots are still due, e.g. %v", len(refs), refs[0])
	}
	for _, kind := range fams {
		for _, key := range m.keys(kind) {
			if got := storedLevel(t, r, kind, key, 1, 0, 9_999_999_999, 0); len(got) != 0 { // a slot name holds 10 digits of start
				t.Fatalf("%s %q: %d 1 s slots left after the sweep", kind, key, len(got))
			}
			checkSeries(t, r, m, kind, key, from, to, time.Minute)
			checkLevel(t, r, m, kind, key, 3600, 0, from/1000, to/1000)
			w, err := r.Windows().Of(kind, key, from, to)
			if err != nil || w.Points[0].Value() != m.sum(kind, key, from/1000, to/1000) {
				t.Fatalf("WindowOf(%s, %q) after the sweep: %+v, %v; model %d", kind, key, w, err, m.sum(kind, key, from/1000, to/1000))
			}
		}
	}
}

// Event times outside [now-Past, now+Future], refused and changing nothing,
// are a script: testdata/windows/event_time_bounds.txt.

// --- Convergence under random delivery -------------------------------

// winMsg is one piece of a commit's changes on its way to one replica.
type winMsg struct {
	to   int
	vec  *VectorMerge
	rec  *RecordMerge
	dups int
}

// winNet is a full mesh of replicas whose messages are delivered when, in
// what order and how often the test says.
type winNet struct {
	t     *testing.T
	rs    []*Replica
	boxes []*mailbox
	pool  []*winMsg
}

// collect moves every replica's commits into the pool, one message per
// vector or record per peer.
func (n *winNet) collect() {
	for i, box := range n.boxes {
		for _, c := range box.take() {
			for j := range n.rs {
				if j == i {
					continue
				}
				for _, v := range c.Vectors {
					n.pool = append(n.pool, &winMsg{to: j, vec: &VectorMerge{Kind: v.Kind, Item: v.Item, Vec: crdt.Vector{}.Set(n.rs[i].ID(), v.Own)}})
				}
				for _, r := range c.Records {
					n.pool = append(n.pool, &winMsg{to: j, rec: &RecordMerge{Item: r.Item, User: r.User, Rec: cloneRecord(r.Rec)}})
				}
			}
		}
	}
}

// deliverSome delivers up to limit random messages for one random replica
// in one Merge, leaving a copy of some of them to be delivered again.
func (n *winNet) deliverSome(rng *rand.Rand, limit int, dupP float64) {
	n.t.Helper()
	n.collect()
	if len(n.pool) == 0 {
		return
	}
	to := n.pool[rng.IntN(len(n.pool))].to
	var vecs []VectorMerge
	var recs []RecordMerge
	var keep []*winMsg
	rng.Shuffle(len(n.pool), func(i, j int) { n.pool[i], n.pool[j] = n.pool[j], n.pool[i] })
	for _, m := range n.pool {
		if m.to != to || len(vecs)+len(recs) >= limit {
			keep = append(keep, m)
			continue
		}
		if m.vec != nil {
			vecs = append(vecs, *m.vec)
		} else {
			recs = append(recs, *m.rec)
		}
		if m.dups < 2 && rng.Float64() < dupP {
			m.dups++
			keep = append(keep, m)
		}
	}
	n.pool = keep
	if err := n.rs[to].Merge(context.Background(), vecs, recs); err != nil {
		n.t.Fatal(err)
	}
	n.collect()
}

// deliverTo delivers every message waiting for replica j, in one Merge.
func (n *winNet) deliverTo(j int) {
	n.t.Helper()
	n.collect()
	var vecs []VectorMerge
	var recs []RecordMerge
	var keep []*winMsg
	for _, m := range n.pool {
		switch {
		case m.to != j:
			keep = append(keep, m)
		case m.vec != nil:
			vecs = append(vecs, *m.vec)
		default:
			recs = append(recs, *m.rec)
		}
	}
	n.pool = keep
	if err := n.rs[j].Merge(context.Background(), vecs, recs); err != nil {
		n.t.Fatal(err)
	}
	n.collect()
}

// drain delivers until nothing is left, duplicates included.
func (n *winNet) drain(rng *rand.Rand) {
	n.t.Helper()
	for i := 0; ; i++ {
		n.collect()
		if len(n.pool) == 0 {
			return
		}
		if i > 100_000 {
			n.t.Fatal("the replicas did not go quiet")
		}
		n.deliverSome(rng, 1+rng.IntN(6), 0.1)
	}
}

// action is one accepted local like or keyed increment of a contended
// record, for the sequential model.
type action struct {
	hlc    crdt.HLC
	origin string
	liked  bool
	by     int64 // keyed increments
	atMs   int64 // where it is booked
}

// sequential applies the actions of one record in their order: a like
// counts if the user did not like the item, an unlike if it did; a keyed
// increment counts the first time only. It adds what counts to m. Likes
// are in the order of their time (the client's, else the HLC's), then
// HLC (crdt.LikeRecord.Wins); keyed increments in HLC order.
func sequential(m secModel, kind storage.Kind, key string, acts []action) {
	slices.SortFunc(acts, func(a, b action) int { return cmp.Or(cmp.Compare(a.hlc, b.hlc), cmp.Compare(a.origin, b.origin)) })
	if kind == storage.Likes {
		slices.SortStableFunc(acts, func(a, b action) int { return cmp.Compare(a.atMs, b.atMs) })
	}
	liked, applied := false, false
	for _, a := range acts {
		if kind == storage.Counters {
			if !applied {
				m.add(kind, key, a.atMs, a.by)
				applied = true
			}
			continue
		}
		switch {
		case a.liked && !liked:
			m.add(kind, key, a.atMs, 1)
		case !a.liked && liked:
			m.add(kind, key, a.atMs, -1)
		}
		liked = a.liked
	}
}

func newWinNet(t *testing.T, n int, clock *testkit.Clock, wc *WindowConfig) *winNet {
	net := &winNet{t: t}
	for i := range n {
		box := &mailbox{}
		r, _ := openWin(t, t.TempDir(), fmt.Sprintf("r%d", i), winOpts{clock: clock, windows: wc, box: box, nosync: true})
		net.rs = append(net.rs, r)
		net.boxes = append(net.boxes, box)
	}
	return net
}

// Three replicas take increments, likes and unlikes with client times
// and exchange their changes in random order, with duplicates. After a
// full exchange every replica holds the same slots, equal to the model,
// at every level. Contended records (one user liking at two replicas at
// once, one idempotency key applied at two) are reconciled by their
// winner at its action's time, so each slot ends as if the actions had
// happened one after the other in their order (likes: by their time,
// then HLC; keys: by HLC).
func TestWindowConvergence(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runWindowConvergence(t, seed) })
	}
}

func runWindowConvergence(t *testing.T, seed uint64) {
	clock := testkit.NewClock(winT0)
	wc := &WindowConfig{Rules: []WindowRule{{Levels: threeLevels()}}, Past: 5 * time.Minute, Future: time.Minute}
	net := newWinNet(t, 3, clock, wc)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(100+seed, 101))
	m := secModel{}
	soloLiked := map[[2]string]bool{}
	contended := map[[3]string][]action{} // {kind, key, user or idem} -> actions
	minAt, maxAt := clock.Now().UnixMilli(), clock.Now().UnixMilli()
	note := func(at int64) { minAt, maxAt = min(minAt, at), max(maxAt, at) }

	// like applies a like or unlike at replica i and returns the action as
	// the replica recorded it; applied is false if the action was older,
	// by its client's time, than the state it found, which it left as it
	// was.
	like := func(i int, item, user string, liked bool, at int64) (a action, applied bool) {
		r := net.rs[i]
		kind := OpUnlike
		if liked {
			kind = OpLike
		}
		before, _, err := r.Likes().Record(item, user)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Do(ctx, []Op{{Kind: kind, Item: item, User: user, At: at}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("%s %v %s/%s: %v %v", r.ID(), kind, item, user, err, res)
		}
		rec, ok, err := r.Likes().Record(item, user)
		if err == nil && ok && before != nil && rec.Equal(before) {
			// (An applied action writes a fresh HLC.)
			if res[0].Liked != before.Liked || res[0].Changed || at != 0 && at >= before.BookedMs() {
				t.Fatalf("%s: a stale %v answered %+v over %+v", r.ID(), kind, res[0], before)
			}
			return action{}, false
		}
		if err != nil || !ok || rec.Origin != r.ID() || rec.Liked != liked || at != 0 && rec.At != at {
			t.Fatalf("%s: record after its own %v: %+v, %v, %v", r.ID(), kind, rec, ok, err)
		}
		note(rec.BookedMs())
		return action{hlc: rec.HLC, origin: rec.Origin, liked: liked, atMs: rec.BookedMs()}, true
	}
	contendedN, dupKeys, staleN := 0, 0, 0
	for step := range 300 {
		clock.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
		nowMs := clock.Now().UnixMilli()
		i := rng.IntN(len(net.rs))
		switch rng.IntN(10) {
		case 0, 1, 2:
			key, by, at := fmt.Sprintf("c:%d", rng.IntN(3)), int64(rng.IntN(12)-3), randAt(rng, nowMs, wc)
			res, err := net.rs[i].Do(ctx, []Op{{Kind: OpIncr, Item: key, By: by, At: at}})
			if err != nil || res[0].Err != nil {
				t.Fatal(err, res)
			}
			if at == 0 {
				at = nowMs
			}
			note(at)
			m.add(storage.Counters, key, at, by)
		case 3, 4, 5:
			// A user of replica i only: sequential by construction.
			item, user := fmt.Sprintf("p:%d", rng.IntN(2)), fmt.Sprintf("s%d-%d", i, rng.IntN(4))
			a, applied := like(i, item, user, rng.IntN(3) != 0, randAt(rng, nowMs, wc))
			k := [2]string{item, user}
			if !applied {
				staleN++
				break
			}
			switch {
			case a.liked && !soloLiked[k]:
				m.add(storage.Likes, item, a.atMs, 1)
			case !a.liked && soloLiked[k]:
				m.add(storage.Likes, item, a.atMs, -1)
			}
			soloLiked[k] = a.liked
		case 6, 7:
			// One user likes at two replicas, most often before either
			// hears of the other.
			item, user := fmt.Sprintf("p:%d", rng.IntN(2)), fmt.Sprintf("d%d", step)
			j := (i + 1 + rng.IntN(len(net.rs)-1)) % len(net.rs)
			ck := [3]string{"l", item, user}
			a, _ := like(i, item, user, true, randAt(rng, nowMs, wc))
			contended[ck] = append(contended[ck], a)
			if rng.IntN(4) == 0 {
				net.deliverSome(rng, 8, 0.2)
			}
			clock.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
			if b, applied := like(j, item, user, true, randAt(rng, clock.Now().UnixMilli(), wc)); applied {
				contended[ck] = append(contended[ck], b)
			} else {
				staleN++
			}
			contendedN++
		case 8:
			// One idempotency key applied at two replicas.
			key, idem := "c:k", fmt.Sprintf("idem%d", step)
			j := (i + 1 + rng.IntN(len(net.rs)-1)) % len(net.rs)
			ck := [3]string{"c", key, idem}
			for _, x := range []int{i, j} {
				at := randAt(rng, clock.Now().UnixMilli(), wc)
				res, err := net.rs[x].Do(ctx, []Op{{Kind: OpIncr, Item: key, By: 3, IdemKey: idem, At: at}})
				if err != nil || res[0].Err != nil {
					t.Fatal(err, res)
				}
				if res[0].Duplicate {
					dupKeys++
					continue
				}
				rec, ok, err := net.rs[x].store.KeyedRecord(key, idem)
				if err != nil || !ok || rec.Origin != net.rs[x].ID() {
					t.Fatalf("keyed record after its application: %+v, %v, %v", rec, ok, err)
				}
				note(rec.BookedMs())
				contended[ck] = append(contended[ck], action{hlc: rec.HLC, origin: rec.Origin, by: 3, atMs: rec.BookedMs()})
				clock.Advance(time.Duration(rng.IntN(3)) * time.Millisecond)
				if x == i && rng.IntN(3) == 0 {
					net.deliverTo(j) // j hears of it first: a duplicate there
				}
			}
		default:
			net.deliverSome(rng, 1+rng.IntN(10), 0.25)
		}
		if rng.IntN(3) == 0 {
			net.deliverSome(rng, 1+rng.IntN(10), 0.25)
		}
	}
	net.drain(rng)
	for ck, acts := range contended {
		kind := storage.Likes
		if ck[0] == "c" {
			kind = storage.Counters
		}
		sequential(m, kind, ck[1], acts)
	}
	reconciled := 0.0
	for _, r := range net.rs {
		reconciled += testutil.ToFloat64(r.metrics.reconciled)
	}
	if reconciled < 3 || contendedN < 10 {
		t.Fatalf("only %v reconciliations over %d contended likes: the test does not exercise them", reconciled, contendedN)
	}
	t.Logf("%d contended likes, %d keys found applied already, %v reconciliations, %d stale likes", contendedN, dupKeys, reconciled, staleN)

	from := crdt.SlotStart(minAt, 3600) * 1000
	to := (crdt.SlotStart(maxAt, 3600) + 3600) * 1000
	for _, kind := range []storage.Kind{storage.Likes, storage.Counters} {
		for _, key := range m.keys(kind) {
			var first Window
			for i, r := range net.rs {
				w := checkSeries(t, r, m, kind, key, from, to, time.Second)
				checkSeries(t, r, m, kind, key, from, to, time.Minute)
				for _, l := range []struct{ width, keep int64 }{{1, 3 * 3600}, {60, 15 * 86400}, {3600, 0}} {
					checkLevel(t, r, m, kind, key, l.width, l.keep, from/1000, to/1000)
				}
				if key != "" && w.Unreconciled != 0 {
					t.Fatalf("%s: %s %q still has %d unreconciled records", r.ID(), kind, key, w.Unreconciled)
				}
				if i == 0 {
					first = w
					continue
				}
				for p := range w.Points {
					if !w.Points[p].Vector.Equal(first.Points[p].Vector) {
						t.Fatalf("%s and %s differ on %s %q at %v: %v vs %v", r.ID(), net.rs[0].ID(), kind, key,
							w.Points[p].Start, w.Points[p].Vector, first.Points[p].Vector)
					}
				}
			}
			if key == "" {
				continue
			}
			var read func(string) (Read, error)
			for _, r := range net.rs {
				read = r.Counters().Get
				if kind == storage.Likes {
					read = r.Likes().Count
				}
				if rd, err := read(key); err != nil || rd.Value != m.sum(kind, key, 0, 1<<40) {
					t.Fatalf("%s: all-time %s %q = %+v, %v; slots' model %d", r.ID(), kind, key, rd, err, m.sum(kind, key, 0, 1<<40))
				}
			}
		}
	}
	// Every replica's replicated state is the same.
	root := net.rs[0].store.Root()
	for _, r := range net.rs[1:] {
		if r.store.Root() != root {
			t.Fatalf("%s's digest root differs from %s's after a full exchange", r.ID(), net.rs[0].ID())
		}
	}
}

// The case of the package documentation, slot by slot, is a script:
// testdata/windows/concurrent_likes_booked_at_winner.txt.

// --- Retention -------------------------------------------------------

// A slot past its retention is gone by rule, and neither changes in
// flight since before it expired nor a late reconciliation booked at its
// time bring it back: a script, testdata/windows/retention_no_resurrection.txt.
// Replication hands a replica only other replicas' entries, so what no
// script reaches is a replica merging its own expired slots back (a
// peer that kept them over a long partition, as a region Merge may be
// given them): refused, counted, nothing changes, and the expiry index
// lists nothing of them, due or not.
func TestWindowExpiredOwnSlotsRefused(t *testing.T) {
	clock := testkit.NewClock(winT0)
	wc := &WindowConfig{
		Rules: []WindowRule{{Levels: []WindowLevel{{Width: time.Hour, Keep: 10 * time.Minute}}}},
		Past:  time.Second, Future: time.Second,
	}
	a, _ := openWin(t, t.TempDir(), "A", winOpts{clock: clock, windows: wc})
	ctx := context.Background()
	res, err := a.Do(ctx, []Op{{Kind: OpIncr, Item: "c:1", By: 5}, {Kind: OpLike, Item: "p:1", User: "u"}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatal(err, res)
	}
	hour := crdt.SlotStart(clock.Now().UnixMilli(), 3600)
	slot := func(key string) crdt.Slot { return crdt.Slot{Key: key, Width: 3600, Start: hour, Keep: 600} }
	names := map[storage.Kind][]string{
		storage.CountersWindows: {slot("c:1").Name(), slot("").Name()},
		storage.LikesWindows:    {slot("p:1").Name(), slot("").Name()},
	}
	// What a partitioned peer keeps of A's slots.
	var old []VectorMerge
	for k, ns := range names {
		for _, n := range ns {
			v, err := a.store.Vector(k, n)
			if err != nil || len(v) == 0 {
				t.Fatalf("A has no slot %q: %v", n, err)
			}
			old = append(old, VectorMerge{Kind: k, Item: n, Vec: v})
		}
	}
	stored := func() {
		t.Helper()
		for k, ns := range names {
			for _, n := range ns {
				if v, _ := a.store.Vector(k, n); len(v) != 0 {
					t.Fatalf("expired slot %q stored: %v", n, v)
				}
			}
		}
		if refs, _ := a.store.ExpiredWindows(1<<50, 0); len(refs) != 0 {
			t.Fatalf("expiry index still lists %v", refs)
		}
	}

	clock.Set(time.UnixMilli(slot("").ExpiresMs()))
	if _, err := a.Windows().Expire(ctx); err != nil {
		t.Fatal(err)
	}
	// The background sweeper may have taken some: count by the metric.
	if got := testutil.ToFloat64(a.metrics.slotsExpired); got != 4 {
		t.Fatalf("A expired %v slots, want 4", got)
	}
	stored()

	before := a.store.Digests()
	if err := a.Merge(ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(a.metrics.refusedSlot); got != float64(len(old)) {
		t.Fatalf("A refused %v expired slots, want %d", got, len(old))
	}
	if !slices.Equal(a.store.Digests(), before) {
		t.Fatal("merging expired slots changed the replicated state")
	}
	stored()
	// A read of the oldest second the level serves, widened to the hour.
	fromMs := clock.Now().UnixMilli() - (3600+600)*1000
	w, err := a.Windows().Of(storage.Counters, "c:1", fromMs, fromMs+1)
	if err != nil || w.From.Unix() != hour || w.Points[0].Value() != 0 {
		t.Fatalf("expired slot read after the merge: %+v, %v", w, err)
	}
}

// --- Trending ----------------------------------------------------------

// trendModel is the net change per key and replica of likes booked in a
// window.
type trendModel map[string]map[string]int64

func (tm trendModel) add(key, replica string, d int64) {
	if tm[key] == nil {
		tm[key] = map[string]int64{}
	}
	tm[key][replica] += d
}

// top is the exact answer: keys with a positive net (over the replicas
// accepted), by count then key, n of them.
func (tm trendModel) top(prefix string, n int, replica func(string) bool) []Ranked {
	var out []Ranked
	for k, per := range tm {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		var s int64
		for r, d := range per {
			if replica == nil || replica(r) {
				s += d
			}
		}
		if s > 0 {
			out = append(out, Ranked{k, s})
		}
	}
	slices.SortFunc(out, func(a, b Ranked) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key)) })
	if len(out) > n {
		out = out[:n]
	}
	return out
}

func mustTrending(t *testing.T, r *Replica, kind storage.Kind, prefix string, last time.Duration, n int, replica func(string) bool) Trending {
	t.Helper()
	tr, err := r.Windows().Trending(kind, prefix, last, n, replica)
	if err != nil {
		t.Fatalf("%s: Trending(%s, %q, %v, %d): %v", r.ID(), kind, prefix, last, n, err)
	}
	return tr
}

func only(id string) func(string) bool { return func(r string) bool { return r == id } }

// trendScene is two replicas that took likes over several minutes and
// exchanged everything, with the model of what they took.
type trendScene struct {
	clock   *testkit.Clock
	wc      *WindowConfig
	dirs    []string
	rs      []*Replica
	closers []func()
	window  trendModel // likes booked in the last 10 minutes
	allTime trendModel
	from    int64 // the 10-minute window, unix seconds
	to      int64
}

// sceneEv is one like or unlike of a trending scene.
type sceneEv struct {
	key, user string
	at        int // replica index
	liked     bool
	offMs     int64 // when, from the scene's start
	backMs    int64 // the client time is this long before the clock (0: no client time)
}

// shuffledPlan: counts[key] users like key, each at a random one of the
// two replicas, in random order over six minutes, half of them with a
// client time up to 30 s back; then unlikes[key] of them unlike again, at
// the same replica.
func shuffledPlan(seed uint64, counts, unlikes map[string]int) []sceneEv {
	rng := rand.New(rand.NewPCG(seed, 7))
	var evs []sceneEv
	for _, key := range slices.Sorted(maps.Keys(counts)) {
		for u := range counts[key] {
			evs = append(evs, sceneEv{key: key, user: fmt.Sprintf("%s-u%d", key, u), at: rng.IntN(2), liked: true})
		}
	}
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	for _, key := range slices.Sorted(maps.Keys(unlikes)) {
		n := unlikes[key]
		for _, e := range evs {
			if e.key == key && n > 0 {
				e.liked = false
				evs = append(evs, e)
				n--
			}
		}
	}
	for i := range evs {
		evs[i].offMs = int64(i+1) * 360_000 / int64(len(evs))
		if rng.IntN(2) == 0 {
			evs[i].backMs = rng.Int64N(30_000)
		}
	}
	return evs
}

// likeScene runs a plan on two replicas, starting on a minute boundary,
// exchanging changes now and then and fully at the end. Fifteen minutes
// before, a few likes of "old:*" that only all-time counts see.
func likeScene(t *testing.T, wc *WindowConfig, plan []sceneEv) *trendScene {
	s := &trendScene{clock: testkit.NewClock(winT0), wc: wc, window: trendModel{}, allTime: trendModel{}}
	boxes := []*mailbox{{}, {}}
	for i, id := range []string{"A", "B"} {
		dir := t.TempDir()
		r, closeFn := openWin(t, dir, id, winOpts{clock: s.clock, windows: wc, box: boxes[i], nosync: true})
		s.dirs, s.rs, s.closers = append(s.dirs, dir), append(s.rs, r), append(s.closers, closeFn)
	}
	ctx := context.Background()
	type booking struct {
		key, replica string
		ms, d        int64
	}
	var booked []booking
	do := func(e sceneEv) {
		r := s.rs[e.at]
		kind := OpLike
		if !e.liked {
			kind = OpUnlike
		}
		at := int64(0)
		if e.backMs > 0 {
			at = s.clock.Now().UnixMilli() - e.backMs
		}
		res, err := r.Do(ctx, []Op{{Kind: kind, Item: e.key, User: e.user, At: at}})
		if err != nil || res[0].Err != nil || !res[0].Changed {
			t.Fatalf("%s %v %s/%s: %v %+v", r.ID(), kind, e.key, e.user, err, res)
		}
		if at == 0 {
			at = s.clock.Now().UnixMilli()
		}
		d := int64(1)
		if !e.liked {
			d = -1
		}
		booked = append(booked, booking{e.key, r.ID(), at, d})
	}
	for i := range 5 {
		for u := range i + 1 {
			do(sceneEv{key: fmt.Sprintf("old:%d", i), user: fmt.Sprintf("o%d", u), at: u % 2, liked: true})
		}
	}
	start := (crdt.SlotStart(s.clock.Now().UnixMilli()+15*60_000, 60) + 60) * 1000
	for i, e := range plan {
		s.clock.Set(time.UnixMilli(start + e.offMs))
		do(e)
		if i%17 == 0 {
			exchange(t, s.rs[0], s.rs[1], boxes[0], boxes[1])
		}
	}
	exchange(t, s.rs[0], s.rs[1], boxes[0], boxes[1])
	nowMs := s.clock.Now().UnixMilli()
	s.to = crdt.SlotStart(nowMs, 60) + 60
	s.from = s.to - 600
	for _, b := range booked {
		s.allTime.add(b.key, b.replica, b.d)
		if sec := crdt.SlotStart(b.ms, 1); sec >= s.from && sec < s.to {
			s.window.add(b.key, b.replica, b.d)
		}
	}
	return s
}

// reopen closes replica i and opens it again on the same store.
func (s *trendScene) reopen(t *testing.T, i int) {
	s.closers[i]()
	s.rs[i], s.closers[i] = openWin(t, s.dirs[i], s.rs[i].ID(), winOpts{clock: s.clock, windows: s.wc, nosync: true})
}

func checkTrending(t *testing.T, r *Replica, got Trending, want []Ranked, what string) {
	t.Helper()
	if len(got.Items) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got.Items, want) {
		t.Fatalf("%s: %s = %v,\nwant %v", r.ID(), what, got.Items, want)
	}
}

func trendingLevels() *WindowConfig {
	return &WindowConfig{Rules: []WindowRule{{Levels: []WindowLevel{
		{Width: time.Minute, Keep: 3 * time.Hour},
		{Width: time.Hour, Keep: 3 * 24 * time.Hour},
	}}}}
}

// Trending over the last 10 minutes is the exact top n, with exact counts,
// at either replica, per replica, by prefix; all time too; and the same
// after a restart rebuilt the sketches from the stored slots.
func TestTrendingExact(t *testing.T) {
	counts, unlikes := map[string]int{}, map[string]int{}
	for i := range 24 {
		counts[fmt.Sprintf("item:%02d", i)] = 1 + (i*7)%24 // distinct, 1..24
	}
	unlikes["item:03"] = counts["item:03"] // many additions, net 0
	unlikes["item:10"] = 3
	s := likeScene(t, trendingLevels(), shuffledPlan(1, counts, unlikes))
	if len(s.window) < 20 || len(s.allTime) != len(s.window)+5 {
		t.Fatalf("scene: %d keys in the window, %d all time", len(s.window), len(s.allTime))
	}
	check := func(stage string) {
		for _, r := range s.rs {
			for _, n := range []int{1, 5, 100} {
				tr := mustTrending(t, r, storage.Likes, "", 10*time.Minute, n, nil)
				if tr.From.Unix() != s.from || tr.To.Unix() != s.to || tr.AllTime {
					t.Fatalf("%s: window [%v, %v), want [%d, %d)", r.ID(), tr.From.Unix(), tr.To.Unix(), s.from, s.to)
				}
				checkTrending(t, r, tr, s.window.top("", n, nil), fmt.Sprintf("%s: top %d of 10m", stage, n))
				for _, id := range []string{"A", "B"} {
					tr := mustTrending(t, r, storage.Likes, "", 10*time.Minute, n, only(id))
					checkTrending(t, r, tr, s.window.top("", n, only(id)), fmt.Sprintf("%s: top %d of 10m at %s", stage, n, id))
				}
				tr = mustTrending(t, r, storage.Likes, "item:1", 10*time.Minute, n, nil)
				checkTrending(t, r, tr, s.window.top("item:1", n, nil), fmt.Sprintf("%s: top %d of item:1*", stage, n))
			}
			// All time (a scan of every all-time count).
			tr := mustTrending(t, r, storage.Likes, "", 0, 7, nil)
			if !tr.AllTime {
				t.Fatalf("last 0 is not all time: %+v", tr)
			}
			checkTrending(t, r, tr, s.allTime.top("", 7, nil), fmt.Sprintf("%s: top 7 all time", stage))
			tr = mustTrending(t, r, storage.Likes, "", 0, 100, only("B"))
			checkTrending(t, r, tr, s.allTime.top("", 100, only("B")), fmt.Sprintf("%s: all time at B", stage))
			// The last hour (minute sketches) and the last 3 hours (hour
			// sketches) hold the old likes too: every like so far.
			for _, last := range []time.Duration{time.Hour, 3 * time.Hour} {
				tr := mustTrending(t, r, storage.Likes, "", last, 100, nil)
				checkTrending(t, r, tr, s.allTime.top("", 100, nil), fmt.Sprintf("%s: top of the last %v", stage, last))
			}
		}
	}
	check("live")
	if tr := mustTrending(t, s.rs[0], storage.Likes, "", 10*time.Minute, 100, nil); tr.Candidates < len(s.window.top("", 100, nil)) {
		t.Fatalf("%d candidates for %d keys", tr.Candidates, len(s.window))
	}
	s.reopen(t, 0)
	s.reopen(t, 1)
	check("after restart")
	// Errors: n out of range, a window longer than the sketches keep.
	if _, err := s.rs[0].Windows().Trending(storage.Likes, "", 10*time.Minute, 0, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("n 0: %v", err)
	}
	if _, err := s.rs[0].Windows().Trending(storage.Likes, "", 32*24*time.Hour, 5, nil); !errors.Is(err, ErrNoWindow) {
		t.Fatalf("32 days: %v", err)
	}
}

// With sketches far smaller than the number of keys, a key with more than
// 1/k of the window's additions is never missed and its count is exact;
// every count reported is exact. The same after a restart.
func TestTrendingHeavyHitterWithFullSketches(t *testing.T) {
	wc := trendingLevels()
	wc.TrendingCapacity = 8
	// Each minute, at each replica: 8 other keys fill the sketch, then
	// hot's likes come one at a time, each followed by 3 new keys (hot is
	// the smallest name, so it is the first evicted among equal counts),
	// then the minute ends on new keys. hot is 5 of each sketch's 28.
	var plan []sceneEv
	k := 0
	for minute := range int64(6) {
		off := minute * 60_000
		for rep := range 2 {
			next := func() {
				plan = append(plan, sceneEv{key: fmt.Sprintf("k:%03d", k), user: "u", at: rep, liked: true, offMs: off})
				k++
				off += 1000
			}
			for range 8 {
				next()
			}
			for h := range 5 {
				plan = append(plan, sceneEv{key: "hot", user: fmt.Sprintf("h%d-%d-%d", minute, rep, h), at: rep, liked: true, offMs: off})
				off += 1000
				for range 3 {
					next()
				}
			}
		}
	}
	s := likeScene(t, wc, plan)
	total := int64(0)
	for _, per := range s.window {
		for _, d := range per {
			total += d
		}
	}
	hot := s.window.top("hot", 1, nil)
	if len(hot) != 1 || hot[0].Count*int64(wc.TrendingCapacity) <= total {
		t.Fatalf("scene: hot %v of %d additions is not a heavy hitter", hot, total)
	}
	exact := map[string]int64{}
	for _, r := range s.window.top("", 1000, nil) {
		exact[r.Key] = r.Count
	}
	check := func(stage string) {
		for _, r := range s.rs {
			tr := mustTrending(t, r, storage.Likes, "", 10*time.Minute, 3, nil)
			if tr.Capacity != 8 || len(tr.Items) == 0 || tr.Items[0] != hot[0] {
				t.Fatalf("%s: %s: top 3 = %v (capacity %d), want %v first", r.ID(), stage, tr.Items, tr.Capacity, hot[0])
			}
			tr = mustTrending(t, r, storage.Likes, "", 10*time.Minute, 1000, nil)
			for _, it := range tr.Items {
				if exact[it.Key] != it.Count {
					t.Fatalf("%s: %s: %s counted %d, exactly %d", r.ID(), stage, it.Key, it.Count, exact[it.Key])
				}
			}
			// 277 keys through sketches of 8: most were dropped.
			if tr.Candidates >= len(exact) || len(tr.Items) != tr.Candidates {
				t.Fatalf("%s: %s: %d candidates, %d items of %d keys: the sketches are not full", r.ID(), stage, tr.Candidates, len(tr.Items), len(exact))
			}
			// Per replica: hot is a heavy hitter of each replica's
			// additions too, if the split made it one.
			for _, id := range []string{"A", "B"} {
				var all int64
				for _, per := range s.window {
					all += per[id]
				}
				want := s.window.top("hot", 1, only(id))
				tr := mustTrending(t, r, storage.Likes, "", 10*time.Minute, 1000, only(id))
				if len(want) == 1 && want[0].Count*8 > all && !slices.Contains(tr.Items, want[0]) {
					t.Fatalf("%s: %s: at %s, hot %v (of %d) missing from %v", r.ID(), stage, id, want[0], all, tr.Items)
				}
				for _, it := range tr.Items {
					if w := s.window.top(it.Key, 1, only(id)); len(w) != 1 || w[0] != it {
						t.Fatalf("%s: %s: at %s %v, exactly %v", r.ID(), stage, id, it, w)
					}
				}
			}
		}
	}
	check("live")
	s.reopen(t, 0)
	check("after restart")
}

// Trending over a week ranks likes booked at two replicas over ten days
// by their exact counts in the last 7 UTC days (today included), at
// either replica, per replica, and the same after a restart rebuilt the
// day sketches from the stored 1 h slots. Likes of the days before the
// week count in a 10 day window and not in the week's.
func TestTrendingWeek(t *testing.T) {
	clock := testkit.NewClock(winT0)
	wc := &WindowConfig{Rules: []WindowRule{{Levels: threeLevels()}}}
	boxes := []*mailbox{{}, {}}
	var rs []*Replica
	var dirs []string
	closers := make([]func(), 2)
	for i, id := range []string{"A", "B"} {
		dir := t.TempDir()
		r, closeFn := openWin(t, dir, id, winOpts{clock: clock, windows: wc, box: boxes[i], nosync: true})
		rs, dirs, closers[i] = append(rs, r), append(dirs, dir), closeFn
	}
	t.Cleanup(func() {
		for _, c := range closers {
			c()
		}
	})
	// Day d (0..9) from winT0: key -> likes that day, split between A and B.
	days := []map[string]int{
		{"old": 9}, {"old": 9, "b": 1}, {"old": 2}, // before the week
		{"a": 2}, {"b": 3}, {"c": 1}, {"a": 1, "c": 2},
		{"b": 1}, {"a": 2}, {"c": 1, "a": 1},
	}
	week, ten := trendModel{}, trendModel{}
	ctx := context.Background()
	u := 0
	for d, likes := range days {
		for h, key := range slices.Sorted(maps.Keys(likes)) {
			clock.Set(winT0.Add(time.Duration(d)*24*time.Hour + time.Duration(h)*time.Hour))
			for range likes[key] {
				r := rs[u%2]
				res, err := r.Do(ctx, []Op{{Kind: OpLike, Item: key, User: fmt.Sprintf("u%d", u)}})
				if err != nil || res[0].Err != nil || !res[0].Changed {
					t.Fatalf("like %s: %v %+v", key, err, res)
				}
				ten.add(key, r.ID(), 1)
				if d >= 3 {
					week.add(key, r.ID(), 1)
				}
				u++
			}
			exchange(t, rs[0], rs[1], boxes[0], boxes[1])
		}
	}
	// The week is the last 7 UTC days: the first 3 days of the scene
	// must lie before it for the model to hold.
	nowMs := clock.Now().UnixMilli()
	to := crdt.SlotStart(nowMs, 86400) + 86400
	if first := winT0.Add(3 * 24 * time.Hour).Unix(); first < to-7*86400 || first-86400 >= to-7*86400 {
		t.Fatalf("scene: day 3 at %d is not the week's first day [%d, ...)", first, to-7*86400)
	}
	check := func(stage string) {
		for _, r := range rs {
			tr := mustTrending(t, r, storage.Likes, "", 7*24*time.Hour, 10, nil)
			if tr.To.Unix() != to || tr.From.Unix() != to-7*86400 || tr.AllTime {
				t.Fatalf("%s: %s: week [%v, %v), want [%d, %d)", stage, r.ID(), tr.From.Unix(), tr.To.Unix(), to-7*86400, to)
			}
			checkTrending(t, r, tr, week.top("", 10, nil), stage+": top of the week")
			checkTrending(t, r, mustTrending(t, r, storage.Likes, "", 7*24*time.Hour, 1, nil), week.top("", 1, nil), stage+": top 1 of the week")
			for _, id := range []string{"A", "B"} {
				tr := mustTrending(t, r, storage.Likes, "", 7*24*time.Hour, 10, only(id))
				checkTrending(t, r, tr, week.top("", 10, only(id)), stage+": top of the week at "+id)
			}
			checkTrending(t, r, mustTrending(t, r, storage.Likes, "", 10*24*time.Hour, 10, nil), ten.top("", 10, nil), stage+": top of 10 days")
		}
	}
	if got := week.top("", 10, nil); len(got) != 3 || got[0].Key != "a" {
		t.Fatalf("scene: the week's top %v", got)
	}
	if got := ten.top("", 1, nil); got[0].Key != "old" {
		t.Fatalf("scene: the 10 days' top %v", got)
	}
	check("live")
	for i := range rs {
		closers[i]()
		rs[i], closers[i] = openWin(t, dirs[i], rs[i].ID(), winOpts{clock: clock, windows: wc, nosync: true})
	}
	check("after restart")
	if _, err := rs[0].Windows().Trending(storage.Likes, "", 32*24*time.Hour, 5, nil); !errors.Is(err, ErrNoWindow) {
		t.Fatalf("32 days: %v", err)
	}
}

// A restart rebuilds the sketches from the stored slots, whatever the
// levels' retention: a 1 min level kept forever too.
func TestTrendingRebuiltForLevelsKeptForever(t *testing.T) {
	wc := &WindowConfig{Rules: []WindowRule{{Levels: []WindowLevel{{Width: time.Minute}, {Width: time.Hour}}}}}
	counts := map[string]int{"a": 3, "b": 2, "c": 1}
	s := likeScene(t, wc, shuffledPlan(3, counts, nil))
	want := s.window.top("", 10, nil)
	if len(want) != 3 {
		t.Fatalf("scene: %v", want)
	}
	checkTrending(t, s.rs[0], mustTrending(t, s.rs[0], storage.Likes, "", 10*time.Minute, 10, nil), want, "live")
	s.reopen(t, 0)
	checkTrending(t, s.rs[0], mustTrending(t, s.rs[0], storage.Likes, "", 10*time.Minute, 10, nil), want, "after restart")
}

// With more than two competing actions on a record the slots converge
// to the exact total but not to the sequential minutes: a script,
// testdata/windows/contended_likes_converge.txt.

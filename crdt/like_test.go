package crdt

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// registerLess orders LWW registers the way the package documentation says:
// by the action's time (the client's if given, else the HLC's wall time),
// then HLC, then origin, then (only for corrupt equal writes) liked <
// !liked, At and Idem.
func registerLess(a, b *LikeRecord) bool {
	ta, tb := a.At, b.At
	if ta == 0 {
		ta = a.HLC.WallMs()
	}
	if tb == 0 {
		tb = b.HLC.WallMs()
	}
	if ta != tb {
		return ta < tb
	}
	if a.HLC != b.HLC {
		return a.HLC < b.HLC
	}
	if a.Origin != b.Origin {
		return a.Origin < b.Origin
	}
	if a.Liked != b.Liked {
		return b.Liked
	}
	if a.At != b.At {
		return a.At < b.At
	}
	return a.Idem < b.Idem
}

func mergeRec(a, b *LikeRecord) *LikeRecord {
	c := a.Clone()
	c.Merge(b)
	return c
}

func TestLikeMergeLaws(t *testing.T) {
	rng := newRand(30)
	pool := replicaPool(3)
	for i := range 5000 {
		a, b, c := randRecord(rng, pool), randRecord(rng, pool), randRecord(rng, pool)
		switch i % 8 {
		case 0, 4:
			// Force an equal-HLC tie, with the same or another origin.
			b.HLC = a.HLC
			if i%8 == 0 {
				b.Origin = a.Origin
			}
		case 1:
			// Force a tie of the actions' times with another HLC: one
			// client's time equal to the other's (client or HLC) time.
			if b.HLC != 0 && a.HLC != 0 {
				b.At = a.BookedMs()
			}
		case 2:
			// The same write but for the toggle key (corrupt input).
			*b = *a.Clone()
			if a.HLC != 0 && a.Idem == "" {
				b.Idem = "k1"
			}
		}
		same := a.HLC == b.HLC && a.Origin == b.Origin && a.Liked == b.Liked && a.At == b.At && a.Idem == b.Idem
		checkMergeLaws(t, i, a, b, c, same)
		ab := mergeRec(a, b)

		// The result is the join: register of the larger input, contrib the
		// entry-wise max.
		want := a
		if registerLess(a, b) {
			want = b
		}
		if ab.Liked != want.Liked || ab.HLC != want.HLC || ab.Origin != want.Origin || ab.At != want.At || ab.Idem != want.Idem {
			t.Fatalf("#%d register of %+v + %+v = %+v, want that of %+v", i, a, b, ab, want)
		}
		if err := vectorsEqualModel(ab.Contrib, maxMap(toMap(a.Contrib), toMap(b.Contrib))); err != nil {
			t.Fatalf("#%d contrib: %v", i, err)
		}

	}
}

func TestLikeMergeTies(t *testing.T) {
	h := MakeHLC(1000, 3)
	a := &LikeRecord{Liked: true, HLC: h, Origin: "eu"}
	b := &LikeRecord{Liked: false, HLC: h, Origin: "us"}
	for _, m := range []*LikeRecord{mergeRec(a, b), mergeRec(b, a)} {
		if m.Origin != "us" || m.Liked {
			t.Errorf("tie on HLC: got origin %q liked %v, want the larger origin us/unliked", m.Origin, m.Liked)
		}
	}
	// A larger HLC beats a larger origin.
	c := &LikeRecord{Liked: true, HLC: h + 1, Origin: "ap"}
	if m := mergeRec(b, c); m.Origin != "ap" || !m.Liked {
		t.Errorf("larger HLC lost: %+v", m)
	}
	// Same write, disagreeing flag (corrupt input): still commutative.
	d := &LikeRecord{Liked: true, HLC: h, Origin: "us"}
	if x, y := mergeRec(b, d), mergeRec(d, b); !x.Equal(y) || !x.Liked {
		t.Errorf("corrupt tie not commutative: %+v vs %+v", x, y)
	}
	// A record whose register did not move can still carry contributions.
	e := b.Clone()
	e.Contrib = Vector{{"eu", PN{P: 1}}}
	x := b.Clone()
	if !x.Merge(e) || !x.Contrib.Equal(e.Contrib) {
		t.Errorf("contrib-only news not merged: %+v", x)
	}
}

func TestLikeWorkedExample(t *testing.T) {
	type replica struct {
		id    string
		clock Clock
		rec   LikeRecord
		item  Vector
	}
	A, B := &replica{id: "A"}, &replica{id: "B"}
	act := func(r *replica, wall int64, liked bool) {
		t.Helper()
		changed, delta := r.rec.Apply(r.id, liked, r.clock.Now(wall))
		if !changed {
			t.Fatalf("%s: action liked=%v did not change the state", r.id, liked)
		}
		r.item = r.item.Add(r.id, delta)
	}
	// recv merges from's record and from's own item entry into r, running
	// the reconciliation rule; it returns r's item-vector delta.
	recv := func(r, from *replica) int64 {
		r.clock.Observe(from.rec.HLC)
		var delta int64
		if r.rec.Merge(from.rec.Clone()) {
			delta = r.rec.Reconcile(r.id)
			r.item = r.item.Add(r.id, delta)
		}
		r.item, _ = r.item.Merge(Vector{{from.id, from.item.Get(from.id)}})
		return delta
	}
	want := func(step string, r *replica, liked bool, origin string, contrib Vector, item Vector) {
		t.Helper()
		if r.rec.Liked != liked || r.rec.Origin != origin || !r.rec.Contrib.Equal(contrib) {
			t.Fatalf("%s: %s record = %+v, want liked=%v origin=%s contrib=%v", step, r.id, r.rec, liked, origin, contrib)
		}
		if !r.item.Equal(item) {
			t.Fatalf("%s: %s item vector = %v, want %v", step, r.id, r.item, item)
		}
	}

	// u likes at A (A.p = 1) while, unaware, u likes at B with a later HLC.
	act(A, 1000, true)
	act(B, 1005, true)
	want("like at A", A, true, "A", Vector{{"A", PN{P: 1}}}, Vector{{"A", PN{P: 1}}})
	want("like at B", B, true, "B", Vector{{"B", PN{P: 1}}}, Vector{{"B", PN{P: 1}}})

	// A hears of B: liked, origin B, d = 2 − 1 = 1, but A is not the origin.
	if d := recv(A, B); d != 0 {
		t.Fatalf("A (not the origin) reconciled by %d", d)
	}
	if A.rec.Excess() != 1 {
		t.Fatalf("merged excess at A = %d, want 1", A.rec.Excess())
	}
	want("A merges B", A, true, "B", Vector{{"A", PN{P: 1}}, {"B", PN{P: 1}}}, Vector{{"A", PN{P: 1}}, {"B", PN{P: 1}}})
	if A.item.Value() != 2 {
		t.Fatalf("before reconciliation the count is %d, want 2 (both likes counted)", A.item.Value())
	}

	// B hears of A: only B acts, B.n = 1, count 1.
	if d := recv(B, A); d != -1 {
		t.Fatalf("B reconciled by %d, want -1", d)
	}
	want("B merges A", B, true, "B", Vector{{"A", PN{P: 1}}, {"B", PN{P: 1, N: 1}}}, Vector{{"A", PN{P: 1}}, {"B", PN{P: 1, N: 1}}})
	if B.rec.Excess() != 0 || B.item.Value() != 1 {
		t.Fatalf("after B reconciles: excess %d count %d, want 0 and 1", B.rec.Excess(), B.item.Value())
	}
	recv(A, B)
	if !A.rec.Equal(&B.rec) || !A.item.Equal(B.item) || A.item.Value() != 1 {
		t.Fatalf("A and B differ after exchange: %+v %v / %+v %v", A.rec, A.item, B.rec, B.item)
	}

	// Later u unlikes at A: A's view says liked, the record takes origin A,
	// liked = false, d = (1 − 0) + (1 − 1) − 0 = 1, so A.n = 1.
	hBefore := A.rec.HLC
	if A.rec.Excess() != 0 {
		t.Fatalf("precondition: excess %d", A.rec.Excess())
	}
	act(A, 1001, false) // A's wall clock is behind B's HLC; the HLC still moves past it
	if A.rec.HLC <= hBefore {
		t.Fatalf("unlike at A took HLC %v, not above %v", A.rec.HLC, hBefore)
	}
	want("unlike at A", A, false, "A", Vector{{"A", PN{P: 1, N: 1}}, {"B", PN{P: 1, N: 1}}}, Vector{{"A", PN{P: 1, N: 1}}, {"B", PN{P: 1, N: 1}}})
	if A.item.Value() != 0 {
		t.Fatalf("count at A = %d, want 0", A.item.Value())
	}
	if d := recv(B, A); d != 0 {
		t.Fatalf("B reconciled by %d after the unlike, want 0", d)
	}
	if !A.rec.Equal(&B.rec) || !A.item.Equal(B.item) || B.item.Value() != 0 || B.rec.Excess() != 0 {
		t.Fatalf("not converged: %+v %v / %+v %v", A.rec, A.item, B.rec, B.item)
	}
}

// TestLikeWorkedExampleUnaware is the same story, but u unlikes at A before
// B's reconciliation reaches A: A over-corrects (A.n = 2) and then, as the
// winner, repairs it when B's B.n = 1 arrives.
func TestLikeWorkedExampleUnaware(t *testing.T) {
	a := &LikeRecord{}
	b := &LikeRecord{}
	var itemA, itemB Vector
	_, d := a.Apply("A", true, MakeHLC(1000, 0))
	itemA = itemA.Add("A", d)
	_, d = b.Apply("B", true, MakeHLC(1005, 0))
	itemB = itemB.Add("B", d)

	bAtA := b.Clone() // B's first record, in flight to A
	a.Merge(bAtA)     // A not the origin: nothing to do
	if d := a.Reconcile("A"); d != 0 {
		t.Fatalf("A reconciled %d as non-origin", d)
	}
	b.Merge(a.Clone())
	itemB = itemB.Add("B", b.Reconcile("B")) // B.n = 1, not yet seen by A

	// Unlike at A: A's view has excess 1 (two likes) and liked → unliked.
	changed, d := a.Apply("A", false, MakeHLC(1005, 1))
	if !changed || d != -2 || a.Contrib.Get("A") != (PN{P: 1, N: 2}) {
		t.Fatalf("unlike at A: changed=%v delta=%d contrib=%v, want true, -2, A=(1,2)", changed, d, a.Contrib)
	}
	itemA = itemA.Add("A", d)

	// B's reconciled record arrives at A: d = (1−2) + (1−1) − 0 = −1, so A
	// raises its own P.
	if !a.Merge(b.Clone()) {
		t.Fatal("merge of B's reconciled record did not change A")
	}
	if a.Excess() != -1 {
		t.Fatalf("excess at A = %d, want -1", a.Excess())
	}
	d = a.Reconcile("A")
	if d != 1 || a.Contrib.Get("A") != (PN{P: 2, N: 2}) || a.Excess() != 0 {
		t.Fatalf("A's repair: delta %d contrib %v excess %d", d, a.Contrib, a.Excess())
	}
	itemA = itemA.Add("A", d)

	// B learns the final record; it is not the origin and does nothing.
	if !b.Merge(a.Clone()) || b.Reconcile("B") != 0 || !b.Equal(a) {
		t.Fatalf("B after final merge: %+v, A: %+v", b, a)
	}
	itemA, _ = itemA.Merge(itemB)
	itemB, _ = itemB.Merge(itemA)
	if !itemA.Equal(itemB) || itemA.Value() != 0 {
		t.Fatalf("item vectors %v / %v, want equal with value 0", itemA, itemB)
	}
}

func TestLikeApply(t *testing.T) {
	// First like counts once.
	var r LikeRecord
	changed, d := r.Apply("A", true, MakeHLC(10, 0))
	if !changed || d != 1 || !r.Liked || r.Origin != "A" || r.HLC != MakeHLC(10, 0) || !r.Contrib.Equal(Vector{{"A", PN{P: 1}}}) {
		t.Fatalf("first like: changed=%v delta=%d rec=%+v", changed, d, r)
	}

	// Liking again, here or at another replica, does not change the count:
	// only the register's timestamp and origin move.
	for i, at := range []string{"A", "B"} {
		before := r.Clone()
		h := before.HLC + 1
		changed, d := r.Apply(at, true, h)
		if changed || d != 0 {
			t.Fatalf("repeat like #%d at %s: changed=%v delta=%d", i, at, changed, d)
		}
		if !r.Contrib.Equal(before.Contrib) || !r.Liked || r.HLC != h || r.Origin != at || r.Excess() != 0 {
			t.Fatalf("repeat like #%d at %s: %+v (before %+v)", i, at, r, before)
		}
	}

	// Unlike counts once; a second unlike changes nothing but the register.
	changed, d = r.Apply("B", false, r.HLC+1)
	if !changed || d != -1 || r.Liked || r.Contrib.Value() != 0 || r.Excess() != 0 {
		t.Fatalf("unlike: changed=%v delta=%d rec=%+v", changed, d, r)
	}
	before := r.Clone()
	changed, d = r.Apply("B", false, r.HLC+1)
	if changed || d != 0 || !r.Contrib.Equal(before.Contrib) || r.Liked || r.Origin != "B" || r.HLC != before.HLC+1 {
		t.Fatalf("repeat unlike: changed=%v delta=%d rec=%+v (before %+v)", changed, d, r, before)
	}

	// Unlike of a user who never liked: nothing but the HLC changes.
	var z LikeRecord
	changed, d = z.Apply("C", false, MakeHLC(7, 0))
	if changed || d != 0 || z.Liked || z.Contrib != nil || z.HLC != MakeHLC(7, 0) || z.Origin != "C" {
		t.Fatalf("unlike of an unliked user: changed=%v delta=%d rec=%+v", changed, d, z)
	}

	// Apply as the new winner repairs whatever excess it sees, on its own
	// entry only.
	rng := newRand(31)
	pool := replicaPool(4)
	for i := range 2000 {
		rec := randRecord(rng, pool)
		before := rec.Clone()
		self := pool[rng.IntN(len(pool))]
		liked := rng.IntN(2) == 0
		changed, d := rec.Apply(self, liked, before.HLC+1)
		if changed != (before.Liked != liked) {
			t.Fatalf("#%d changed=%v, liked %v -> %v", i, changed, before.Liked, liked)
		}
		if rec.Excess() != 0 {
			t.Fatalf("#%d excess %d after Apply: %+v", i, rec.Excess(), rec)
		}
		if got := rec.Contrib.Value() - before.Contrib.Value(); got != d {
			t.Fatalf("#%d delta %d but contrib value moved by %d", i, d, got)
		}
		if !rec.Contrib.Covers(before.Contrib) {
			t.Fatalf("#%d contrib shrank: %v -> %v", i, before.Contrib, rec.Contrib)
		}
		for _, e := range rec.Contrib {
			if e.Replica != self && e.PN != before.Contrib.Get(e.Replica) {
				t.Fatalf("#%d %s changed %s's entry: %v -> %v", i, self, e.Replica, before.Contrib, rec.Contrib)
			}
		}
	}
}

func TestLikeReconcileOnlyOrigin(t *testing.T) {
	rng := newRand(32)
	pool := replicaPool(4)
	for i := range 2000 {
		rec := randRecord(rng, pool)
		self := pool[rng.IntN(len(pool))]
		before := rec.Clone()
		d := rec.Reconcile(self)
		if self != before.Origin {
			if d != 0 || !rec.Equal(before) {
				t.Fatalf("#%d non-origin %s reconciled %+v -> %+v (delta %d)", i, self, before, rec, d)
			}
			continue
		}
		if rec.Excess() != 0 || d != -before.Excess() {
			t.Fatalf("#%d origin reconcile: excess %d -> %d, delta %d", i, before.Excess(), rec.Excess(), d)
		}
		if rec.Liked != before.Liked || rec.HLC != before.HLC || rec.Origin != before.Origin || !rec.Contrib.Covers(before.Contrib) {
			t.Fatalf("#%d reconcile touched the register or lowered contrib: %+v -> %+v", i, before, rec)
		}
		if got := rec.Contrib.Get(self).Value() - before.Contrib.Get(self).Value(); got != d {
			t.Fatalf("#%d own entry moved by %d, delta %d", i, got, d)
		}
		if rec.Reconcile(self) != 0 {
			t.Fatalf("#%d second Reconcile not a no-op", i)
		}
	}
}

// ---- Convergence simulation ----

type simKey struct{ item, user string }

type simReplica struct {
	id    string
	clock Clock
	skew  int64 // this replica's wall-clock offset in ms
	recs  map[simKey]*LikeRecord
	items map[string]Vector
}

func (r *simReplica) rec(k simKey) *LikeRecord {
	rec, ok := r.recs[k]
	if !ok {
		rec = &LikeRecord{}
		r.recs[k] = rec
	}
	return rec
}

type simMsg struct {
	from, to int
	key      simKey
	rec      *LikeRecord // a copy of the sender's full record
	entry    PN          // the sender's own entry of the item vector
	readyAt  int         // step from which the network may deliver it
}

type simAction struct {
	hlc    HLC
	origin string
	liked  bool
	at     int64 // the client's time of the action; 0: none
	idem   string
}

// register is the action as a like record's register.
func (a simAction) register() *LikeRecord {
	return &LikeRecord{Liked: a.liked, HLC: a.hlc, Origin: a.origin, At: a.at, Idem: a.idem}
}

type simStats struct {
	actions, repairs, drops, dups, delivered, bursts int
	// toggles; timed: actions with a client's time; stale: actions that
	// lost to the state they found (older by their client's time).
	toggles, timed, stale int
}

type sim struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	reps   []*simReplica
	net    []simMsg
	step   int
	wall   int64 // true time, ms
	jitter int64
	delay  int
	dropP  float64
	dupP   float64
	items  []string
	users  []string
	latest map[simKey]simAction // oracle: the winning action per key
	stats  *simStats
	// provenance: a message carries only the sender's portion of a record
	// (its contrib entry, the register if it is the origin), as
	// replication merges them.
	provenance bool
}

func (s *sim) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d step %d: %s", s.seed, s.step, fmt.Sprintf(format, args...))
}

// wallAt is replica r's reading of the wall clock: true time plus its skew
// plus per-reading jitter, so it can stall or go backwards.
func (s *sim) wallAt(r *simReplica) int64 {
	return s.wall + r.skew + s.rng.Int64N(2*s.jitter+1) - s.jitter
}

func (s *sim) send(from, to int, k simKey, lossy bool) {
	if lossy && s.rng.Float64() < s.dropP {
		s.stats.drops++
		return
	}
	r := s.reps[from]
	s.net = append(s.net, simMsg{
		from: from, to: to, key: k,
		rec:     r.recs[k].Clone(),
		entry:   r.items[k.item].Get(r.id),
		readyAt: s.step + s.rng.IntN(s.delay+1),
	})
}

func (s *sim) broadcast(from int, k simKey) {
	for to := range s.reps {
		if to != from {
			s.send(from, to, k, true)
		}
	}
}

func (s *sim) sendFullState(from, to int, lossy bool) {
	keys := slices.Collect(maps.Keys(s.reps[from].recs))
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].item < keys[j].item || keys[i].item == keys[j].item && keys[i].user < keys[j].user
	})
	for _, k := range keys {
		s.send(from, to, k, lossy)
	}
}

func (s *sim) local(ri int, k simKey, liked bool) { s.act(ri, k, liked, 0, false) }

// act is a local action at replica ri: a like or unlike, with the client's
// time at (0: none), or a toggle (liked is then decided from ri's view),
// decided as the writer decides it (Decide).
func (s *sim) act(ri int, k simKey, liked bool, at int64, toggle bool) {
	r := s.reps[ri]
	rec := r.rec(k)
	before := rec.Clone()
	h := r.clock.Now(s.wallAt(r))
	if h <= before.HLC {
		s.fatalf("%s: fresh HLC %v not above the record's %v", r.id, h, before.HLC)
	}
	a := simAction{hlc: h, origin: r.id, liked: liked, at: at}
	if toggle {
		s.stats.toggles++
		a.liked, a.at, a.idem = !before.Liked, before.ToggleAt(h), fmt.Sprintf("t%d", s.stats.toggles)
	}
	applied, changed, delta := rec.Decide(r.id, Action{Liked: a.liked, HLC: h, At: a.at, Idem: a.idem})
	switch {
	case applied != a.register().Wins(before):
		s.fatalf("%s: Decide applied=%v for %+v over %+v", r.id, applied, a, before)
	case toggle && !applied:
		// (An action without a client time may lose, to one whose
		// client's clock ran ahead of this replica's; a toggle never.)
		s.fatalf("%s: a toggle lost to %+v", r.id, before)
	case !applied && (!rec.Equal(before) || changed || delta != 0):
		s.fatalf("%s: a dropped action changed the record: %+v -> %+v", r.id, before, rec)
	case changed != (applied && before.Liked != a.liked):
		s.fatalf("%s: Decide changed=%v for %v -> %v", r.id, changed, before.Liked, a.liked)
	case rec.Excess() != 0 && applied:
		s.fatalf("%s: excess %d right after a local action", r.id, rec.Excess())
	}
	if !applied {
		s.stats.stale++
	}
	r.items[k.item] = r.items[k.item].Add(r.id, delta)
	if l, ok := s.latest[k]; !ok || a.register().Wins(l.register()) {
		s.latest[k] = a
	}
	s.stats.actions++
	s.checkOwnEntry(r, k.item)
	s.broadcast(ri, k)
}

// deliver applies one message at its destination and reports whether the
// destination's state changed.
func (s *sim) deliver(m simMsg) bool {
	s.stats.delivered++
	r := s.reps[m.to]
	if s.provenance {
		m.rec = m.rec.Portion(s.reps[m.from].id)
	}
	r.clock.Observe(m.rec.HLC)
	rec := r.rec(m.key)
	changed := rec.Merge(m.rec)
	if changed {
		delta := rec.Reconcile(r.id)
		if delta != 0 {
			s.stats.repairs++
		}
		if rec.Origin == r.id && rec.Excess() != 0 {
			s.fatalf("%s: origin left excess %d", r.id, rec.Excess())
		}
		r.items[m.key.item] = r.items[m.key.item].Add(r.id, delta)
	}
	itemChanged := false
	if m.entry != (PN{}) {
		r.items[m.key.item], itemChanged = r.items[m.key.item].Merge(Vector{{s.reps[m.from].id, m.entry}})
	}
	s.checkOwnEntry(r, m.key.item)
	if changed {
		s.broadcast(m.to, m.key)
	}
	return changed || itemChanged
}

// deliverOne picks a random message that is ready (any message if all is
// true), possibly leaving a duplicate behind, and delivers it.
func (s *sim) deliverOne(all bool) (delivered, changed bool) {
	// A uniform pick among the ready messages, in net order: count them,
	// draw the k-th, then find it (no list built per delivery).
	ready := 0
	for j := range s.net {
		if all || s.net[j].readyAt <= s.step {
			ready++
		}
	}
	if ready == 0 {
		return false, false
	}
	i, k := -1, s.rng.IntN(ready)
	for k >= 0 {
		i++
		if all || s.net[i].readyAt <= s.step {
			k--
		}
	}
	m := s.net[i]
	if s.rng.Float64() < s.dupP {
		s.stats.dups++
		s.net[i].readyAt = s.step + s.rng.IntN(s.delay+1)
	} else {
		s.net[i] = s.net[len(s.net)-1]
		s.net = s.net[:len(s.net)-1]
	}
	return true, s.deliver(m)
}

// checkOwnEntry asserts the local invariant: r's own entry of the item
// vector is the sum of its own Contrib entries over the item's users.
func (s *sim) checkOwnEntry(r *simReplica, item string) {
	var sum PN
	for k, rec := range r.recs {
		if k.item == item {
			e := rec.Contrib.Get(r.id)
			sum.P += e.P
			sum.N += e.N
		}
	}
	if got := r.items[item].Get(r.id); got != sum {
		s.fatalf("%s: own entry of %s = %v, Σ contrib = %v", r.id, item, got, sum)
	}
}

func (s *sim) randKey() simKey {
	return simKey{s.items[s.rng.IntN(len(s.items))], s.users[s.rng.IntN(len(s.users))]}
}

func runConvergence(t *testing.T, seed uint64, provenance bool, stats *simStats) {
	rng := newRand(seed)
	n := 2 + int(seed%4)
	s := &sim{
		t: t, seed: seed, rng: rng, stats: stats, provenance: provenance,
		wall:   1_700_000_000_000 + rng.Int64N(1_000_000),
		jitter: int64(rng.IntN(40)),
		delay:  rng.IntN(30),
		dropP:  []float64{0, 0.1, 0.3}[rng.IntN(3)],
		dupP:   []float64{0, 0.1, 0.25}[rng.IntN(3)],
		latest: map[simKey]simAction{},
	}
	for i := range 1 + rng.IntN(3) {
		s.items = append(s.items, fmt.Sprintf("item%d", i))
	}
	for i := range 1 + rng.IntN(4) {
		s.users = append(s.users, fmt.Sprintf("user%d", i))
	}
	ids := rng.Perm(26)
	for i := range n {
		s.reps = append(s.reps, &simReplica{
			// Random names, so the origin tie-break is not tied to index.
			id:    string(rune('a' + ids[i])),
			skew:  rng.Int64N(600) - 300,
			recs:  map[simKey]*LikeRecord{},
			items: map[string]Vector{},
		})
	}

	steps := 50 + rng.IntN(250)
	for s.step = 0; s.step < steps; s.step++ {
		s.wall += int64(rng.IntN(8)) // sometimes stalls
		switch p := rng.IntN(100); {
		case p < 25:
			s.local(rng.IntN(n), s.randKey(), rng.IntN(3) != 0)
		case p < 31:
			// An action with its client's time: up to 2 s old, as a
			// queued event arrives, or a little ahead of true time.
			s.stats.timed++
			s.act(rng.IntN(n), s.randKey(), rng.IntN(2) == 0, s.wall-rng.Int64N(2000)+rng.Int64N(100), false)
		case p < 35:
			s.act(rng.IntN(n), s.randKey(), false, 0, true)
		case p < 43:
			// The same user acts at several replicas before any of them
			// hears of the others.
			s.stats.bursts++
			k := s.randKey()
			for _, ri := range rng.Perm(n)[:2+rng.IntN(n-1)] {
				s.local(ri, k, rng.IntN(4) != 0)
			}
		case p < 47:
			// Periodic anti-entropy between two replicas, itself lossy.
			from, to := rng.IntN(n), rng.IntN(n)
			if from != to {
				s.sendFullState(from, to, true)
			}
		default:
			for range 1 + rng.IntN(3) {
				s.deliverOne(false)
			}
		}
	}

	// Drain what is in flight (still lossy), then anti-entropy rounds with
	// a reliable network until a whole round changes nothing.
	for len(s.net) > 0 {
		s.step++
		s.deliverOne(true)
	}
	for round := 0; ; round++ {
		if round > 50 {
			s.fatalf("no quiescence after %d anti-entropy rounds", round)
		}
		for from := range s.reps {
			for to := range s.reps {
				if from != to {
					s.sendFullState(from, to, false)
				}
			}
		}
		changed := false
		for len(s.net) > 0 {
			s.step++
			_, c := s.deliverOne(true)
			changed = changed || c
		}
		if !changed {
			break
		}
	}
	s.checkConverged()
}

func (s *sim) checkConverged() {
	r0 := s.reps[0]
	if len(r0.recs) != len(s.latest) {
		s.fatalf("replica %s holds %d records, %d keys were acted on", r0.id, len(r0.recs), len(s.latest))
	}
	for _, r := range s.reps {
		if len(r.recs) != len(r0.recs) {
			s.fatalf("%s holds %d records, %s holds %d", r.id, len(r.recs), r0.id, len(r0.recs))
		}
		for k, rec := range r.recs {
			if o := r0.recs[k]; o == nil || !rec.Equal(o) {
				s.fatalf("%v: %s has %+v, %s has %+v", k, r.id, rec, r0.id, o)
			}
			if rec.Excess() != 0 {
				s.fatalf("%v: excess %d at quiescence: %+v", k, rec.Excess(), rec)
			}
			a := s.latest[k]
			if rec.HLC != a.hlc || rec.Origin != a.origin || rec.Liked != a.liked || rec.At != a.at || rec.Idem != a.idem {
				s.fatalf("%v: record %+v, but the latest action was %+v", k, rec, a)
			}
		}
		for _, item := range s.items {
			if !r.items[item].Equal(r0.items[item]) {
				s.fatalf("%s: %s has %v, %s has %v", item, r.id, r.items[item], r0.id, r0.items[item])
			}
			s.checkOwnEntry(r, item)
		}
	}
	for _, item := range s.items {
		want := 0
		for _, u := range s.users {
			if a, ok := s.latest[simKey{item, u}]; ok && a.liked {
				want++
			}
		}
		if got := r0.items[item].Value(); got != int64(want) {
			s.fatalf("%s: count %d, %d users' latest action is like (vector %v)", item, got, want, r0.items[item])
		}
	}
}

func TestLikeConvergence(t *testing.T) {
	for _, provenance := range []bool{false, true} {
		t.Run(fmt.Sprintf("provenance=%v", provenance), func(t *testing.T) {
			var stats simStats
			for seed := range uint64(200) {
				runConvergence(t, seed, provenance, &stats)
			}
			t.Logf("%+v", stats)
			// The scenarios must actually exercise what they claim to.
			if stats.repairs == 0 || stats.drops == 0 || stats.dups == 0 || stats.bursts == 0 ||
				stats.toggles == 0 || stats.timed == 0 || stats.stale == 0 {
				t.Fatalf("simulation did not exercise repairs/drops/duplicates/bursts/toggles/client times/stale actions: %+v", stats)
			}
		})
	}
}

// Additions counts every addition ever made for the user and never goes
// down: it is 1 after a first like, still 1 after an unlike, 2 after a
// re-like, and a merge keeps the larger view.
func TestAdditionsOnlyGrow(t *testing.T) {
	var a LikeRecord
	steps := []struct {
		liked bool
		want  uint64
	}{{true, 1}, {true, 1}, {false, 1}, {true, 2}, {false, 2}}
	for i, s := range steps {
		a.Apply("A", s.liked, HLC(uint64(i+1)<<16))
		if got := a.Additions(); got != s.want {
			t.Fatalf("step %d (liked %v): additions %d, want %d", i, s.liked, got, s.want)
		}
	}
	var b LikeRecord
	b.Apply("B", true, HLC(1<<16))
	b.Merge(&a)
	if got := b.Additions(); got != 3 {
		t.Fatalf("merged additions %d, want 2 from A and 1 from B", got)
	}
}

func TestPortionAndRestrict(t *testing.T) {
	rec := &LikeRecord{Liked: true, HLC: 7, Origin: "b", Contrib: Vector{{"a", PN{P: 1}}, {"b", PN{P: 1, N: 1}}, {"c", PN{N: 2}}}}
	if got, want := rec.Portion("b"), (&LikeRecord{Liked: true, HLC: 7, Origin: "b", Contrib: Vector{{"b", PN{P: 1, N: 1}}}}); !got.Equal(want) {
		t.Fatalf("Portion(b) = %+v, want %+v", got, want)
	}
	if got, want := rec.Portion("c"), (&LikeRecord{Contrib: Vector{{"c", PN{N: 2}}}}); !got.Equal(want) {
		t.Fatalf("Portion(c) = %+v, want %+v", got, want)
	}
	if got := rec.Portion("z"); !got.Equal(&LikeRecord{}) {
		t.Fatalf("Portion(z) = %+v, want empty", got)
	}
	// A portion never wins against a real register unless it is the origin's.
	var local LikeRecord
	local.Apply("a", false, 9)
	if local.Merge(rec.Portion("c")); local.Origin != "a" || local.HLC != 9 {
		t.Fatalf("a non-origin portion changed the register: %+v", local)
	}
	got, cut := rec.Restrict(func(id string) bool { return id != "c" })
	if want := (&LikeRecord{Liked: true, HLC: 7, Origin: "b", Contrib: Vector{{"a", PN{P: 1}}, {"b", PN{P: 1, N: 1}}}}); !cut || !got.Equal(want) {
		t.Fatalf("Restrict(not c) = %+v, %v; want %+v, true", got, cut, want)
	}
	got, cut = rec.Restrict(func(id string) bool { return id != "b" })
	if want := (&LikeRecord{Contrib: Vector{{"a", PN{P: 1}}, {"c", PN{N: 2}}}}); !cut || !got.Equal(want) {
		t.Fatalf("Restrict(not b) = %+v, %v; want %+v, true", got, cut, want)
	}
	if got, cut = rec.Restrict(func(string) bool { return true }); cut || !got.Equal(rec) {
		t.Fatalf("Restrict(all) = %+v, %v", got, cut)
	}
}

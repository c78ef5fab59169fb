package crdt

import "testing"

// The client's time of an action orders it (issue 34's scenario): an
// unlike at t, then a like at t − 30 s that reaches another replica
// later, with a later HLC, leaves the user unliked everywhere, with the
// count exact.
func TestLikeClientTimeOrdersActions(t *testing.T) {
	const tMs = 1_700_000_000_000
	for _, heard := range []bool{true, false} {
		// Replica a likes (no client time), then unlikes at t; replica b
		// takes the late like, having heard of the unlike or not.
		a, b := &LikeRecord{}, &LikeRecord{}
		var va, vb Vector
		_, _, d := a.Decide("a", Action{Liked: true, HLC: MakeHLC(tMs-60_000, 0)})
		va = va.Add("a", d)
		_, _, d = a.Decide("a", Action{Liked: false, HLC: MakeHLC(tMs, 0), At: tMs})
		va = va.Add("a", d)
		if heard {
			b.Merge(a)
		}
		applied, changed, d := b.Decide("b", Action{Liked: true, HLC: MakeHLC(tMs+5_000, 0), At: tMs - 30_000})
		vb = vb.Add("b", d)
		if heard && (applied || changed || d != 0 || b.Liked) {
			t.Fatalf("heard: the late like applied=%v changed=%v delta=%d over the unlike: %+v", applied, changed, d, b)
		}
		if !heard && (!applied || !b.Liked) {
			t.Fatalf("not heard: the late like was not applied to b's own view: %+v", b)
		}
		// Exchange both ways; each replica runs the winner's duty.
		for range 2 {
			x, y := a.Clone(), b.Clone()
			if a.Merge(y) {
				va = va.Add("a", a.Reconcile("a"))
			}
			if b.Merge(x) {
				vb = vb.Add("b", b.Reconcile("b"))
			}
		}
		if !a.Equal(b) || a.Liked || a.At != tMs || a.Origin != "a" {
			t.Fatalf("heard=%v: a %+v, b %+v; want both unliked at t by a", heard, a, b)
		}
		if got, _ := va.Merge(vb); got.Value() != 0 {
			t.Fatalf("heard=%v: count %d (vector %v), want 0", heard, got.Value(), got)
		}
	}
}

// Without client times the order is the HLC's, as before; an action
// without one is ordered by its HLC's wall time against one with one.
func TestLikeOrderMixed(t *testing.T) {
	h := MakeHLC(1000, 0)
	plain := &LikeRecord{Liked: true, HLC: h + 1, Origin: "a"}
	older := &LikeRecord{Liked: false, HLC: h, Origin: "b"}
	if !plain.Wins(older) || older.Wins(plain) {
		t.Fatal("without client times the larger HLC must win")
	}
	// A client time of 999 ms loses to an HLC of 1000 ms, one of 1001 ms
	// wins over it; one of 1000 ms ties, and the HLC breaks it.
	for _, c := range []struct {
		at   int64
		hlc  HLC
		wins bool
	}{{999, h + 100, false}, {1001, h - 100, true}, {1000, h + 5, true}, {1000, h, false}} {
		timed := &LikeRecord{Liked: false, HLC: c.hlc, Origin: "b", At: c.at}
		if got := timed.Wins(plain); got != c.wins || plain.Wins(timed) == got {
			t.Errorf("at %d hlc %v vs plain %v: wins %v, want %v", c.at, c.hlc, plain.HLC, got, c.wins)
		}
	}
}

// A toggle is ordered right after the state it flips, even when that
// state's client time is ahead of the replica's clock, and carries its key.
func TestToggleAt(t *testing.T) {
	r := &LikeRecord{Liked: true, HLC: MakeHLC(1000, 0), Origin: "b", At: 1500, Contrib: Vector{{"b", PN{P: 1}}}}
	h := MakeHLC(1200, 0)
	at := r.ToggleAt(h)
	if at != 1500 {
		t.Fatalf("ToggleAt = %d, want 1500 (the state's time)", at)
	}
	applied, changed, d := r.Decide("a", Action{Liked: false, HLC: h, At: at, Idem: "k"})
	if !applied || !changed || d != -1 || r.Liked || r.Idem != "k" || r.Excess() != 0 {
		t.Fatalf("toggle: applied=%v changed=%v delta=%d rec=%+v", applied, changed, d, r)
	}
	if at := r.ToggleAt(MakeHLC(2000, 0)); at != 0 {
		t.Fatalf("ToggleAt behind the clock = %d, want 0 (its HLC orders it)", at)
	}
	// A plain action later decided replaces the key: it is the register's.
	if applied, _, _ := r.Decide("a", Action{Liked: true, HLC: MakeHLC(2000, 0)}); !applied || r.Idem != "" {
		t.Fatalf("plain like after a toggle: %+v", r)
	}
}

// Decide is Merge of the action's register plus the winner's duty: on
// random records it applies exactly when the action wins, and the result
// is the merge's.
func TestLikeDecideIsMerge(t *testing.T) {
	rng := newRand(34)
	pool := replicaPool(3)
	for i := range 5000 {
		rec := randRecord(rng, pool)
		self := pool[rng.IntN(len(pool))]
		rec.Reconcile(self) // the writer's duty is done whenever its view changes
		a := Action{Liked: rng.IntN(2) == 0, HLC: MakeHLC(int64(1+rng.IntN(3)), uint16(rng.IntN(2))), At: int64(rng.IntN(4))}
		in := &LikeRecord{Liked: a.Liked, HLC: a.HLC, Origin: self, At: a.At}
		want := rec.Clone()
		want.Merge(in)
		want.Reconcile(self)
		got := rec.Clone()
		applied, _, d := got.Decide(self, a)
		if applied != in.Wins(rec) || !got.Equal(want) {
			t.Fatalf("#%d Decide(%+v) on %+v = %v %+v, want the merge %+v", i, a, rec, applied, got, want)
		}
		if d != got.Contrib.Value()-rec.Contrib.Value() {
			t.Fatalf("#%d delta %d, contrib moved by %d", i, d, got.Contrib.Value()-rec.Contrib.Value())
		}
	}
}

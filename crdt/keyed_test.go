package crdt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
)

// Keyed records: an increment with an idempotency key, retried at several
// replicas that have not heard of each other's application, counts once
// (the amount of the latest application) after any lossy, duplicating,
// reordering delivery of the replicas' portions.

type keyedReplica struct {
	id      string
	clock   Clock
	recs    map[string]*KeyedRecord
	counter Vector
}

type keyedMsg struct {
	to    int
	key   string
	rec   *KeyedRecord // the sender's portion
	entry Entry        // the sender's own counter entry
}

func TestKeyedConvergence(t *testing.T) {
	var applied, dups, repairs int
	for seed := range uint64(300) {
		rng := newRand(seed)
		n := 2 + int(seed%4)
		reps := make([]*keyedReplica, n)
		for i, p := range rng.Perm(26)[:n] {
			reps[i] = &keyedReplica{id: string(rune('a' + p)), recs: map[string]*KeyedRecord{}}
		}
		keys := make([]string, 1+rng.IntN(4))
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i)
		}
		type app struct {
			hlc    HLC
			origin string
			amount int64
		}
		latest := map[string]app{}
		var net []keyedMsg
		wall := int64(1_700_000_000_000)
		send := func(from int, key string, lossy bool) {
			r := reps[from]
			for to := range reps {
				if to == from || lossy && rng.IntN(5) == 0 {
					continue
				}
				net = append(net, keyedMsg{to: to, key: key, rec: r.recs[key].Portion(r.id),
					entry: Entry{Replica: r.id, PN: r.counter.Get(r.id)}})
			}
		}
		deliver := func(m keyedMsg) bool {
			r := reps[m.to]
			rec, ok := r.recs[m.key]
			if !ok {
				rec = &KeyedRecord{}
				r.recs[m.key] = rec
			}
			r.clock.Observe(m.rec.HLC)
			changed := rec.Merge(m.rec)
			if changed {
				if d := rec.Reconcile(r.id); d != 0 {
					repairs++
					r.counter = r.counter.Add(r.id, d)
				}
			}
			var vc bool
			r.counter, vc = r.counter.Merge(Vector{m.entry})
			if changed {
				send(m.to, m.key, true)
			}
			return changed || vc
		}
		apply := func(ri int, key string, amount int64) {
			r := reps[ri]
			if rec, ok := r.recs[key]; ok && (rec.HLC != 0 || len(rec.Contrib) > 0) {
				dups++ // applied somewhere this replica heard of: a duplicate
				return
			}
			rec := &KeyedRecord{}
			r.recs[key] = rec
			h := r.clock.Now(wall + rng.Int64N(50))
			d := rec.Apply(r.id, amount, h)
			if d != amount || rec.Excess() != 0 {
				t.Fatalf("seed %d: first application of %d moved the counter by %d, excess %d", seed, amount, d, rec.Excess())
			}
			r.counter = r.counter.Add(r.id, d)
			applied++
			if a, ok := latest[key]; !ok || a.hlc < h || a.hlc == h && a.origin < r.id {
				latest[key] = app{h, r.id, amount}
			}
			send(ri, key, true)
		}
		amountOf := map[string]int64{}
		for _, k := range keys {
			amountOf[k] = rng.Int64N(11) - 5
		}
		for step := 0; step < 40+rng.IntN(200); step++ {
			wall += int64(rng.IntN(5))
			switch p := rng.IntN(100); {
			case p < 30:
				k := keys[rng.IntN(len(keys))]
				a := amountOf[k]
				if rng.IntN(10) == 0 {
					a = rng.Int64N(11) - 5 // a client reusing a key for another amount
				}
				for _, ri := range rng.Perm(n)[:1+rng.IntN(n)] { // retries at several regions
					apply(ri, k, a)
				}
			default:
				for range 1 + rng.IntN(3) {
					if len(net) == 0 {
						break
					}
					i := rng.IntN(len(net))
					m := net[i]
					if rng.IntN(8) != 0 { // else delivered again later
						net[i] = net[len(net)-1]
						net = net[:len(net)-1]
					}
					deliver(m)
				}
			}
		}
		for len(net) > 0 {
			m := net[len(net)-1]
			net = net[:len(net)-1]
			deliver(m)
		}
		for round := 0; ; round++ {
			if round > 50 {
				t.Fatalf("seed %d: no quiescence", seed)
			}
			for from := range reps {
				for _, k := range slices.Sorted(maps.Keys(reps[from].recs)) {
					send(from, k, false)
				}
			}
			changed := false
			for len(net) > 0 {
				m := net[0]
				net = net[1:]
				changed = deliver(m) || changed
			}
			if !changed {
				break
			}
		}
		var want int64
		for _, a := range latest {
			want += a.amount
		}
		r0 := reps[0]
		for _, r := range reps {
			if got := r.counter.Value(); got != want {
				t.Fatalf("seed %d: %s counts %d, the latest applications add up to %d", seed, r.id, got, want)
			}
			if !r.counter.Equal(r0.counter) {
				t.Fatalf("seed %d: %s has %v, %s has %v", seed, r.id, r.counter, r0.id, r0.counter)
			}
			for k, rec := range r.recs {
				a := latest[k]
				if !rec.Equal(r0.recs[k]) || rec.Excess() != 0 || rec.HLC != a.hlc || rec.Amount != a.amount {
					t.Fatalf("seed %d key %s: %s has %+v (excess %d), %s has %+v; latest application %+v",
						seed, k, r.id, rec, rec.Excess(), r0.id, r0.recs[k], a)
				}
			}
		}
	}
	t.Logf("applied %d, duplicates %d, repairs %d", applied, dups, repairs)
	if dups == 0 || repairs == 0 {
		t.Fatal("the simulation did not exercise duplicates and repairs")
	}
}

// A keyed record keeps its kind and amount through encoding, portions and
// merges with portions that carry no register.
func TestKeyedRecordEncoding(t *testing.T) {
	rec := &KeyedRecord{}
	rec.Apply("us-1", -7, MakeHLC(1_700_000_000_000, 2))
	rec.Contrib = rec.Contrib.Add("eu-1", -7)
	for _, r := range []*KeyedRecord{rec, rec.Portion("eu-1"), rec.Portion("us-1"), {}} {
		b := AppendKeyedRecord(nil, r)
		got, err := DecodeKeyedRecord(b)
		if err != nil || !got.Equal(r) {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
		if b[1]&2 == 0 {
			t.Fatalf("%+v encodes without the keyed flag: % x", r, b)
		}
		if _, err := DecodeLikeRecord(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a keyed record decoded as a like record: %v", err)
		}
	}
	if p := rec.Portion("eu-1"); p.Applied() || p.HLC != 0 || p.Amount != 0 {
		t.Fatalf("a non-origin portion should hold no register: %+v", p)
	}
	if got := rec.Excess(); got != -7 {
		t.Fatalf("two applications of -7 with target -7: excess %d, want -7", got)
	}
	if d := rec.Reconcile("us-1"); d != 7 || rec.Excess() != 0 {
		t.Fatalf("the origin's repair moved its entry by %d (want 7), excess now %d", d, rec.Excess())
	}
	// A keyed record that says it was never applied is corrupt.
	bad := cat(1, 2, 5, "a", binary.AppendVarint(nil, 1), 0)
	if _, err := DecodeKeyedRecord(bad); err == nil {
		t.Fatal("decoded a keyed record that was never applied")
	}
}

// An approximate counter's keyed increment: the client asked for 1, and
// two replicas that had not heard of each other counted 64 and 0. Merged
// either way round, the record keeps the later application's decision
// (every replica's contributions reconcile to it) and still knows the
// client asked for 1.
func TestKeyedApproxApplicationsKeepTheLaterDecision(t *testing.T) {
	a, b := &KeyedRecord{}, &KeyedRecord{}
	da := a.ApplyCounted("a", 1, 64, MakeHLC(1000, 0))
	db := b.ApplyCounted("b", 1, 0, MakeHLC(2000, 0))
	if da != 64 || db != 0 || a.Asked != 1 || b.Asked != 1 {
		t.Fatalf("applications: a %+v (delta %d), b %+v (delta %d)", a, da, b, db)
	}
	for _, order := range [][2]*KeyedRecord{{a, b}, {b, a}} {
		m := order[0].Clone()
		m.Merge(order[1])
		if m.Amount != 0 || m.Requested() != 1 || m.Origin != "b" {
			t.Fatalf("merged register %+v: want b's decision 0, asked 1", m)
		}
		// Only b, the winner, reconciles: it takes a's 64 back.
		if d := m.Reconcile("a"); d != 0 {
			t.Fatalf("a reconciled by %d", d)
		}
		if d := m.Reconcile("b"); d != -64 || m.Contrib.Value() != 0 || m.Excess() != 0 {
			t.Fatalf("b reconciled by %d to %+v", d, m)
		}
	}
	exact := &KeyedRecord{}
	exact.Apply("a", 5, MakeHLC(1000, 0))
	if exact.Asked != 0 || exact.Requested() != 5 {
		t.Fatalf("an exact application stores asked: %+v", exact)
	}
}

// lattice is what the merge laws ask of a record type.
type lattice[R any] interface {
	Clone() R
	Merge(R) bool
	Equal(R) bool
	Wins(R) bool
}

// checkMergeLaws checks Merge on a, b, c: commutative, associative and
// idempotent, reporting exactly whether the receiver changed and leaving
// its argument alone; and Wins a strict order on registers that are not
// the same write (same says whether they are).
func checkMergeLaws[R lattice[R]](t *testing.T, i int, a, b, c R, same bool) {
	t.Helper()
	merged := func(x, y R) R {
		z := x.Clone()
		z.Merge(y)
		return z
	}
	if ab, ba := merged(a, b), merged(b, a); !ab.Equal(ba) {
		t.Fatalf("#%d commutativity:\n a=%+v\n b=%+v\n a+b=%+v\n b+a=%+v", i, a, b, ab, ba)
	}
	if l, r := merged(merged(a, b), c), merged(a, merged(b, c)); !l.Equal(r) {
		t.Fatalf("#%d associativity:\n a=%+v\n b=%+v\n c=%+v\n (a+b)+c=%+v\n a+(b+c)=%+v", i, a, b, c, l, r)
	}
	if aa := a.Clone(); aa.Merge(a) || !aa.Equal(a) {
		t.Fatalf("#%d idempotence: a=%+v a+a=%+v", i, a, aa)
	}
	x, snapB := a.Clone(), b.Clone()
	if changed := x.Merge(b); changed == x.Equal(a) {
		t.Fatalf("#%d Merge reported changed=%v, result equal to receiver = %v\n a=%+v\n b=%+v", i, changed, x.Equal(a), a, b)
	}
	if !b.Equal(snapB) {
		t.Fatalf("#%d Merge modified its argument: %+v -> %+v", i, snapB, b)
	}
	if aw, bw := a.Wins(b), b.Wins(a); aw && bw || !same && aw == bw || same && (aw || bw) {
		t.Fatalf("#%d Wins not a strict total order: a=%+v b=%+v a.Wins=%v b.Wins=%v", i, a, b, aw, bw)
	}
}

// Keyed records and spends are the same lattice as like records, with the
// amounts in the register: the merge laws hold for both, and a merge's
// register is the winner's, amounts and all.
func TestKeyedAndSpendMergeLaws(t *testing.T) {
	rng := newRand(31)
	pool := replicaPool(3)
	for i := range 5000 {
		a, b, c := randKeyedRecord(rng, pool), randKeyedRecord(rng, pool), randKeyedRecord(rng, pool)
		if i%4 == 0 {
			b.HLC = a.HLC
			if i%8 == 0 {
				b.Origin = a.Origin
			}
			if b.HLC == 0 {
				b.Fenced = false // no register, no fence
			}
		}
		same := a.HLC == b.HLC && a.Origin == b.Origin && a.Amount == b.Amount && a.Asked == b.Asked && a.At == b.At && a.Fenced == b.Fenced
		checkMergeLaws(t, i, a, b, c, same)
		sa, sb, sc := (*Spend)(a.Clone()), (*Spend)(b.Clone()), (*Spend)(c.Clone())
		checkMergeLaws(t, i, sa, sb, sc, same)

		ab := a.Clone()
		ab.Merge(b)
		want := a
		if b.Wins(a) {
			want = b
		}
		if ab.HLC != want.HLC || ab.Origin != want.Origin || ab.Amount != want.Amount || ab.Asked != want.Asked || ab.At != want.At ||
			ab.Fenced != want.Fenced {
			t.Fatalf("#%d register of %+v + %+v = %+v, want that of %+v", i, a, b, ab, want)
		}
		if s := sa.Clone(); s.Merge(sb) != !ab.Equal(a) || !(*KeyedRecord)(s).Equal(ab) {
			t.Fatalf("#%d a spend merges unlike a keyed record: %+v, want %+v", i, s, ab)
		}
	}
}

// A fence beats every application of its key, whatever their stamps, in
// either merge order; the fence's origin then takes the key's
// contributions back through its own entry (a counter), and on a
// budget's record every replica that spent under the key refunds its
// own spend, the fence's origin too.
func TestFenceBeatsApplications(t *testing.T) {
	credit := &KeyedRecord{HLC: MakeHLC(2000, 0), Origin: "eu-1", Amount: 5, Contrib: Vector{{"eu-1", PN{P: 5}}}}
	fence := &KeyedRecord{}
	fence.Fence("us-1", MakeHLC(1000, 0), 1500)
	for _, order := range [][2]*KeyedRecord{{credit, fence}, {fence, credit}} {
		r := order[0].Clone()
		r.Merge(order[1])
		if !r.IsFenced() || r.Origin != "us-1" || r.Amount != 0 || r.BookedMs() != 1500 {
			t.Fatalf("merged: %+v, want us-1's fence", r)
		}
		if d := r.Reconcile("eu-1"); d != 0 {
			t.Fatalf("the credit's origin acted: %d", d)
		}
		if d := r.Reconcile("us-1"); d != -5 || r.Excess() != 0 {
			t.Fatalf("the fence's origin took back %d (excess now %d), want -5", d, r.Excess())
		}
	}
	// A later application does not beat an earlier fence either.
	late := &KeyedRecord{HLC: MakeHLC(9000, 0), Origin: "eu-2", Amount: 5}
	if late.Wins(fence) || !fence.Wins(late) {
		t.Fatal("an application beat a fence")
	}
	// Budgets: us-1 spent under the key and then fenced it; eu-1 spent
	// under it too. Both refund their own.
	s := &Spend{HLC: MakeHLC(1000, 0), Origin: "us-1", Amount: -5, Contrib: Vector{{"us-1", PN{N: 5}}}}
	s.Fence("us-1", MakeHLC(1001, 0), 0)
	s.Merge(&Spend{HLC: MakeHLC(3000, 0), Origin: "eu-1", Amount: -5, Contrib: Vector{{"eu-1", PN{N: 5}}}})
	if !s.IsFenced() {
		t.Fatal("the spend beat the fence")
	}
	if d := s.RefundLoser("us-1"); d != 5 {
		t.Fatalf("the fence's origin refunded %d, want 5", d)
	}
	if d := s.RefundLoser("eu-1"); d != 5 {
		t.Fatalf("the other spender refunded %d, want 5", d)
	}
	if s.Excess() != 0 {
		t.Fatalf("excess %d after both refunds", s.Excess())
	}
	// Unfenced, the winner keeps its spend.
	w := &Spend{HLC: MakeHLC(1000, 0), Origin: "us-1", Amount: -5, Contrib: Vector{{"us-1", PN{N: 5}}}}
	if d := w.RefundLoser("us-1"); d != 0 {
		t.Fatalf("the winner refunded %d", d)
	}
}

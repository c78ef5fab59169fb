package alloc

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// TestStateRandomOps drives the state machine with random acquires,
// partial use, renewals, releases and reclaims by several holders, and
// checks after every step that the invariants hold, and at the end that
// the numbers used are exactly [1, n): none used twice, none skipped.
func TestStateRandomOps(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			st := NewState()
			used := map[uint64]bool{}
			// next[epoch] is how far the holder has used its lease; the
			// state only knows what was reported (Used).
			next := map[uint64]uint64{}
			holders := []string{"a", "b", "c", "d"}
			use := func(l Lease, k uint64) {
				for n := next[l.Epoch]; n < min(l.End, next[l.Epoch]+k); n++ {
					if used[n] {
						t.Fatalf("number %d used twice", n)
					}
					used[n] = true
				}
				next[l.Epoch] = min(l.End, next[l.Epoch]+k)
			}
			for step := 0; step < 300; step++ {
				h := holders[rng.IntN(len(holders))]
				var mine []Lease
				for _, l := range st.Leases {
					if l.Holder == h {
						mine = append(mine, l)
					}
				}
				switch op := rng.IntN(10); {
				case op < 3 || len(mine) == 0:
					l := st.Acquire(h, uint64(1+rng.IntN(20)))
					next[l.Epoch] = l.Start
				case op < 6:
					l := mine[rng.IntN(len(mine))]
					use(l, uint64(rng.IntN(10)))
					if err := st.Renew(h, l.Epoch, next[l.Epoch]); err != nil {
						t.Fatal(err)
					}
				case op < 8:
					l := mine[rng.IntN(len(mine))]
					use(l, uint64(rng.IntN(10)))
					if err := st.Release(h, l.Epoch, next[l.Epoch]); err != nil {
						t.Fatal(err)
					}
				default:
					// A reclaim after the holder's last report: the holder
					// is gone for good and used nothing since.
					l := mine[rng.IntN(len(mine))]
					if err := st.Renew(h, l.Epoch, next[l.Epoch]); err != nil {
						t.Fatal(err)
					}
					if l2, ok := st.Lease(l.Epoch); ok && !st.Reclaim(l2.Epoch, l2.Beat) {
						t.Fatal("reclaim with the current beat failed")
					}
				}
				if err := st.Check(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				back, err := DecodeState(st.Encode())
				if err != nil {
					t.Fatalf("step %d: round trip: %v", step, err)
				}
				st = back
			}
			// Everyone gives back, then one holder drains the free list.
			for _, l := range append([]Lease(nil), st.Leases...) {
				if err := st.Release(l.Holder, l.Epoch, next[l.Epoch]); err != nil {
					t.Fatal(err)
				}
			}
			for len(st.Free) > 0 {
				l := st.Acquire("z", 7)
				next[l.Epoch] = l.Start
				use(l, l.Len())
				if err := st.Renew("z", l.Epoch, l.End); err != nil {
					t.Fatal(err)
				}
			}
			if len(st.Leases) != 0 {
				t.Fatalf("leases left: %+v", st.Leases)
			}
			for n := uint64(1); n < st.HWM; n++ {
				if !used[n] {
					t.Fatalf("number %d skipped (hwm %d)", n, st.HWM)
				}
			}
			if uint64(len(used)) != st.HWM-1 {
				t.Fatalf("%d numbers used, hwm %d", len(used), st.HWM)
			}
		})
	}
}

func TestReclaimNeedsTheWatchedBeat(t *testing.T) {
	st := NewState()
	l := st.Acquire("a", 10)
	if err := st.Renew("a", l.Epoch, l.Start+3); err != nil {
		t.Fatal(err)
	}
	if st.Reclaim(l.Epoch, 0) {
		t.Fatal("reclaimed with a stale beat: the holder renewed since")
	}
	cur, _ := st.Lease(l.Epoch)
	if !st.Reclaim(l.Epoch, cur.Beat) {
		t.Fatal("reclaim with the current beat failed")
	}
	if len(st.Free) != 0 || st.HWM != l.Start+3 {
		t.Fatalf("tail [%d,%d) should lower hwm to %d: free %v hwm %d", l.Start+3, l.End, l.Start+3, st.Free, st.HWM)
	}
	if err := st.Renew("a", l.Epoch, l.End); err == nil {
		t.Fatal("renew of a reclaimed lease succeeded")
	}
}

func TestFreeListFirst(t *testing.T) {
	st := NewState()
	a := st.Acquire("a", 10) // [1,11)
	b := st.Acquire("b", 10) // [11,21)
	if err := st.Release("a", a.Epoch, 4); err != nil {
		t.Fatal(err)
	}
	c := st.Acquire("c", 100)
	if c.Start != 4 || c.End != 11 {
		t.Fatalf("acquire after a release took [%d,%d), want the freed tail [4,11)", c.Start, c.End)
	}
	d := st.Acquire("c", 5)
	if d.Start != b.End {
		t.Fatalf("then [%d,%d), want fresh numbers from %d", d.Start, d.End, b.End)
	}
}

func FuzzDecodeState(f *testing.F) {
	st := NewState()
	st.Acquire("a", 10)
	f.Add(st.Encode())
	f.Add([]byte(`{"v":1,"hwm":5,"next_epoch":2,"free":[{"start":1,"end":5}]}`))
	f.Add([]byte(`{"v":1,"hwm":5,"next_epoch":2,"leases":[{"epoch":1,"holder":"x","start":3,"end":9,"used":3}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeState(b)
		if err != nil {
			return
		}
		// Whatever decodes satisfies the invariants and survives use.
		if err := st.Check(); err != nil {
			t.Fatalf("decoded state fails Check: %v", err)
		}
		st.Acquire("fuzz", 3)
		if err := st.Check(); err != nil {
			t.Fatalf("acquire broke a decoded state: %v", err)
		}
	})
}

// Whatever decodes is what a Snapshot of the same leases encodes: a
// re-encode of the decoded (epoch, next) pairs, as leases [next, next+1),
// decodes to the same map.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte{1, 1, 3, 10, 20, 12})
	f.Add([]byte{})
	f.Add(appendSnapshot(nil, []snapLease{{Epoch: 1, Start: 0, End: 100, Next: 7}, {Epoch: 4, Start: 100, End: 200, Next: 200}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeSnapshot(b)
		if err != nil {
			return
		}
		var leases []snapLease
		for epoch, next := range m {
			leases = append(leases, snapLease{Epoch: epoch, Start: next, End: next, Next: next})
		}
		again, err := decodeSnapshot(appendSnapshot(nil, leases))
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if !maps.Equal(again, m) {
			t.Fatalf("round trip changed the snapshot: %v, then %v", m, again)
		}
	})
}

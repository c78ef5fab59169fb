package alloc

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// TestStateRandomOps drives the state machine with random acquires,
// partial use, renewals, releases and reclaims by several leaseholders, and
// checks after every step that the invariants hold, and at the end that
// the numbers used are exactly [1, n): none used twice, none skipped.
func TestStateRandomOps(t *testing.T) {
	seeds := uint64(200)
	if testkit.Race {
		// One goroutine: nothing for the detector, 10× the time. Each seed
		// is 300 steps (every operation tens of times); 8 seeds already
		// reach every block of state.go that 40 or 200 reach.
		seeds = 10
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			st := NewState()
			used := map[uint64]bool{}
			// next[epoch] is how far the leaseholder has used its lease; the
			// state only knows what was reported (Used).
			next := map[uint64]uint64{}
			leaseholders := []string{"a", "b", "c", "d"}
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
				h := leaseholders[rng.IntN(len(leaseholders))]
				var mine []Lease
				for _, l := range st.Leases {
					if l.Leaseholder == h {
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
					// A reclaim after the leaseholder's last report: the leaseholder
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
			// Everyone gives back: every number is final.
			for _, l := range append([]Lease(nil), st.Leases...) {
				if err := st.Release(l.Leaseholder, l.Epoch, next[l.Epoch]); err != nil {
					t.Fatal(err)
				}
			}
			if len(st.Leases) != 0 || st.Dense.Pos != st.HWM {
				t.Fatalf("leases left %+v, dense %+v of hwm %d", st.Leases, st.Dense, st.HWM)
			}
			// The ranks of the used numbers, from the folded blocks, are
			// exactly 1..Rank: dense, each once, in number order.
			ranks := map[uint64]uint64{} // number -> rank
			for _, c := range st.Closed {
				if !c.Folded {
					t.Fatalf("closed block %+v not folded below the dense prefix", c)
				}
				for p := c.Start; p < c.Used; p++ {
					ranks[p] = c.Base + p - c.Start + 1
				}
			}
			if uint64(len(ranks)) != st.Dense.Rank {
				t.Fatalf("%d numbers ranked, dense rank %d", len(ranks), st.Dense.Rank)
			}
			var prev uint64
			for p := uint64(1); p < st.HWM; p++ {
				r, ok := ranks[p]
				if ok != used[p] {
					t.Fatalf("number %d: used %v, ranked %v", p, used[p], ok)
				}
				if ok {
					if r != prev+1 {
						t.Fatalf("number %d has rank %d after rank %d", p, r, prev)
					}
					prev = r
				}
			}
			if prev != st.Dense.Rank || st.Holes() != st.HWM-1-prev {
				t.Fatalf("last rank %d, dense %+v, holes %d of hwm %d", prev, st.Dense, st.Holes(), st.HWM)
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
		t.Fatal("reclaimed with a stale beat: the leaseholder renewed since")
	}
	cur, _ := st.Lease(l.Epoch)
	if !st.Reclaim(l.Epoch, cur.Beat) {
		t.Fatal("reclaim with the current beat failed")
	}
	if st.Dense != (Dense{Pos: l.End, Rank: 3}) || st.Holes() != l.Len()-3 {
		t.Fatalf("after reclaiming [%d,%d) used to %d: dense %+v, holes %d", l.Start, l.End, l.Start+3, st.Dense, st.Holes())
	}
	if err := st.Renew("a", l.Epoch, l.End); err == nil {
		t.Fatal("renew of a reclaimed lease succeeded")
	}
}

// A rank is known only once every number below is final: a block closed
// above an open one waits, and folds when the one below closes.
func TestRanksWaitForEveryBlockBelow(t *testing.T) {
	st := NewState()
	a := st.Acquire("a", 10) // [1,11)
	b := st.Acquire("b", 10) // [11,21)
	if err := st.Release("b", b.Epoch, b.Start+4); err != nil {
		t.Fatal(err)
	}
	if st.Dense != (Dense{Pos: 1}) || len(st.Folded("b")) != 0 {
		t.Fatalf("b's block folded above a's open one: %+v, %+v", st.Dense, st.Folded("b"))
	}
	if err := st.Release("a", a.Epoch, a.Start+2); err != nil {
		t.Fatal(err)
	}
	if st.Dense != (Dense{Pos: 21, Rank: 6}) {
		t.Fatalf("dense %+v, want pos 21 rank 6", st.Dense)
	}
	fa, fb := st.Folded("a"), st.Folded("b")
	if len(fa) != 1 || fa[0].Base != 0 || len(fb) != 1 || fb[0].Base != 2 {
		t.Fatalf("folded a %+v b %+v: want bases 0 and 2", fa, fb)
	}
	// The next lease is fresh: holes are never leased again.
	if c := st.Acquire("c", 5); c.Start != 21 {
		t.Fatalf("acquire took [%d,%d), want fresh numbers from 21", c.Start, c.End)
	}
	st.Settle("b", b.Epoch)
	st.Settle("b", b.Epoch) // twice: a lost answer
	if len(st.Folded("b")) != 0 || len(st.Folded("a")) != 1 {
		t.Fatalf("after settling b: %+v", st.Closed)
	}
	if err := st.Check(); err != nil {
		t.Fatal(err)
	}
}

// A version 1 value: everything below its lowest free or leased number
// counts as used (rank = number), free spans become holes.
func TestMigrateVersion1(t *testing.T) {
	st, err := DecodeState([]byte(`{"v":1,"hwm":30,"next_epoch":3,"free":[{"start":5,"end":8}],` +
		`"leases":[{"epoch":2,"holder":"a","start":20,"end":30,"used":22}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// [1,5) used (ranks 1-4), [5,8) a hole, [8,20) unaccounted in v1 but
	// spent (ranks 5-16), then a's open lease.
	if st.Version != stateVersion || st.Dense != (Dense{Pos: 20, Rank: 16}) || len(st.Closed) != 0 {
		t.Fatalf("migrated: %+v", st)
	}
}

func FuzzDecodeState(f *testing.F) {
	st := NewState()
	st.Acquire("a", 10)
	f.Add(st.Encode())
	f.Add([]byte(`{"v":1,"hwm":5,"next_epoch":2,"free":[{"start":1,"end":5}]}`))
	f.Add([]byte(`{"v":2,"hwm":9,"next_epoch":3,"dense":{"pos":5,"rank":2},"closed":[{"epoch":1,"holder":"a","start":1,"end":5,"used":3,"folded":true}],"leases":[{"epoch":2,"holder":"b","start":5,"end":9,"used":5}]}`))
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

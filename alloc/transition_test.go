package alloc

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// honestRound is one leaseholder's round as Leaseholder.round writes it: renew or
// give back some of its leases, settle its folded blocks, maybe acquire.
func honestRound(rng *rand.Rand, st *State, h string) {
	folded := st.Folded(h) // a leaseholder settles blocks it saw folded in an earlier round
	for _, l := range append([]Lease(nil), st.Leases...) {
		if l.Leaseholder != h {
			continue
		}
		used := l.Used + rng.Uint64N(l.End-l.Used+1)
		switch rng.IntN(4) {
		case 0:
			_ = st.Release(h, l.Epoch, used)
		case 1:
			_ = st.Forget(h, l.Epoch)
		default:
			_ = st.Renew(h, l.Epoch, used)
		}
	}
	for _, c := range folded {
		if rng.IntN(2) == 0 {
			st.Settle(h, c.Epoch)
		}
	}
	if rng.IntN(2) == 0 {
		st.Acquire(h, 1+rng.Uint64N(64))
	}
	if st.Applied == nil {
		st.Applied = map[string]string{}
	}
	st.Applied[h] = fmt.Sprint("n", rng.Uint64())
}

// TestCheckTransitionAcceptsHonestRounds: every round an honest leaseholder
// writes is a transition the authority lets it make, and the same
// transition is refused to any other writer.
func TestCheckTransitionAcceptsHonestRounds(t *testing.T) {
	leaseholders := []string{"us-1", "eu-1", "ap.1"}
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 27))
		st := NewState()
		for step := 0; step < 100; step++ {
			h := leaseholders[rng.IntN(len(leaseholders))]
			next := st.Clone()
			honestRound(rng, next, h)
			if err := next.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if err := CheckTransition(st, next, token(h), 64); err != nil {
				t.Fatalf("seed %d step %d: honest round of %s refused: %v", seed, step, h, err)
			}
			// A round that changed nothing but a nonce is the same write
			// whoever makes it; every other round is h's alone.
			enc := next.Encode()
			for _, o := range leaseholders {
				if o == h || bytes.Equal(enc, withNonce(st, o, next.Applied[h]).Encode()) {
					continue
				}
				if err := CheckTransition(st, next, token(o), 64); err == nil {
					t.Fatalf("seed %d step %d: %s's round accepted from %s", seed, step, h, o)
				}
			}
			st = next
		}
	}
}

// withNonce is s with o's nonce set to n (a round that changed nothing
// but a nonce).
func withNonce(s *State, o, n string) *State {
	c := s.Clone()
	if c.Applied == nil {
		c.Applied = map[string]string{}
	}
	c.Applied[o] = n
	return c
}

// TestCheckTransitionRefusesForgeries: the forgeries of issue #27 item 2,
// and more, written by us-1 over a state where eu-1 holds a lease and has
// a folded block waiting for its ranks.
func TestCheckTransitionRefusesForgeries(t *testing.T) {
	prev := NewState()
	e1 := prev.Acquire("eu-1", 16)
	u1 := prev.Acquire("us-1", 16)
	e2 := prev.Acquire("eu-1", 16)
	if err := prev.Renew("eu-1", e1.Epoch, e1.End); err != nil { // spent: folded
		t.Fatal(err)
	}
	if err := prev.Renew("us-1", u1.Epoch, u1.Start+3); err != nil {
		t.Fatal(err)
	}
	prev.Applied = map[string]string{"eu-1": "e", "us-1": "u"}
	if err := prev.Check(); err != nil {
		t.Fatal(err)
	}
	forgeries := map[string]func(s *State){
		"a dense rank ahead (milestone 1000 after 15 likes)": func(s *State) { s.Dense.Rank += 985; s.Dense.Pos += 985; s.HWM += 985 },
		"the high-water mark rewound":                        func(s *State) { s.HWM = e2.Start; s.Leases = s.Leases[:1] },
		"eu-1's lease reported used":                         func(s *State) { _ = s.Renew("eu-1", e2.Epoch, e2.End) },
		"eu-1's lease closed":                                func(s *State) { _ = s.Release("eu-1", e2.Epoch, e2.Start) },
		"eu-1's folded block settled":                        func(s *State) { s.Settle("eu-1", e1.Epoch) },
		"eu-1's nonce changed":                               func(s *State) { s.Applied["eu-1"] = "x" },
		"a lease acquired for eu-1":                          func(s *State) { s.Acquire("eu-1", 8) },
		"a lease larger than a block":                        func(s *State) { s.Acquire("us-1", 65) },
		"three leases at once":                               func(s *State) { s.Acquire("us-1", 1); s.Acquire("us-1", 1); s.Acquire("us-1", 1) },
		"its own report rewound":                             func(s *State) { s.Leases[1].Used = u1.Start + 1; s.Leases[1].Beat++ },
		"an epoch skipped":                                   func(s *State) { s.NextEpoch += 5 },
		"a lease with a number skipped":                      func(s *State) { s.HWM += 10 },
		"a huge nonce": func(s *State) {
			s.Applied["us-1"] = string(make([]byte, 100))
		},
	}
	for what, forge := range forgeries {
		next := prev.Clone()
		forge(next)
		if err := CheckTransition(prev, next, "us-1", 64); err == nil {
			t.Errorf("us-1 wrote %s: accepted", what)
		}
	}
	// What us-1 may do: its own lease reported, given back, a new one.
	next := prev.Clone()
	if err := next.Release("us-1", u1.Epoch, u1.Start+5); err != nil {
		t.Fatal(err)
	}
	next.Acquire("us-1", 64)
	next.Applied["us-1"] = "u2"
	if err := CheckTransition(prev, next, "us-1", 64); err != nil {
		t.Fatalf("us-1's own round: %v", err)
	}
}

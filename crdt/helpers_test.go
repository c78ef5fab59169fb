package crdt

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"sort"
	"strings"
)

// Shared generators and reference models for the crdt tests. The models are
// deliberately naive (maps, big.Int) so they do not share code paths with the
// implementation under test.

// idAlphabet is every byte ValidID accepts.
const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:@-"

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// randID returns a valid id of 1..maxLen bytes.
func randID(rng *rand.Rand, maxLen int) string {
	n := 1 + rng.IntN(maxLen)
	var b strings.Builder
	for range n {
		b.WriteByte(idAlphabet[rng.IntN(len(idAlphabet))])
	}
	return b.String()
}

// replicaPool returns n distinct short replica ids.
func replicaPool(n int) []string {
	p := make([]string, n)
	for i := range p {
		p[i] = fmt.Sprintf("r%02d", i)
	}
	return p
}

// randUint returns a value from a mix of distributions: tiny (so that random
// vectors tie and overlap often), arbitrary, and next to the extremes.
func randUint(rng *rand.Rand, extremes bool) uint64 {
	if !extremes {
		return uint64(rng.IntN(4))
	}
	switch rng.IntN(6) {
	case 0, 1:
		return uint64(rng.IntN(4))
	case 2:
		return rng.Uint64()
	case 3:
		return math.MaxUint64 - uint64(rng.IntN(3))
	case 4:
		return 1<<63 + uint64(rng.IntN(3)) - 1
	default:
		return uint64(rng.IntN(1 << 20))
	}
}

func randPN(rng *rand.Rand, extremes bool) PN {
	return PN{P: randUint(rng, extremes), N: randUint(rng, extremes)}
}

// randVectorMap draws a map model over pool: each replica present with
// probability 1/2, with a non-zero entry.
func randVectorMap(rng *rand.Rand, pool []string, extremes bool) map[string]PN {
	m := map[string]PN{}
	for _, r := range pool {
		if rng.IntN(2) == 0 {
			continue
		}
		e := randPN(rng, extremes)
		if e == (PN{}) {
			e.P = 1
		}
		m[r] = e
	}
	return m
}

func randVector(rng *rand.Rand, pool []string, extremes bool) Vector {
	return fromMap(randVectorMap(rng, pool, extremes))
}

// fromMap builds a Vector directly (sorted, zero entries dropped) without
// going through Set, so that Set can be checked against it.
func fromMap(m map[string]PN) Vector {
	keys := make([]string, 0, len(m))
	for k, e := range m {
		if e != (PN{}) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var v Vector
	for _, k := range keys {
		v = append(v, Entry{Replica: k, PN: m[k]})
	}
	return v
}

func toMap(v Vector) map[string]PN {
	m := make(map[string]PN, len(v))
	for _, e := range v {
		m[e.Replica] = e.PN
	}
	return m
}

// checkVector verifies the Vector invariants: strictly sorted replica ids
// (hence no duplicates) and no zero entries.
func checkVector(v Vector) error {
	for i, e := range v {
		if e.PN == (PN{}) {
			return fmt.Errorf("zero entry for %q at %d in %v", e.Replica, i, v)
		}
		if i > 0 && v[i-1].Replica >= e.Replica {
			return fmt.Errorf("entries %d,%d out of order (%q, %q) in %v", i-1, i, v[i-1].Replica, e.Replica, v)
		}
	}
	return nil
}

// modelValue is ΣP − ΣN computed exactly and then clamped to int64.
func modelValue(m map[string]PN) int64 {
	s := new(big.Int)
	for _, e := range m {
		s.Add(s, new(big.Int).SetUint64(e.P))
		s.Sub(s, new(big.Int).SetUint64(e.N))
	}
	return clampBig(s)
}

func clampBig(s *big.Int) int64 {
	if s.Cmp(big.NewInt(math.MaxInt64)) > 0 {
		return math.MaxInt64
	}
	if s.Cmp(big.NewInt(math.MinInt64)) < 0 {
		return math.MinInt64
	}
	return s.Int64()
}

// maxMap is the entry-wise max of two map models.
func maxMap(a, b map[string]PN) map[string]PN {
	m := map[string]PN{}
	for k, e := range a {
		m[k] = e
	}
	for k, e := range b {
		c := m[k]
		m[k] = PN{P: max(c.P, e.P), N: max(c.N, e.N)}
	}
	return m
}

// randRecord draws a LikeRecord from small domains so that equal HLCs, equal
// origins and overlapping contributions are common. About one in eight is
// the zero record (never written).
func randRecord(rng *rand.Rand, pool []string) *LikeRecord {
	if rng.IntN(8) == 0 {
		return &LikeRecord{Contrib: randVector(rng, pool, false)}
	}
	r := &LikeRecord{
		Liked:   rng.IntN(2) == 0,
		HLC:     MakeHLC(int64(1+rng.IntN(3)), uint16(rng.IntN(2))),
		Origin:  pool[rng.IntN(len(pool))],
		Contrib: randVector(rng, pool, false),
	}
	if rng.IntN(3) == 0 {
		// A client-given booking time: a register field that must merge
		// and encode with the rest of the register.
		r.At = int64(1 + rng.IntN(3))
	}
	if rng.IntN(4) == 0 {
		// A toggle's idempotency key: a register field too.
		r.Idem = []string{"k1", "k2"}[rng.IntN(2)]
	}
	return r
}

// randKeyedRecord draws a KeyedRecord as randRecord draws a like record:
// about one in eight holds contributions only, the rest an application
// (sometimes an approximate counter's, asked another amount).
func randKeyedRecord(rng *rand.Rand, pool []string) *KeyedRecord {
	if rng.IntN(8) == 0 {
		return &KeyedRecord{Contrib: randVector(rng, pool, false)}
	}
	r := &KeyedRecord{
		HLC:     MakeHLC(int64(1+rng.IntN(3)), uint16(rng.IntN(2))),
		Origin:  pool[rng.IntN(len(pool))],
		Amount:  int64(rng.IntN(5)) - 2,
		Contrib: randVector(rng, pool, false),
	}
	if a := int64(rng.IntN(3)) - 1; rng.IntN(4) == 0 && a != 0 && a != r.Amount {
		r.Asked = a
	}
	if rng.IntN(3) == 0 {
		r.At = int64(1 + rng.IntN(3))
	}
	if rng.IntN(5) == 0 {
		r.Amount, r.Asked, r.Fenced = 0, 0, true // a fence
	}
	return r
}

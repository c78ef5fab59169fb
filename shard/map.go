package shard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
)

// Set is a set of shards.
type Set [Count / 64]uint64

// All is the set of every shard.
func All() Set {
	var s Set
	for i := range s {
		s[i] = ^uint64(0)
	}
	return s
}

// Has reports whether shard s is in the set.
func (set *Set) Has(s int) bool { return set[s>>6]&(1<<(s&63)) != 0 }

// Add puts shard s in the set.
func (set *Set) Add(s int) { set[s>>6] |= 1 << (s & 63) }

// Len is how many shards the set holds.
func (set *Set) Len() int {
	n := 0
	for _, w := range set {
		n += bits.OnesCount64(w)
	}
	return n
}

// And returns the shards in both sets.
func (set Set) And(o Set) Set {
	for i := range set {
		set[i] &= o[i]
	}
	return set
}

// Minus returns the shards in set and not in o.
func (set Set) Minus(o Set) Set {
	for i := range set {
		set[i] &^= o[i]
	}
	return set
}

// Or returns the shards in either set.
func (set Set) Or(o Set) Set {
	for i := range set {
		set[i] |= o[i]
	}
	return set
}

// Ranges writes the set as sorted runs: "0-340", "342".
func (set *Set) Ranges() []string {
	out := []string{}
	for s := 0; s < Count; {
		if !set.Has(s) {
			s++
			continue
		}
		e := s
		for e+1 < Count && set.Has(e+1) {
			e++
		}
		if e == s {
			out = append(out, strconv.Itoa(s))
		} else {
			out = append(out, strconv.Itoa(s)+"-"+strconv.Itoa(e))
		}
		s = e + 1
	}
	return out
}

// ParseRanges reads what Ranges writes: numbers and "a-b" runs, each in
// 0..Count-1, in any order.
func ParseRanges(rs []string) (Set, error) {
	var set Set
	for _, r := range rs {
		a, b, isRun := strings.Cut(r, "-")
		lo, err := parseShard(a)
		if err != nil {
			return Set{}, err
		}
		hi := lo
		if isRun {
			if hi, err = parseShard(b); err != nil {
				return Set{}, err
			}
			if hi < lo {
				return Set{}, fmt.Errorf("shard run %q ends before it starts", r)
			}
		}
		for s := lo; s <= hi; s++ {
			set.Add(s)
		}
	}
	return set, nil
}

func parseShard(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= Count || strconv.Itoa(n) != s {
		return 0, fmt.Errorf("bad shard %q: want a number 0..%d", s, Count-1)
	}
	return n, nil
}

// Map is a region's shard map: which of its replicas hold each shard.
// Every shard has at least one holder, and every replica holds Global.
type Map struct {
	Region string
	// Copies is how many replicas the assignment gave each shard.
	Copies int
	// Revision is the map's revision where it is stored (the shard map
	// bucket, package node); 0 for a map computed here. Equal ignores it.
	Revision uint64
	replicas []string // sorted
	held     []Set    // held[i]: the shards replicas[i] holds (serves)
	// A shard move in progress (move.go): joining[i] are the shards
	// replicas[i] is taking, leaving[i] those it gave up and keeps until
	// their new holders have its entries. Nil when nothing moves.
	joining, leaving []Set
}

// Assign spreads the shards over a region's replicas, copies holders each
// (at most the number of replicas), by rendezvous hashing: each shard goes
// to the replicas that score highest for it. So the map depends only on
// the set of replicas, and adding or removing one replica moves only the
// shards it gains or held. Every replica holds Global.
func Assign(region string, replicas []string, copies int) (Map, error) {
	m := Map{Region: region, Copies: copies, replicas: slices.Clone(replicas)}
	slices.Sort(m.replicas)
	if err := m.checkIDs(); err != nil {
		return Map{}, err
	}
	if copies < 1 {
		return Map{}, fmt.Errorf("shard map of %s: copies %d < 1", region, copies)
	}
	m.Copies = min(copies, len(m.replicas))
	m.held = make([]Set, len(m.replicas))
	type score struct {
		h uint64
		i int
	}
	scores := make([]score, len(m.replicas))
	for s := range keyed {
		for i, r := range m.replicas {
			scores[i] = score{rendezvous(r, s), i}
		}
		slices.SortFunc(scores, func(a, b score) int {
			if a.h != b.h {
				if a.h > b.h {
					return -1
				}
				return 1
			}
			return a.i - b.i
		})
		for _, sc := range scores[:m.Copies] {
			m.held[sc.i].Add(s)
		}
	}
	for i := range m.held {
		m.held[i].Add(Global)
	}
	return m, nil
}

// rendezvous is replica r's score for shard s (FNV-1a of "<r>/<s>" through
// a finalizer: FNV's low bits alone rank poorly).
func rendezvous(r string, s int) uint64 {
	h := uint64(Hash(r + "/" + strconv.Itoa(s)))
	h ^= h >> 16
	h *= 0x9e3779b97f4a7c15
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	return h ^ h>>32
}

// Single is the map of a region of one replica: it holds every shard.
func Single(region, replica string) Map {
	return Map{Region: region, Copies: 1, replicas: []string{replica}, held: []Set{All()}}
}

// Replicas are the map's replicas, sorted.
func (m Map) Replicas() []string { return slices.Clone(m.replicas) }

// Held returns the shards replica holds (none for a replica not in the map).
func (m Map) Held(replica string) Set {
	if i, ok := slices.BinarySearch(m.replicas, replica); ok {
		return m.held[i]
	}
	return Set{}
}

// Holders returns the replicas that hold shard s, sorted.
func (m Map) Holders(s int) []string {
	var out []string
	for i, r := range m.replicas {
		if m.held[i].Has(s) {
			out = append(out, r)
		}
	}
	return out
}

// SameHolders reports whether one set of replicas holds every shard of
// ss, and some replica does: a write of keys on them can commit at one
// replica.
func (m Map) SameHolders(ss ...int) bool {
	if len(ss) == 0 {
		return false
	}
	first := m.Holders(ss[0])
	for _, s := range ss[1:] {
		if s != ss[0] && !slices.Equal(m.Holders(s), first) {
			return false
		}
	}
	return len(first) > 0
}

// Preferred returns the holders of shard s in the order a replica that
// does not hold s tries them: starting at the one the shard number picks,
// then round the sorted holders. Every sender agrees on the first choice
// of a shard (its requests meet one writer while it is up, so a client
// reads its own writes there), and the region's shards spread their
// first choices over every holder.
func (m Map) Preferred(s int) []string {
	h := m.Holders(s)
	if len(h) < 2 {
		return h
	}
	k := s % len(h)
	return append(h[k:], h[:k]...)
}

// Validate reports what is wrong with m: bad or repeated replica ids, a
// shard nobody holds, a replica that does not hold Global.
func (m Map) Validate() error {
	if err := m.checkIDs(); err != nil {
		return err
	}
	var union Set
	var errs []error
	for i, r := range m.replicas {
		if !m.held[i].Has(Global) {
			errs = append(errs, fmt.Errorf("replica %s does not hold the global shard %d", r, Global))
		}
		for w := range union {
			union[w] |= m.held[i][w]
		}
	}
	if n := union.Len(); n != Count {
		errs = append(errs, fmt.Errorf("%d of %d shards have no holder", Count-n, Count))
	}
	if m.Copies < 1 {
		errs = append(errs, fmt.Errorf("copies %d < 1", m.Copies))
	}
	errs = append(errs, m.validateMoving()...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shard map of %s: %w", m.Region, err)
	}
	return nil
}

func (m Map) checkIDs() error {
	if !crdt.ValidID(m.Region) {
		return fmt.Errorf("shard map: bad region %q", m.Region)
	}
	if len(m.replicas) == 0 {
		return fmt.Errorf("shard map of %s: no replicas", m.Region)
	}
	for i, r := range m.replicas {
		if !crdt.ValidID(r) {
			return fmt.Errorf("shard map of %s: bad replica id %q", m.Region, r)
		}
		if i > 0 && m.replicas[i-1] == r {
			return fmt.Errorf("shard map of %s: replica %s listed twice", m.Region, r)
		}
	}
	return nil
}

// Equal reports whether two maps assign the same shards to the same
// replicas of the same region, whatever their revisions.
func (m Map) Equal(o Map) bool {
	return m.Region == o.Region && m.Copies == o.Copies &&
		slices.Equal(m.replicas, o.replicas) && slices.Equal(m.held, o.held) &&
		slices.Equal(m.moving(m.joining), o.moving(o.joining)) && slices.Equal(m.moving(m.leaving), o.moving(o.leaving))
}

// MarshalJSON writes {"region","shards","copies","revision","replicas":
// [{"replica","shards":["0-340","342",...],"count"}]} ("revision" only
// when not 0).
func (m Map) MarshalJSON() ([]byte, error) {
	return json.Marshal(m.API())
}

// API is the map as GET /v1/shards answers it.
func (m Map) API() api.ShardMap {
	j := api.ShardMap{Region: m.Region, Shards: Count, Copies: m.Copies, Revision: m.Revision, Replicas: []api.ShardHolding{}}
	for i, r := range m.replicas {
		h := api.ShardHolding{Replica: r, Shards: m.held[i].Ranges(), Count: m.held[i].Len()}
		if m.joining != nil && m.joining[i].Len() > 0 {
			h.Joining = m.joining[i].Ranges()
		}
		if m.leaving != nil && m.leaving[i].Len() > 0 {
			h.Leaving = m.leaving[i].Ranges()
		}
		j.Replicas = append(j.Replicas, h)
	}
	return j
}

// Decode reads a map as MarshalJSON writes it, strictly (unknown fields,
// a different shard count, trailing data and an invalid map are refused).
// The "count" fields are ignored: the ranges say it.
func Decode(b []byte) (Map, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var j api.ShardMap
	if err := dec.Decode(&j); err != nil {
		return Map{}, fmt.Errorf("decode shard map: %w", err)
	}
	if dec.More() {
		return Map{}, errors.New("decode shard map: trailing data")
	}
	return FromAPI(j)
}

// FromAPI reads a map as GET /v1/shards answers it (a client's
// api.ShardMap), checking it as Decode does.
func FromAPI(j api.ShardMap) (Map, error) {
	if j.Shards != Count {
		return Map{}, fmt.Errorf("decode shard map: %d shards, this build has %d", j.Shards, Count)
	}
	m := Map{Region: j.Region, Copies: j.Copies, Revision: j.Revision}
	slices.SortFunc(j.Replicas, func(a, b api.ShardHolding) int { return strings.Compare(a.Replica, b.Replica) })
	for i, h := range j.Replicas {
		set, err := ParseRanges(h.Shards)
		if err != nil {
			return Map{}, fmt.Errorf("decode shard map: replica %s: %w", h.Replica, err)
		}
		joining, err := ParseRanges(h.Joining)
		if err != nil {
			return Map{}, fmt.Errorf("decode shard map: replica %s joining: %w", h.Replica, err)
		}
		leaving, err := ParseRanges(h.Leaving)
		if err != nil {
			return Map{}, fmt.Errorf("decode shard map: replica %s leaving: %w", h.Replica, err)
		}
		m.replicas = append(m.replicas, h.Replica)
		m.held = append(m.held, set)
		if (joining.Len() > 0 || leaving.Len() > 0) && m.joining == nil {
			m.joining, m.leaving = make([]Set, len(j.Replicas)), make([]Set, len(j.Replicas))
		}
		if m.joining != nil {
			m.joining[i], m.leaving[i] = joining, leaving
		}
	}
	if err := m.Validate(); err != nil {
		return Map{}, fmt.Errorf("decode shard map: %w", err)
	}
	return m, nil
}

// Maps are the shard maps of a deployment's regions, read as one view of
// which shards any replica holds.
type Maps []Map

// Replicas are every region's replicas, sorted.
func (ms Maps) Replicas() []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.replicas...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Holds reports whether replica keeps shard s: serves it, or is taking it
// or giving it up in a move (replication keeps, merges and compares
// those). A replica in none of the maps holds every shard: its region is
// not sharded.
func (ms Maps) Holds(replica string, s int) bool {
	for _, m := range ms {
		if i, ok := slices.BinarySearch(m.replicas, replica); ok {
			return m.keeps(i, s)
		}
	}
	return true
}

// RegionOf is the region whose map lists replica, if one does.
func (ms Maps) RegionOf(replica string) (string, bool) {
	for _, m := range ms {
		if _, ok := slices.BinarySearch(m.replicas, replica); ok {
			return m.Region, true
		}
	}
	return "", false
}

// Joins reports whether replica is taking shard s in a move of its
// region (its joining set): it keeps the shard and pulls it from the other
// replicas keeping it, but serves nothing of it yet. A replica in none of
// the maps joins nothing.
func (ms Maps) Joins(replica string, s int) bool {
	for _, m := range ms {
		if i, ok := slices.BinarySearch(m.replicas, replica); ok {
			return m.joining != nil && m.joining[i].Has(s)
		}
	}
	return false
}

// UnmarshalJSON reads a map as Decode does.
func (m *Map) UnmarshalJSON(b []byte) error {
	d, err := Decode(b)
	if err != nil {
		return err
	}
	*m = d
	return nil
}

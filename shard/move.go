package shard

import (
	"errors"
	"fmt"
	"slices"
)

// A shard move changes which replicas of a region serve some shards
// while the region serves, in two maps written one after the other (by
// the operator's tool, `tallyd admin shards move`):
//
//  1. Join: every shard a replica gains is in its joining set. It keeps,
//     merges and compares the shard (its replication subscribes to the
//     shard and pulls it from the other replicas keeping it) but serves
//     nothing of it yet.
//  2. Switch, once every joining replica has pulled its shards since it
//     began: the new holders serve. A shard a replica gave up goes into
//     its leaving set: it serves nothing of it any more but keeps it, a
//     passive copy that goes on merging and comparing, so its own entries
//     reach every holder (a live replica's entries are taken only from
//     itself) and nothing it answered from its shards goes stale.
//
// A passive copy is kept until its replica says it is released (every
// segment compares equal with every holder, after its last write there
// could have committed); then the replica deletes the shard's data
// (package replication, ShardSync) and the next move drops it from the
// leaving set.

// moving returns sets, or none when the map moves nothing.
func (m Map) moving(sets []Set) []Set {
	for _, s := range sets {
		if s.Len() > 0 {
			return sets
		}
	}
	return nil
}

// keeps reports whether replicas[i] serves, takes or gives up shard s.
func (m Map) keeps(i, s int) bool {
	return m.held[i].Has(s) || m.joining != nil && (m.joining[i].Has(s) || m.leaving[i].Has(s))
}

func (m Map) set(sets []Set, replica string) Set {
	if i, ok := slices.BinarySearch(m.replicas, replica); ok && sets != nil {
		return sets[i]
	}
	return Set{}
}

// Joining returns the shards replica is taking in a move (none if none).
func (m Map) Joining(replica string) Set { return m.set(m.joining, replica) }

// Leaving returns the shards replica gave up in a move and keeps until
// their holders have its entries.
func (m Map) Leaving(replica string) Set { return m.set(m.leaving, replica) }

// Keeps returns every shard replica serves, takes or gives up.
func (m Map) Keeps(replica string) Set {
	return m.Held(replica).Or(m.Joining(replica)).Or(m.Leaving(replica))
}

// Moving reports whether a move is in progress: some replica is joining
// shards.
func (m Map) Moving() bool { return m.moving(m.joining) != nil }

// Move is a move from one map to another of the same region and
// replicas: the two maps it writes, in order (see the top of this file).
type Move struct {
	Join, Switch Map
	// Moved counts the shard copies that gain a holder.
	Moved int
}

// PlanMove returns the move from cur, a map at rest, to target, which
// holds the same replicas or more: a replica target adds joins the region
// holding Global alone (a fresh store, it accepts no write before it has
// synced from every peer) and takes its keyed shards in the join map like
// any other. Copies is the target's. Removing a replica is a drain
// (Drained) and then its retirement.
func PlanMove(cur, target Map) (Move, error) {
	if cur.Region != target.Region {
		return Move{}, errors.New("shard move: the target map must be of the same region")
	}
	for _, r := range cur.replicas {
		if !slices.Contains(target.replicas, r) {
			return Move{}, fmt.Errorf("shard move: the target map drops replica %s: drain it instead (it keeps Global until it is retired)", r)
		}
	}
	if cur.Moving() {
		return Move{}, fmt.Errorf("shard move: region %s's map is already moving (revision %d): finish that move first", cur.Region, cur.Revision)
	}
	if err := target.Validate(); err != nil {
		return Move{}, err
	}
	cur = cur.widen(target.replicas)
	n := len(cur.replicas)
	mv := Move{}
	join := Map{Region: cur.Region, Copies: target.Copies, replicas: slices.Clone(cur.replicas), held: slices.Clone(cur.held),
		joining: make([]Set, n), leaving: make([]Set, n)}
	sw := Map{Region: cur.Region, Copies: target.Copies, replicas: slices.Clone(cur.replicas), held: slices.Clone(target.held),
		joining: make([]Set, n), leaving: make([]Set, n)}
	passive := cur.leaving
	if passive == nil {
		passive = make([]Set, n)
	}
	for i := range n {
		for s := range Count {
			gains := target.held[i].Has(s) && !cur.held[i].Has(s)
			kept := !target.held[i].Has(s) && (cur.held[i].Has(s) || passive[i].Has(s))
			if gains {
				join.joining[i].Add(s)
				mv.Moved++
			}
			if kept {
				sw.leaving[i].Add(s)
				if passive[i].Has(s) {
					join.leaving[i].Add(s)
				}
			}
		}
	}
	mv.Join, mv.Switch = join, sw
	return mv, nil
}

// widen returns m over replicas (a superset of m's, sorted): a replica m
// does not list holds Global alone.
func (m Map) widen(replicas []string) Map {
	if slices.Equal(m.replicas, replicas) {
		return m
	}
	out := Map{Region: m.Region, Copies: m.Copies, Revision: m.Revision, replicas: slices.Clone(replicas)}
	out.held = make([]Set, len(replicas))
	if m.leaving != nil {
		out.leaving = make([]Set, len(replicas))
	}
	for i, r := range replicas {
		j, ok := slices.BinarySearch(m.replicas, r)
		switch {
		case ok:
			out.held[i] = m.held[j]
			if m.leaving != nil {
				out.leaving[i] = m.leaving[j]
			}
		default:
			out.held[i].Add(Global)
		}
	}
	return out
}

// Step returns the first step of a move from cur (at rest) toward target
// that gains at most limit shard copies (limit < 1: no bound): whole
// shards at a time, in shard order, each either as target holds it or as
// cur does. So every step is a valid map, and running Step again from
// each step's result reaches target. A replica target adds is in every
// step, holding Global alone until its shards come.
func Step(cur, target Map, limit int) (Map, error) {
	mv, err := PlanMove(cur, target)
	if err != nil {
		return Map{}, err
	}
	if limit < 1 || mv.Moved <= limit {
		return target, nil
	}
	cur = cur.widen(target.replicas)
	out := Map{Region: target.Region, Copies: target.Copies, replicas: slices.Clone(target.replicas), held: make([]Set, len(target.replicas))}
	budget := limit
	for s := range Count {
		gains := 0
		for i := range out.replicas {
			if target.held[i].Has(s) && !cur.held[i].Has(s) {
				gains++
			}
		}
		from := cur
		// A shard gaining more copies than limit still moves, alone.
		if gains > 0 && (gains <= budget || budget == limit) {
			budget -= gains
			from = target
		}
		for i := range out.replicas {
			if from.held[i].Has(s) {
				out.held[i].Add(s)
			}
		}
	}
	return out, out.Validate()
}

// validateMoving checks the move sets: a replica does not take or give
// up a shard it serves, nor take and give up one shard at once.
func (m Map) validateMoving() []error {
	if m.joining == nil {
		return nil
	}
	var errs []error
	for i, r := range m.replicas {
		if both := m.joining[i].And(m.held[i]); both.Len() > 0 {
			errs = append(errs, fmt.Errorf("replica %s is joining shards it serves: %v", r, both.Ranges()))
		}
		if both := m.leaving[i].And(m.held[i]); both.Len() > 0 {
			errs = append(errs, fmt.Errorf("replica %s is leaving shards it serves: %v", r, both.Ranges()))
		}
		if both := m.leaving[i].And(m.joining[i]); both.Len() > 0 {
			errs = append(errs, fmt.Errorf("replica %s is joining and leaving shards at once: %v", r, both.Ranges()))
		}
	}
	return errs
}

// Settled is m, a switch map whose leaving replicas have all released
// what they left, with no leaving sets: each replica drops its data of
// the shards it keeps no longer when it takes the settled map (package
// node). m must not be joining anything.
func Settled(m Map) (Map, error) {
	if m.Moving() {
		return Map{}, fmt.Errorf("shard map of %s: a map still joining shards does not settle", m.Region)
	}
	out := m
	out.held = slices.Clone(m.held)
	out.joining, out.leaving = nil, nil
	return out, nil
}

// Dropped returns the shards replica keeps in m and no longer in next:
// those whose data it drops when it takes next.
func Dropped(m, next Map, replica string) Set {
	return m.Keeps(replica).Minus(next.Keeps(replica))
}

// Served returns the shards replica serves in m and not in next.
func Served(m, next Map, replica string) Set {
	return m.Held(replica).Minus(next.Held(replica))
}

// List returns the shards of set, in order.
func (set *Set) List() []int {
	var out []int
	for s := range Count {
		if set.Has(s) {
			out = append(out, s)
		}
	}
	return out
}

// Unmoved is m with its joining shards dropped: the map it moved from, as
// PlanMove takes it (its passive copies kept).
func Unmoved(m Map) Map {
	out := m
	out.held = slices.Clone(m.held)
	if m.joining != nil {
		out.joining = make([]Set, len(m.joining))
		out.leaving = slices.Clone(m.leaving)
	}
	return out
}

// Drained is the map of a region whose replicas out serve nothing but
// Global (they were drained, to be retired): the others hold every keyed
// shard, copies of them each, as Assign spreads them.
func Drained(region string, replicas []string, copies int, out ...string) (Map, error) {
	for _, r := range out {
		if !slices.Contains(replicas, r) {
			return Map{}, fmt.Errorf("shard map of %s: no replica %q to drain", region, r)
		}
	}
	var rest []string
	for _, r := range replicas {
		if !slices.Contains(out, r) {
			rest = append(rest, r)
		}
	}
	if len(rest) == 0 {
		return Map{}, fmt.Errorf("shard map of %s: draining every replica leaves no holder", region)
	}
	served, err := Assign(region, rest, copies)
	if err != nil {
		return Map{}, err
	}
	m := Map{Region: region, Copies: served.Copies, replicas: slices.Clone(replicas)}
	slices.Sort(m.replicas)
	if err := m.checkIDs(); err != nil {
		return Map{}, err
	}
	for _, r := range m.replicas {
		held := served.Held(r)
		if slices.Contains(out, r) {
			held = Set{}
			held.Add(Global)
		}
		m.held = append(m.held, held)
	}
	return m, m.Validate()
}

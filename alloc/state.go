package alloc

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Span is the half-open range of numbers [Start, End).
type Span struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

// Len is the number of numbers in the span.
func (s Span) Len() uint64 { return s.End - s.Start }

// Lease is one block of a sequence held by one replica.
type Lease struct {
	Epoch       uint64 `json:"epoch"`  // unique per sequence, never reused
	Leaseholder string `json:"holder"` // replica id
	Span
	// Used: numbers in [Start, Used) are spent, as last reported by the
	// leaseholder. Nobody but the leaseholder may ever hand them out again.
	Used uint64 `json:"used"`
	// Beat is bumped by every renewal. Other replicas time the leaseholder's
	// silence by how long Beat stays the same in their own clock.
	Beat uint64 `json:"beat"`
}

// Closed is a block whose use is final: its leaseholder gave back the tail,
// spent it to the end, or had it reclaimed. Numbers [Start, Used) were
// used, [Used, End) never will be.
type Closed struct {
	Epoch       uint64 `json:"epoch"`
	Leaseholder string `json:"holder"`
	Span
	Used uint64 `json:"used"`
	// Folded: every number below Start is final too, and Base is how many
	// of them were used: the number p of this block (Start <= p < Used)
	// is the (Base + p - Start + 1)th used number of the sequence, its
	// rank. A folded block stays until its leaseholder has taken the ranks of
	// its numbers (Settle).
	Folded bool   `json:"folded,omitempty"`
	Base   uint64 `json:"base,omitempty"`
}

// Dense is how far the sequence's numbers are final: every number below
// Pos is in a closed block, and Rank of them were used.
type Dense struct {
	Pos  uint64 `json:"pos"`
	Rank uint64 `json:"rank"`
}

// State is the value of one sequence's KV key: everything the allocator
// knows about the sequence. Every change is a compare-and-swap of the whole
// value against the revision it was read at.
//
// Numbers are leased in blocks from HWM up and never leased twice. What
// a block's leaseholder did not use is a hole: the sequence's final numbering
// is dense, a used number's rank among all used numbers (Closed.Base), so
// holes cost nothing and need not be filled by later likes. A rank is
// known once every block below the number is closed.
type State struct {
	Version int `json:"v"`
	// HWM: numbers at or above it were never leased. Numbers start at 1.
	HWM       uint64 `json:"hwm"`
	NextEpoch uint64 `json:"next_epoch"`
	// Free is the version 1 free list, read only to migrate (DecodeState).
	Free   []Span   `json:"free,omitempty"`
	Leases []Lease  `json:"leases,omitempty"` // open blocks, sorted by epoch
	Closed []Closed `json:"closed,omitempty"` // sorted by Start
	Dense  Dense    `json:"dense"`
	// Applied maps each leaseholder to the nonce of its last write that landed,
	// so a leaseholder whose CAS timed out can tell whether it took effect.
	Applied map[string]string `json:"applied,omitempty"`
}

const stateVersion = 2

// maxNumber bounds HWM and epochs far from overflow: at a billion numbers
// a second it lasts 146 years.
const maxNumber = 1 << 62

// maxStateBytes bounds a decoded value; a sequence has a handful of leases.
const maxStateBytes = 1 << 20

// NewState is a sequence nobody has used.
func NewState() *State {
	return &State{Version: stateVersion, HWM: 1, NextEpoch: 1, Dense: Dense{Pos: 1}}
}

// Errors of the state machine.
var (
	ErrCorrupt        = errors.New("alloc: corrupt sequence state")
	ErrNotLeaseholder = errors.New("alloc: lease not held")
)

// Clone returns a deep copy.
func (s *State) Clone() *State {
	c := *s
	c.Free = slices.Clone(s.Free)
	c.Leases = slices.Clone(s.Leases)
	c.Closed = slices.Clone(s.Closed)
	if s.Applied != nil {
		c.Applied = make(map[string]string, len(s.Applied))
		for k, v := range s.Applied {
			c.Applied[k] = v
		}
	}
	return &c
}

// Encode is the KV value.
func (s *State) Encode() []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("alloc: encode state: %v", err)) // plain data: cannot fail
	}
	return b
}

// DecodeState parses and checks a KV value. A version 1 value (numbers
// given back went to a free list and were leased again) is migrated:
// everything below its lowest free or leased number counts as used, and
// each free span becomes a hole.
func DecodeState(b []byte) (*State, error) {
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if s.Version == 1 {
		if err := s.migrate(); err != nil {
			return nil, err
		}
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *State) migrate() error {
	if len(s.Closed) > 0 || s.Dense != (Dense{}) {
		return fmt.Errorf("%w: version 1 with version 2 fields", ErrCorrupt)
	}
	pos := s.HWM
	for _, f := range s.Free {
		pos = min(pos, f.Start)
	}
	for _, l := range s.Leases {
		pos = min(pos, l.Start)
	}
	if pos < 1 {
		return fmt.Errorf("%w: version 1 number 0", ErrCorrupt)
	}
	s.Dense = Dense{Pos: pos, Rank: pos - 1}
	taken := slices.Clone(s.Free)
	for _, f := range s.Free {
		s.Closed = append(s.Closed, Closed{Span: f, Used: f.Start}) // a hole
	}
	for _, l := range s.Leases {
		taken = append(taken, l.Span)
	}
	slices.SortFunc(taken, func(a, b Span) int { return cmpU64(a.Start, b.Start) })
	at := pos
	for _, sp := range append(taken, Span{s.HWM, s.HWM}) {
		if sp.Start > at { // leases spent to their end, gone from version 1
			s.Closed = append(s.Closed, Closed{Span: Span{at, sp.Start}, Used: sp.Start})
		}
		at = max(at, sp.End)
	}
	slices.SortFunc(s.Closed, func(a, b Closed) int { return cmpU64(a.Start, b.Start) })
	s.Free, s.Version = nil, stateVersion
	s.fold()
	return nil
}

// Check verifies the invariants: every number in [Dense.Pos, HWM) is in
// exactly one open lease or unfolded closed block, folded blocks lie below
// Dense.Pos and unfolded ones at or above it, everything is sorted and
// disjoint, and epochs are below NextEpoch.
func (s *State) Check() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(f, a...)) }
	if s.Version != stateVersion {
		return bad("version %d", s.Version)
	}
	if s.HWM < 1 || s.HWM > maxNumber || s.NextEpoch < 1 || s.NextEpoch > maxNumber {
		return bad("hwm %d next_epoch %d", s.HWM, s.NextEpoch)
	}
	if len(s.Free) > 0 {
		return bad("a version 2 state with a free list")
	}
	if s.Dense.Pos < 1 || s.Dense.Pos > s.HWM || s.Dense.Rank > s.Dense.Pos-1 {
		return bad("dense prefix pos %d rank %d of hwm %d", s.Dense.Pos, s.Dense.Rank, s.HWM)
	}
	var open []Span // the spans that must tile [Dense.Pos, HWM)
	for i, l := range s.Leases {
		if l.Start >= l.End || l.End > s.HWM || l.Used < l.Start || l.Used > l.End || l.Start < s.Dense.Pos {
			return bad("lease %d [%d,%d) used %d of hwm %d, dense from %d", l.Epoch, l.Start, l.End, l.Used, s.HWM, s.Dense.Pos)
		}
		if l.Epoch == 0 || l.Epoch >= s.NextEpoch || (i > 0 && s.Leases[i-1].Epoch >= l.Epoch) {
			return bad("lease epoch %d out of order (next %d)", l.Epoch, s.NextEpoch)
		}
		if l.Leaseholder == "" {
			return bad("lease %d has no holder", l.Epoch)
		}
		open = append(open, l.Span)
	}
	for i, c := range s.Closed {
		if c.Start >= c.End || c.End > s.HWM || c.Used < c.Start || c.Used > c.End || c.Epoch >= s.NextEpoch {
			return bad("closed block %d [%d,%d) used %d of hwm %d", c.Epoch, c.Start, c.End, c.Used, s.HWM)
		}
		if i > 0 && s.Closed[i-1].End > c.Start {
			return bad("closed blocks [%d,%d) and [%d,%d) out of order or overlap", s.Closed[i-1].Start, s.Closed[i-1].End, c.Start, c.End)
		}
		switch {
		case c.Folded && (c.End > s.Dense.Pos || c.Base+(c.Used-c.Start) > s.Dense.Rank || c.Leaseholder == ""):
			return bad("folded block [%d,%d) base %d past the dense prefix %+v", c.Start, c.End, c.Base, s.Dense)
		case !c.Folded && (c.Start < s.Dense.Pos || c.Base != 0):
			return bad("unfolded block [%d,%d) below the dense prefix %+v", c.Start, c.End, s.Dense)
		case !c.Folded:
			open = append(open, c.Span)
		}
	}
	slices.SortFunc(open, func(a, b Span) int { return cmpU64(a.Start, b.Start) })
	at := s.Dense.Pos
	for _, sp := range open {
		if sp.Start != at {
			return bad("numbers [%d,%d) are in no block, or in two", min(at, sp.Start), max(at, sp.Start))
		}
		at = sp.End
	}
	if at != s.HWM {
		return bad("numbers [%d,%d) are in no block", at, s.HWM)
	}
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Lease returns the lease with the given epoch.
func (s *State) Lease(epoch uint64) (Lease, bool) {
	i, ok := s.find(epoch)
	if !ok {
		return Lease{}, false
	}
	return s.Leases[i], true
}

func (s *State) find(epoch uint64) (int, bool) {
	return slices.BinarySearchFunc(s.Leases, epoch, func(l Lease, e uint64) int { return cmpU64(l.Epoch, e) })
}

// Acquire leases size fresh numbers from HWM to leaseholder and returns the new
// lease. Numbers are never leased twice: what a leaseholder leaves unused is a
// hole that the dense ranks skip.
func (s *State) Acquire(leaseholder string, size uint64) Lease {
	size = min(max(size, 1), 1<<32)
	sp := Span{s.HWM, s.HWM + size}
	s.HWM = sp.End
	l := Lease{Epoch: s.NextEpoch, Leaseholder: leaseholder, Span: sp, Used: sp.Start}
	s.NextEpoch++
	s.Leases = append(s.Leases, l) // epochs only grow: stays sorted
	return l
}

// Renew records that leaseholder spent [Start, used) of its lease and is alive.
// A lease spent to its end is closed. Used never moves back.
func (s *State) Renew(leaseholder string, epoch, used uint64) error {
	i, ok := s.find(epoch)
	if !ok || s.Leases[i].Leaseholder != leaseholder {
		return fmt.Errorf("%w: epoch %d by %s", ErrNotLeaseholder, epoch, leaseholder)
	}
	l := &s.Leases[i]
	if used > l.End {
		return fmt.Errorf("%w: used %d past end %d of lease %d", ErrCorrupt, used, l.End, epoch)
	}
	l.Used = max(l.Used, used)
	l.Beat++
	if l.Used == l.End {
		s.close(i, l.End)
	}
	return nil
}

// Release ends leaseholder's lease: it used [Start, max(used, reported)), and
// the rest is a hole.
func (s *State) Release(leaseholder string, epoch, used uint64) error {
	i, ok := s.find(epoch)
	if !ok || s.Leases[i].Leaseholder != leaseholder {
		return fmt.Errorf("%w: epoch %d by %s", ErrNotLeaseholder, epoch, leaseholder)
	}
	l := s.Leases[i]
	if used > l.End {
		return fmt.Errorf("%w: used %d past end %d of lease %d", ErrCorrupt, used, l.End, epoch)
	}
	s.close(i, max(used, l.Used))
	return nil
}

// Forget ends leaseholder's lease as if none of it was used: its leaseholder lost
// the record of which likes took its numbers (its data directory), so
// they get no ranks; every number of the block is a hole.
func (s *State) Forget(leaseholder string, epoch uint64) error {
	i, ok := s.find(epoch)
	if !ok || s.Leases[i].Leaseholder != leaseholder {
		return fmt.Errorf("%w: epoch %d by %s", ErrNotLeaseholder, epoch, leaseholder)
	}
	s.close(i, s.Leases[i].Start)
	return nil
}

// Reclaim takes back a lease whose leaseholder fell silent, if its beat is
// still the one the caller watched: what the leaseholder last reported counts
// as used, the unreported tail [Used, End) as a hole.
func (s *State) Reclaim(epoch, beat uint64) bool {
	i, ok := s.find(epoch)
	if !ok || s.Leases[i].Beat != beat {
		return false
	}
	s.close(i, s.Leases[i].Used)
	return true
}

// close moves lease i to the closed blocks with its final use, and folds.
func (s *State) close(i int, used uint64) {
	l := s.Leases[i]
	s.Leases = slices.Delete(s.Leases, i, i+1)
	c := Closed{Epoch: l.Epoch, Leaseholder: l.Leaseholder, Span: l.Span, Used: used}
	j, _ := slices.BinarySearchFunc(s.Closed, c.Start, func(x Closed, start uint64) int { return cmpU64(x.Start, start) })
	s.Closed = slices.Insert(s.Closed, j, c)
	s.fold()
}

// fold extends the dense prefix over the closed blocks that start where it
// ends, giving each its Base. A block with nothing used is dropped at once
// (none of its numbers has a rank to hand out), and so is one without a
// leaseholder (migrated from version 1, whose milestones fired by number).
func (s *State) fold() {
	for {
		i := slices.IndexFunc(s.Closed, func(c Closed) bool { return !c.Folded })
		if i < 0 || s.Closed[i].Start != s.Dense.Pos {
			return // the next block up is open (or nothing is leased)
		}
		c := &s.Closed[i]
		c.Folded, c.Base = true, s.Dense.Rank
		s.Dense = Dense{Pos: c.End, Rank: s.Dense.Rank + (c.Used - c.Start)}
		if c.Used == c.Start || c.Leaseholder == "" {
			s.Closed = slices.Delete(s.Closed, i, i+1)
		}
	}
}

// Folded returns leaseholder's folded blocks, whose numbers' ranks are known
// and not yet taken (see Settle).
func (s *State) Folded(leaseholder string) []Closed {
	var out []Closed
	for _, c := range s.Closed {
		if c.Folded && c.Leaseholder == leaseholder {
			out = append(out, c)
		}
	}
	return out
}

// Settle forgets leaseholder's folded block epoch, once the leaseholder has taken
// the ranks of its numbers. Settling an unknown block is not an error: a
// leaseholder may settle twice if its first write's answer was lost.
func (s *State) Settle(leaseholder string, epoch uint64) {
	s.Closed = slices.DeleteFunc(s.Closed, func(c Closed) bool {
		return c.Folded && c.Leaseholder == leaseholder && c.Epoch == epoch
	})
}

// Holes is how many numbers below the dense prefix were leased and never
// used.
func (s *State) Holes() uint64 { return s.Dense.Pos - 1 - s.Dense.Rank }

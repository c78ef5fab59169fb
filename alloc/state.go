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
	Epoch  uint64 `json:"epoch"`  // unique per sequence, never reused
	Holder string `json:"holder"` // replica id
	Span
	// Used: numbers in [Start, Used) are spent, as last reported by the
	// holder. Nobody but the holder may ever hand them out again.
	Used uint64 `json:"used"`
	// Beat is bumped by every renewal. Other replicas time the holder's
	// silence by how long Beat stays the same in their own clock.
	Beat uint64 `json:"beat"`
}

// State is the value of one sequence's KV key: everything the allocator
// knows about the sequence. Every change is a compare-and-swap of the whole
// value against the revision it was read at.
type State struct {
	Version int `json:"v"`
	// HWM: numbers at or above it were never leased. Numbers start at 1.
	HWM       uint64 `json:"hwm"`
	NextEpoch uint64 `json:"next_epoch"`
	// Free holds the unused tails of leases given back or reclaimed, sorted
	// and disjoint, all below HWM. They are leased again before HWM moves.
	Free   []Span  `json:"free,omitempty"`
	Leases []Lease `json:"leases,omitempty"` // sorted by epoch
	// Applied maps each holder to the nonce of its last write that landed,
	// so a holder whose CAS timed out can tell whether it took effect.
	Applied map[string]string `json:"applied,omitempty"`
}

const stateVersion = 1

// maxNumber bounds HWM and epochs far from overflow: at a billion numbers
// a second it lasts 146 years.
const maxNumber = 1 << 62

// maxStateBytes bounds a decoded value; a sequence has a handful of leases.
const maxStateBytes = 1 << 20

// NewState is a sequence nobody has used.
func NewState() *State { return &State{Version: stateVersion, HWM: 1, NextEpoch: 1} }

// Errors of the state machine.
var (
	ErrCorrupt   = errors.New("alloc: corrupt sequence state")
	ErrNotHolder = errors.New("alloc: lease not held")
)

// Clone returns a deep copy.
func (s *State) Clone() *State {
	c := *s
	c.Free = slices.Clone(s.Free)
	c.Leases = slices.Clone(s.Leases)
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

// DecodeState parses and checks a KV value.
func DecodeState(b []byte) (*State, error) {
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(b))
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Check verifies the invariants: every number below HWM is in exactly one
// place (a lease, the free list, or spent), free spans and leases are
// sorted, disjoint and below HWM, and epochs are below NextEpoch.
func (s *State) Check() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(f, a...)) }
	if s.Version != stateVersion {
		return bad("version %d", s.Version)
	}
	if s.HWM < 1 || s.HWM > maxNumber || s.NextEpoch < 1 || s.NextEpoch > maxNumber {
		return bad("hwm %d next_epoch %d", s.HWM, s.NextEpoch)
	}
	spans := make([]Span, 0, len(s.Free)+len(s.Leases))
	for i, f := range s.Free {
		if f.Start >= f.End || f.End > s.HWM {
			return bad("free span %d [%d,%d) of hwm %d", i, f.Start, f.End, s.HWM)
		}
		if i > 0 && s.Free[i-1].End >= f.Start { // adjacent spans are merged
			return bad("free spans %d and %d overlap or touch", i-1, i)
		}
		spans = append(spans, f)
	}
	for i, l := range s.Leases {
		if l.Start >= l.End || l.End > s.HWM || l.Used < l.Start || l.Used > l.End {
			return bad("lease %d [%d,%d) used %d of hwm %d", l.Epoch, l.Start, l.End, l.Used, s.HWM)
		}
		if l.Epoch == 0 || l.Epoch >= s.NextEpoch || (i > 0 && s.Leases[i-1].Epoch >= l.Epoch) {
			return bad("lease epoch %d out of order (next %d)", l.Epoch, s.NextEpoch)
		}
		if l.Holder == "" {
			return bad("lease %d has no holder", l.Epoch)
		}
		spans = append(spans, l.Span)
	}
	slices.SortFunc(spans, func(a, b Span) int { return cmpU64(a.Start, b.Start) })
	for i := 1; i < len(spans); i++ {
		if spans[i-1].End > spans[i].Start {
			return bad("spans [%d,%d) and [%d,%d) overlap", spans[i-1].Start, spans[i-1].End, spans[i].Start, spans[i].End)
		}
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

// Acquire leases up to size numbers to holder: the lowest free span first
// (so numbers given back are used before new ones), otherwise fresh numbers
// from HWM. It returns the new lease.
func (s *State) Acquire(holder string, size uint64) Lease {
	size = min(max(size, 1), 1<<32)
	var sp Span
	if len(s.Free) > 0 {
		f := s.Free[0]
		sp = Span{f.Start, f.Start + min(size, f.Len())}
		if sp.End == f.End {
			s.Free = s.Free[1:]
		} else {
			s.Free[0].Start = sp.End
		}
	} else {
		sp = Span{s.HWM, s.HWM + size}
		s.HWM = sp.End
	}
	l := Lease{Epoch: s.NextEpoch, Holder: holder, Span: sp, Used: sp.Start}
	s.NextEpoch++
	s.Leases = append(s.Leases, l) // epochs only grow: stays sorted
	return l
}

// Renew records that holder spent [Start, used) of its lease and is alive.
// A lease spent to its end is removed. Used never moves back.
func (s *State) Renew(holder string, epoch, used uint64) error {
	i, ok := s.find(epoch)
	if !ok || s.Leases[i].Holder != holder {
		return fmt.Errorf("%w: epoch %d by %s", ErrNotHolder, epoch, holder)
	}
	l := &s.Leases[i]
	if used > l.End {
		return fmt.Errorf("%w: used %d past end %d of lease %d", ErrCorrupt, used, l.End, epoch)
	}
	l.Used = max(l.Used, used)
	l.Beat++
	if l.Used == l.End {
		s.Leases = slices.Delete(s.Leases, i, i+1)
	}
	return nil
}

// Release ends holder's lease: numbers from max(used, reported) to its end
// go back to the free list.
func (s *State) Release(holder string, epoch, used uint64) error {
	i, ok := s.find(epoch)
	if !ok || s.Leases[i].Holder != holder {
		return fmt.Errorf("%w: epoch %d by %s", ErrNotHolder, epoch, holder)
	}
	l := s.Leases[i]
	if used > l.End {
		return fmt.Errorf("%w: used %d past end %d of lease %d", ErrCorrupt, used, l.End, epoch)
	}
	s.Leases = slices.Delete(s.Leases, i, i+1)
	s.free(Span{max(used, l.Used), l.End})
	return nil
}

// Reclaim takes back a lease whose holder fell silent, if its beat is
// still the one the caller watched: its unreported tail [Used, End) goes to
// the free list.
func (s *State) Reclaim(epoch, beat uint64) bool {
	i, ok := s.find(epoch)
	if !ok || s.Leases[i].Beat != beat {
		return false
	}
	l := s.Leases[i]
	s.Leases = slices.Delete(s.Leases, i, i+1)
	s.free(Span{l.Used, l.End})
	return true
}

// free adds sp to the free list, merging neighbours, and lowers HWM when
// the top of the free list reaches it.
func (s *State) free(sp Span) {
	if sp.Start >= sp.End {
		return
	}
	i, _ := slices.BinarySearchFunc(s.Free, sp.Start, func(f Span, x uint64) int { return cmpU64(f.Start, x) })
	s.Free = slices.Insert(s.Free, i, sp)
	// Merge with the next span, then with the previous one.
	if i+1 < len(s.Free) && s.Free[i].End == s.Free[i+1].Start {
		s.Free[i].End = s.Free[i+1].End
		s.Free = slices.Delete(s.Free, i+1, i+2)
	}
	if i > 0 && s.Free[i-1].End == s.Free[i].Start {
		s.Free[i-1].End = s.Free[i].End
		s.Free = slices.Delete(s.Free, i, i+1)
	}
	if n := len(s.Free); n > 0 && s.Free[n-1].End == s.HWM {
		s.HWM = s.Free[n-1].Start
		s.Free = s.Free[:n-1]
	}
}

package alloc

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
)

// ErrRefused: the lease authority refused a change that its writer may not
// make (CheckTransition, a claim outside the writer's ranks).
var ErrRefused = errors.New("alloc: change refused by the lease authority")

// MaxAcquires bounds the leases one change may take: a leaseholder takes at
// most one per round.
const MaxAcquires = 2

// maxNonceLen bounds a leaseholder's nonce in State.Applied.
const maxNonceLen = 64

// CheckTransition reports whether next is a state the leaseholder whose subject
// token is leaseholder may write over prev: the result of its own Renew,
// Release, Forget and Settle of its own leases and blocks, and of at most
// MaxAcquires Acquires of at most maxBlock numbers each, for itself, with
// its own nonce in Applied. Nothing of another leaseholder's may change:
// neither its leases nor its blocks, nor the dense prefix but as the
// leaseholder's own closes fold it, nor any other nonce. The check replays
// those steps on prev with the state machine's own methods and wants
// exactly next, so a forged rank, a jump of the high-water mark, a
// rewind, or a change to someone else's lease is refused.
//
// leaseholder is compared to token(Lease.Holder): the subject names the writer
// with '.' replaced by '_'.
func CheckTransition(prev, next *State, leaseholder string, maxBlock uint64) error {
	refuse := func(f string, a ...any) error { return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(f, a...)) }
	if err := next.Check(); err != nil {
		return refuse("%v", err)
	}
	mine := func(h string) bool { return token(h) == leaseholder }
	st := prev.Clone()
	// Its open leases: renewed, closed (released, spent, forgotten) or left.
	for _, l := range prev.Leases {
		if !mine(l.Leaseholder) {
			continue
		}
		if nl, ok := next.Lease(l.Epoch); ok {
			if nl == l {
				continue
			}
			if err := st.Renew(l.Leaseholder, l.Epoch, nl.Used); err != nil {
				return refuse("renew of lease %d: %v", l.Epoch, err)
			}
			continue
		}
		used := l.Start // gone without a trace: closed with nothing used, or forgotten
		if i := slices.IndexFunc(next.Closed, func(c Closed) bool { return c.Epoch == l.Epoch && c.Leaseholder == l.Leaseholder }); i >= 0 {
			used = next.Closed[i].Used
		}
		var err error
		switch {
		case used == l.End:
			err = st.Renew(l.Leaseholder, l.Epoch, used) // spent to its end
		case used == l.Start && l.Used > l.Start:
			err = st.Forget(l.Leaseholder, l.Epoch)
		default:
			err = st.Release(l.Leaseholder, l.Epoch, used)
		}
		if err != nil {
			return refuse("close of lease %d: %v", l.Epoch, err)
		}
	}
	// Its folded blocks whose ranks it took.
	for _, c := range prev.Closed {
		if c.Folded && mine(c.Leaseholder) && !slices.ContainsFunc(next.Closed, func(n Closed) bool { return n.Epoch == c.Epoch && n.Leaseholder == c.Leaseholder }) {
			st.Settle(c.Leaseholder, c.Epoch)
		}
	}
	// New leases: its own, bounded.
	var acquired int
	for _, l := range next.Leases {
		if l.Epoch < prev.NextEpoch {
			continue
		}
		acquired++
		if !mine(l.Leaseholder) || l.Len() > maxBlock || acquired > MaxAcquires {
			return refuse("new lease %d of %d numbers for %s", l.Epoch, l.Len(), l.Leaseholder)
		}
		if got := st.Acquire(l.Leaseholder, l.Len()); got.Epoch != l.Epoch || got.Span != l.Span {
			return refuse("new lease %d [%d,%d) is not the next block [%d,%d)", l.Epoch, l.Start, l.End, got.Start, got.End)
		}
	}
	// Its nonce, and nobody else's.
	st.Applied = copyMap(prev.Applied)
	for h, n := range next.Applied {
		if mine(h) {
			if len(n) > maxNonceLen {
				return refuse("nonce of %d bytes", len(n))
			}
			st.Applied[h] = n
		}
	}
	if len(st.Applied) == 0 {
		st.Applied = nil
	}
	want, got := st.Encode(), normalize(next).Encode()
	if !bytes.Equal(want, got) {
		return refuse("not a change %s may make: want %s, got %s", leaseholder, want, got)
	}
	return nil
}

// copyMap copies m, never nil.
func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// normalize is s with an empty Applied as nil, as Encode compares.
func normalize(s *State) *State {
	if len(s.Applied) == 0 && s.Applied != nil {
		c := s.Clone()
		c.Applied = nil
		return c
	}
	return s
}

// token is a replica id as one subject token (as replication names it).
func token(id string) string { return string(bytes.ReplaceAll([]byte(id), []byte("."), []byte("_"))) }

package crdt

import "fmt"

// HLC is a hybrid logical clock timestamp: wall milliseconds in the high 48
// bits, a logical counter in the low 16. Timestamps compare as integers.
type HLC uint64

const logicalBits = 16

// MakeHLC builds a timestamp from wall milliseconds and a logical counter.
func MakeHLC(wallMs int64, logical uint16) HLC {
	return HLC(uint64(wallMs)<<logicalBits | uint64(logical))
}

// WallMs is the wall-clock component in Unix milliseconds.
func (h HLC) WallMs() int64 { return int64(uint64(h) >> logicalBits) }

// Logical is the logical counter.
func (h HLC) Logical() uint16 { return uint16(h) }

func (h HLC) String() string { return fmt.Sprintf("%d.%d", h.WallMs(), h.Logical()) }

// Clock issues hybrid logical timestamps. It is not safe for concurrent use;
// its owner serializes calls. Wall time comes in as an argument so the clock
// stays pure and testable.
type Clock struct {
	last HLC
}

// Now returns a timestamp greater than every timestamp this clock has issued
// or observed, and at least wallMs.
func (c *Clock) Now(wallMs int64) HLC {
	if w := MakeHLC(wallMs, 0); w > c.last {
		c.last = w
	} else {
		// Same or earlier millisecond: count logically. Overflowing the 16-bit
		// counter carries into the wall part, which keeps order intact.
		c.last++
	}
	return c.last
}

// Observe folds a remote timestamp in, so later Now calls exceed it.
func (c *Clock) Observe(remote HLC) {
	if remote > c.last {
		c.last = remote
	}
}

// Last is the largest timestamp issued or observed.
func (c *Clock) Last() HLC { return c.last }

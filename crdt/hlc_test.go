package crdt

import (
	"fmt"
	"math"
	"testing"
)

const maxWall = 1<<48 - 1 // largest wall time an HLC can carry

func TestHLCRoundTrip(t *testing.T) {
	rng := newRand(20)
	walls := []int64{0, 1, 1700000000000, maxWall - 1, maxWall}
	logicals := []uint16{0, 1, 0x7fff, 0x8000, math.MaxUint16}
	for range 5000 {
		walls = append(walls, rng.Int64N(maxWall+1))
		logicals = append(logicals, uint16(rng.Uint32()))
	}
	for i := range walls {
		w, l := walls[i], logicals[i]
		h := MakeHLC(w, l)
		if h.WallMs() != w || h.Logical() != l {
			t.Fatalf("MakeHLC(%d, %d) = %#x: WallMs %d, Logical %d", w, l, uint64(h), h.WallMs(), h.Logical())
		}
		if got, want := h.String(), fmt.Sprintf("%d.%d", w, l); got != want {
			t.Fatalf("String() = %q, want %q", got, want)
		}
	}
	// Integer order is lexicographic (wall, logical) order.
	for i := range 5000 {
		w1, w2 := walls[rng.IntN(len(walls))], walls[rng.IntN(len(walls))]
		l1, l2 := logicals[rng.IntN(len(logicals))], logicals[rng.IntN(len(logicals))]
		if i%3 == 0 {
			w2 = w1 // ties on wall time are the interesting case
		}
		lexLess := w1 < w2 || w1 == w2 && l1 < l2
		if got := MakeHLC(w1, l1) < MakeHLC(w2, l2); got != lexLess {
			t.Fatalf("(%d,%d) < (%d,%d): HLC says %v, lexicographic %v", w1, l1, w2, l2, got, lexLess)
		}
	}
}

func TestClockNowSimple(t *testing.T) {
	var c Clock
	steps := []struct {
		wall int64
		want HLC
	}{
		{1000, MakeHLC(1000, 0)},
		{1000, MakeHLC(1000, 1)}, // stalled
		{1000, MakeHLC(1000, 2)},
		{500, MakeHLC(1000, 3)}, // backwards
		{999, MakeHLC(1000, 4)},
		{1001, MakeHLC(1001, 0)}, // forward again: logical resets
		{5000, MakeHLC(5000, 0)},
		{0, MakeHLC(5000, 1)},
	}
	for i, s := range steps {
		if got := c.Now(s.wall); got != s.want {
			t.Fatalf("step %d: Now(%d) = %v, want %v", i, s.wall, got, s.want)
		}
		if c.Last() != s.want {
			t.Fatalf("step %d: Last() = %v, want %v", i, c.Last(), s.want)
		}
	}
}

// TestClockNowMonotonic drives a clock with a wall time that jumps forward,
// stalls and goes backwards, interleaved with remote observations, and checks
// the Now contract: strictly above everything issued or observed, and at
// least the wall time.
func TestClockNowMonotonic(t *testing.T) {
	for seed := range uint64(50) {
		rng := newRand(100 + seed)
		var c Clock
		var prev HLC // largest timestamp issued or observed so far
		wall := int64(1_000_000 + rng.IntN(1000))
		for i := range 2000 {
			switch rng.IntN(10) {
			case 0, 1: // stall
			case 2: // backwards
				wall -= int64(rng.IntN(500))
			case 3: // remote observation, ahead or behind
				r := MakeHLC(wall+int64(rng.IntN(200))-100, uint16(rng.IntN(5)))
				c.Observe(r)
				prev = max(prev, r)
				if c.Last() != prev {
					t.Fatalf("seed %d step %d: after Observe(%v) Last = %v, want %v", seed, i, r, c.Last(), prev)
				}
				continue
			default:
				wall += int64(rng.IntN(5))
			}
			h := c.Now(wall)
			if h <= prev {
				t.Fatalf("seed %d step %d: Now(%d) = %v, not above %v", seed, i, wall, h, prev)
			}
			if h < MakeHLC(wall, 0) {
				t.Fatalf("seed %d step %d: Now(%d) = %v is below the wall time", seed, i, wall, h)
			}
			// Never more than needed: either the wall time exactly or one
			// past the previous maximum.
			if h != MakeHLC(wall, 0) && h != prev+1 {
				t.Fatalf("seed %d step %d: Now(%d) = %v after %v jumps further than needed", seed, i, wall, h, prev)
			}
			if c.Last() != h {
				t.Fatalf("seed %d step %d: Last = %v, Now returned %v", seed, i, c.Last(), h)
			}
			prev = h
		}
	}
}

func TestClockObserve(t *testing.T) {
	var c Clock
	c.Now(1000)
	remote := MakeHLC(9000, 7) // a peer whose clock is far ahead
	c.Observe(remote)
	if c.Last() != remote {
		t.Fatalf("Last after Observe = %v, want %v", c.Last(), remote)
	}
	h := c.Now(1001)
	if h <= remote {
		t.Fatalf("Now after Observe(%v) = %v, not above it", remote, h)
	}
	if h != MakeHLC(9000, 8) {
		t.Fatalf("Now = %v, want 9000.8", h)
	}
	// An older remote changes nothing.
	c.Observe(MakeHLC(10, 0))
	if c.Last() != h {
		t.Fatalf("Observe of an older timestamp moved the clock: %v", c.Last())
	}
	// Observing exactly the last timestamp changes nothing either, and Now
	// still moves past it.
	c.Observe(h)
	if got := c.Now(0); got != h+1 {
		t.Fatalf("Now = %v, want %v", got, h+1)
	}
	// Wall time catching up takes over again.
	if got := c.Now(9001); got != MakeHLC(9001, 0) {
		t.Fatalf("Now(9001) = %v, want 9001.0", got)
	}
}

func TestClockLogicalOverflow(t *testing.T) {
	const w = 1_700_000_000_000
	var c Clock
	c.Observe(MakeHLC(w, math.MaxUint16))
	h := c.Now(w)
	if h.WallMs() != w+1 || h.Logical() != 0 {
		t.Fatalf("Now after logical %d = %v, want %d.0 (carry)", math.MaxUint16, h, w+1)
	}
	if h2 := c.Now(w); h2 != MakeHLC(w+1, 1) {
		t.Fatalf("Now after carry = %v, want %d.1", h2, w+1)
	}

	// Many calls within one stalled millisecond: every one strictly larger,
	// and the k-th from (w,0) is exactly k logical steps later with carries
	// into the wall part.
	var d Clock
	start := d.Now(w)
	prev := start
	const k = 3*(1<<16) + 123
	for i := 1; i <= k; i++ {
		h := d.Now(w)
		if h <= prev {
			t.Fatalf("call %d: %v not above %v", i, h, prev)
		}
		prev = h
	}
	if prev.WallMs() != w+3 || prev.Logical() != 123 {
		t.Fatalf("after %d calls at a stalled wall: %v, want %d.123", k, prev, w+3)
	}
	// Wall time now behind the carried clock: still logical.
	if h := d.Now(w + 2); h != prev+1 {
		t.Fatalf("Now(w+2) = %v, want %v", h, prev+1)
	}
	// Wall time past the carried clock: resets the logical part.
	if h := d.Now(w + 4); h != MakeHLC(w+4, 0) {
		t.Fatalf("Now(w+4) = %v, want %d.0", h, w+4)
	}
}

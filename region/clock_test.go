package region

import (
	mrand "math/rand"
	"testing"
	"testing/quick"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeTime is a wall clock that can step and a monotonic clock that
// cannot.
type fakeTime struct {
	mono time.Duration
	step time.Duration // wall = base + mono + step
}

func (f *fakeTime) wall() time.Time          { return time.UnixMilli(1_700_000_000_000).Add(f.mono + f.step) }
func (f *fakeTime) monotonic() time.Duration { return f.mono }
func (f *fakeTime) advance(d time.Duration)  { f.mono += d }
func (f *fakeTime) jump(d time.Duration)     { f.step += d }
func realMs(f *fakeTime) int64               { return 1_700_000_000_000 + f.mono.Milliseconds() }
func newTestClock(f *fakeTime) *physClock {
	return newPhysClock(f.wall, f.monotonic, hclog.NewNullLogger(), prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}))
}

func TestClockStepsAreKeptOutOfStamps(t *testing.T) {
	f := &fakeTime{}
	c := newTestClock(f)
	c.NowMs()
	for _, jump := range []time.Duration{time.Hour, -time.Hour, 30 * time.Second, -30 * time.Second} {
		f.advance(10 * time.Millisecond)
		f.jump(jump)
		if got := c.NowMs(); got != realMs(f) {
			t.Fatalf("after a %v step: %d, want %d (the monotonic clock's time)", jump, got, realMs(f))
		}
	}
	// Time passing, and a small wobble of the wall clock, are not steps.
	f.advance(5 * time.Second)
	f.jump(300 * time.Millisecond)
	if got, want := c.NowMs(), realMs(f)+300; got != want {
		t.Fatalf("after 5 s and a 300 ms wobble: %d, want %d", got, want)
	}
	if got := testutil.ToFloat64(c.steps); got != 4 {
		t.Fatalf("steps counted: %v, want 4", got)
	}
}

// A wall clock that was wrong and is set right by a step: the step is
// first kept out, then the peers' clocks bring the replica back to them.
func TestClockFollowsPeersPastTheSkewBound(t *testing.T) {
	f := &fakeTime{step: -2 * time.Minute} // wrong at start
	c := newTestClock(f)
	c.NowMs()
	f.advance(time.Second)
	f.jump(2 * time.Minute) // NTP sets it right
	behind := c.NowMs() - realMs(f)
	if behind != -2*60*1000 {
		t.Fatalf("right after the step: %d ms off, want still -2 min", behind)
	}
	if c.Adjust(1500) != 0 {
		t.Fatal("followed peers within the skew bound")
	}
	// A step at a time, each measured again, as anti-entropy rounds do.
	for range 12 {
		if moved := c.Adjust(realMs(f) - c.NowMs()); moved != maxPeerStep.Milliseconds() {
			t.Fatalf("one adjustment moved %d ms, want one full step", moved)
		}
	}
	if c.NowMs() != realMs(f) || c.Adjust(realMs(f)-c.NowMs()) != 0 {
		t.Fatalf("after following the peers: %d ms off", c.NowMs()-realMs(f))
	}
}

// Issue 27, item 8: peers claiming an hour, then a day, ahead (or behind)
// move the clock a minute at most, a step at a time, however often they
// say it.
func TestPeersMoveTheClockABoundedWay(t *testing.T) {
	for _, lie := range []time.Duration{time.Hour, 25 * time.Hour, -time.Hour, -25 * time.Hour} {
		f := &fakeTime{}
		c := newTestClock(f)
		c.NowMs()
		for range 100 {
			f.advance(time.Second)
			target := realMs(f) + lie.Milliseconds()
			if moved := c.Adjust(target - c.NowMs()); moved > maxPeerStep.Milliseconds() || moved < -maxPeerStep.Milliseconds() {
				t.Fatalf("peers %v off: one adjustment moved %d ms", lie, moved)
			}
		}
		want := maxPeerCorrection.Milliseconds()
		if lie < 0 {
			want = -want
		}
		if got := c.NowMs() - realMs(f); got != want {
			t.Fatalf("peers %v off: the clock is %d ms off, want %d", lie, got, want)
		}
	}
}

// The bound as a property: after any sequence of wall clock steps and
// peer adjustments, the clock is within maxPeerCorrection of the span
// between the wall clock and the monotonic clock's time, and no single
// adjustment moved it more than maxPeerStep.
func TestClockBoundProperty(t *testing.T) {
	type event struct {
		Jump   int32 // seconds the wall clock steps (0: none)
		Median int32 // seconds the peers' median is from our clock
	}
	f := func(events []event) bool {
		ft := &fakeTime{}
		c := newTestClock(ft)
		c.NowMs()
		for _, e := range events {
			ft.advance(100 * time.Millisecond)
			if j := time.Duration(e.Jump%7200) * time.Second; j > time.Second || j < -time.Second {
				ft.jump(j)
			}
			c.NowMs() // notices the step
			before := c.NowMs()
			moved := c.Adjust(int64(e.Median%90000) * 1000)
			if moved > maxPeerStep.Milliseconds() || moved < -maxPeerStep.Milliseconds() || c.NowMs()-before != moved {
				t.Logf("adjust by %d s moved %d ms (clock moved %d)", e.Median%90000, moved, c.NowMs()-before)
				return false
			}
			wall, mono := ft.wall().UnixMilli(), realMs(ft)
			lo, hi := min(wall, mono)-maxPeerCorrection.Milliseconds(), max(wall, mono)+maxPeerCorrection.Milliseconds()
			if now := c.NowMs(); now < lo || now > hi {
				t.Logf("clock %d outside [%d, %d] (wall %d, monotonic %d)", now, lo, hi, wall, mono)
				return false
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500, Rand: mrand.New(mrand.NewSource(27))}); err != nil {
		t.Fatal(err)
	}
}

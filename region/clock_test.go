package region

import (
	"testing"
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
	if c.Adjust(1500) {
		t.Fatal("followed peers within the skew bound")
	}
	if !c.Adjust(-behind) || c.NowMs() != realMs(f) {
		t.Fatalf("after following the peers: %d ms off", c.NowMs()-realMs(f))
	}
}

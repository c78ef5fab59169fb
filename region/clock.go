package region

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// physClock is the physical part of the replica's hybrid logical clock:
// the wall clock, plus a correction that keeps a step of the wall clock
// out of the stamps.
//
// A wall clock that jumps ahead (a bad NTP server, an operator's typo, a
// VM restored from a snapshot) would stamp actions in the future, where
// they beat every later action in every region until real time catches up
// (hours, for a one-hour jump), reverting acknowledged ones. So a step, seen
// as the wall clock moving more or less than the monotonic clock, is
// cancelled at once: stamps keep following the monotonic clock. Peers then
// settle who is right: their clocks arrive with every replication message,
// and when the median offset of this replica's clock from theirs is more
// than maxPeerSkew (a wall clock that was wrong and was set right by a
// step, or one that was wrong at start), Adjust moves the correction by it.
// A backward correction is safe: the HLC never issues a stamp below one it
// issued or observed.
type physClock struct {
	wall func() time.Time
	// mono is elapsed monotonic time; nil turns step detection off (a
	// test's fake wall clock has no monotonic clock to be compared with).
	mono  func() time.Duration
	log   hclog.Logger
	steps prometheus.Counter

	mu       sync.Mutex // protects the fields below
	corrMs   int64
	lastWall int64
	lastMono time.Duration
	started  bool
}

// stepTolerance is how far the wall clock may move apart from the
// monotonic clock between two readings before it counts as a step.
const stepTolerance = time.Second

// maxPeerSkew is how far the median of the peers' clocks may be from ours
// before Adjust follows it.
const maxPeerSkew = 2 * time.Second

func newPhysClock(wall func() time.Time, mono func() time.Duration, log hclog.Logger, steps prometheus.Counter) *physClock {
	return &physClock{wall: wall, mono: mono, log: log, steps: steps}
}

// NowMs is the corrected time in Unix milliseconds.
func (c *physClock) NowMs() int64 {
	w := c.wall().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mono != nil {
		m := c.mono()
		if c.started {
			step := (w - c.lastWall) - (m - c.lastMono).Milliseconds()
			if step > stepTolerance.Milliseconds() || step < -stepTolerance.Milliseconds() {
				c.corrMs -= step
				c.steps.Inc()
				c.log.Error("the wall clock stepped; stamps keep following the monotonic clock until peers say otherwise",
					"step", time.Duration(step)*time.Millisecond, "correction", time.Duration(c.corrMs)*time.Millisecond)
			}
		}
		c.lastWall, c.lastMono, c.started = w, m, true
	}
	return w + c.corrMs
}

// Adjust moves the clock by the median offset of the peers' clocks from
// ours (positive: they are ahead), if it is past maxPeerSkew.
func (c *physClock) Adjust(medianMs int64) bool {
	if medianMs <= maxPeerSkew.Milliseconds() && medianMs >= -maxPeerSkew.Milliseconds() {
		return false
	}
	c.mu.Lock()
	c.corrMs += medianMs
	corr := c.corrMs
	c.mu.Unlock()
	c.log.Warn("this replica's clock disagrees with its peers'; following them",
		"offset", time.Duration(medianMs)*time.Millisecond, "correction", time.Duration(corr)*time.Millisecond)
	return true
}

// CorrectionMs is what is added to the wall clock.
func (c *physClock) CorrectionMs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.corrMs
}

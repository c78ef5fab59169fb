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
//
// Peers are believed only so far, however many of them say the same
// (docs/architecture.md, "How far peers can move a replica's clock"): one
// Adjust moves the clock at most maxPeerStep, and in all the peers keep
// it within maxPeerCorrection of one of this replica's own two readings
// of the time, the wall clock and the wall clock with its steps kept out
// (anywhere between the two is fine: that is the choice peers settle).
// Lying heartbeats can thus make expiry (idempotency keys, slots)
// run at most a minute early or late, never a day.
type physClock struct {
	wall func() time.Time
	// mono is elapsed monotonic time; nil turns step detection off (a
	// test's fake wall clock has no monotonic clock to be compared with).
	mono  func() time.Duration
	log   hclog.Logger
	steps prometheus.Counter

	mu sync.Mutex // protects the fields below
	// stepMs takes the wall clock's steps out; peerMs follows the peers
	// (Adjust), within peerRangeLocked. The correction is their sum.
	stepMs, peerMs int64
	// atBound: the last Adjust was cut short by maxPeerCorrection (it is
	// logged once, not every round).
	atBound  bool
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

// maxPeerStep is the most one Adjust moves the clock.
const maxPeerStep = 10 * time.Second

// maxPeerCorrection is how far beyond this replica's own readings of the
// time (see physClock) the peers can move its clock in all. It matches
// the bound on a remote stamp's lead (maxClockDriftMs): a clock that far
// off must be set right on its host.
const maxPeerCorrection = time.Minute

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
				c.stepMs -= step
				lo, hi := c.peerRangeLocked()
				c.peerMs = min(max(c.peerMs, lo), hi)
				c.steps.Inc()
				c.log.Error("the wall clock stepped; stamps keep following the monotonic clock until peers say otherwise",
					"step", time.Duration(step)*time.Millisecond, "correction", time.Duration(c.stepMs+c.peerMs)*time.Millisecond)
			}
		}
		c.lastWall, c.lastMono, c.started = w, m, true
	}
	return w + c.stepMs + c.peerMs
}

// peerRangeLocked is where peerMs may be: the clock within
// maxPeerCorrection of the wall clock (peerMs = -stepMs) or of the wall
// clock with its steps kept out (peerMs = 0), or between the two.
func (c *physClock) peerRangeLocked() (lo, hi int64) {
	b := maxPeerCorrection.Milliseconds()
	return min(0, -c.stepMs) - b, max(0, -c.stepMs) + b
}

// Adjust moves the clock toward the peers' by their median offset from
// ours (positive: they are ahead), if it is past maxPeerSkew: by at most
// maxPeerStep, and not past maxPeerCorrection (see physClock). It returns
// how far it moved the clock.
func (c *physClock) Adjust(medianMs int64) int64 {
	if medianMs <= maxPeerSkew.Milliseconds() && medianMs >= -maxPeerSkew.Milliseconds() {
		return 0
	}
	step := min(max(medianMs, -maxPeerStep.Milliseconds()), maxPeerStep.Milliseconds())
	c.mu.Lock()
	lo, hi := c.peerRangeLocked()
	next := min(max(c.peerMs+step, lo), hi)
	moved := next - c.peerMs
	c.peerMs = next
	corr := c.stepMs + c.peerMs
	cut := moved != step
	logBound := cut && !c.atBound
	c.atBound = cut
	c.mu.Unlock()
	if logBound {
		c.log.Error("this replica's clock disagrees with its peers' by more than peers may correct: check the time on this host and on the peers",
			"offset", time.Duration(medianMs)*time.Millisecond, "correction", time.Duration(corr)*time.Millisecond,
			"bound", maxPeerCorrection)
	}
	if moved != 0 {
		c.log.Warn("this replica's clock disagrees with its peers'; following them",
			"offset", time.Duration(medianMs)*time.Millisecond, "moved", time.Duration(moved)*time.Millisecond,
			"correction", time.Duration(corr)*time.Millisecond)
	}
	return moved
}

// CorrectionMs is what is added to the wall clock.
func (c *physClock) CorrectionMs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stepMs + c.peerMs
}

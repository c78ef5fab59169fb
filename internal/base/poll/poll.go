// Package poll waits: for a condition to hold (Until, the one polling
// loop of tally's tooling, internal/localnet and internal/bench, and
// through testkit.WaitFor of its tests), or for a pause that a context
// may cut short (Sleep, for retry loops anywhere in tally). It is a
// package of its own, apart from internal/base/testkit, so that non-test code
// can use it without importing package testing.
package poll

import (
	"context"
	"fmt"
	"time"
)

// Sleep waits d, or less if ctx ends first; it reports whether it
// waited the whole d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// DefaultEvery is the longest pause between checks when Until is given
// none.
const DefaultEvery = 50 * time.Millisecond

// Until calls check until it returns nil, and returns nil then. Between
// calls it pauses with a backoff, 1 ms doubling up to every (DefaultEvery
// if every <= 0), so a condition met at once costs nothing and a slow one
// does not spin. check runs on the calling goroutine, at least once.
//
// Until gives up when ctx ends (its deadline bounds the wait) and returns
// ctx's error wrapped with check's last one: "<ctx error> (last: <check's
// error>)". A check error made by Permanent ends the wait at once: Until
// returns the error Permanent was given.
func Until(ctx context.Context, every time.Duration, check func() error) error {
	if every <= 0 {
		every = DefaultEvery
	}
	backoff := min(time.Millisecond, every)
	var timer *time.Timer
	for {
		err := check()
		if err == nil {
			return nil
		}
		if p, ok := err.(permanent); ok {
			return p.err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		}
		if timer == nil {
			timer = time.NewTimer(backoff)
			defer timer.Stop()
		} else {
			timer.Reset(backoff)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-timer.C:
		}
		backoff = min(2*backoff, every)
	}
}

// Permanent marks err as final for Until: a failure that waiting will not
// mend. It returns nil for nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/poll"
)

// WaitFor calls f until it returns nil, and fails t with f's last error if
// that has not happened within timeout. It polls with poll.Until's backoff
// (1ms doubling to 50ms), so a condition met at once costs nothing and a
// slow one does not spin. f runs on the calling goroutine, so it may call
// t.Fatal itself.
func WaitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := poll.Until(ctx, poll.DefaultEvery, f); err != nil {
		t.Fatalf("not done after %s: %v", timeout, err)
	}
}

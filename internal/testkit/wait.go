package testkit

import (
	"testing"
	"time"
)

// WaitFor calls f until it returns nil, and fails t with f's last error if
// that has not happened within timeout. It polls with a short backoff
// (1ms doubling to 50ms), so a condition met at once costs nothing and a
// slow one does not spin. f runs on the calling goroutine, so it may call
// t.Fatal itself.
func WaitFor(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	backoff := time.Millisecond
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done after %s: %v", timeout, err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

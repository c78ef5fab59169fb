package testkit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestWaitForReturnsOnceFSucceeds(t *testing.T) {
	calls := 0
	WaitFor(t, time.Minute, func() error {
		calls++
		if calls < 4 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 4 {
		t.Fatalf("f called %d times, want 4", calls)
	}
}

// recorder is a testing.TB whose Fatalf records the message and stops the
// calling goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(r)
}

func TestWaitForFailsWithTheLastError(t *testing.T) {
	rec := &recorder{TB: t}
	calls := 0
	func() {
		defer func() {
			if p := recover(); p != nil && p != rec {
				panic(p)
			}
		}()
		WaitFor(rec, 0, func() error {
			calls++
			return errors.New("still " + fmt.Sprint(calls))
		})
	}()
	if rec.msg == "" {
		t.Fatal("WaitFor did not fail")
	}
	if want := fmt.Sprintf("still %d", calls); !strings.Contains(rec.msg, want) {
		t.Fatalf("failure %q does not carry the last error %q", rec.msg, want)
	}
}

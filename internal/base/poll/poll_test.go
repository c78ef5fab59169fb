package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUntilReturnsOnceCheckSucceeds(t *testing.T) {
	calls := 0
	err := Until(context.Background(), time.Millisecond, func() error {
		calls++
		if calls < 4 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("Until: %v after %d calls, want nil after 4", err, calls)
	}
}

func TestUntilGivesUpWithCtxAndTheLastError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	calls := 0
	err := Until(ctx, time.Millisecond, func() error {
		calls++
		return fmt.Errorf("still %d", calls)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Until: %v, want it to wrap context.DeadlineExceeded", err)
	}
	if want := fmt.Sprintf("(last: still %d)", calls); !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("Until: %q, want it to end in %q", err, want)
	}
}

func TestUntilChecksOnceEvenWhenCtxHasEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	if err := Until(ctx, 0, func() error { calls++; return nil }); err != nil || calls != 1 {
		t.Fatalf("Until on an ended ctx: %v after %d calls, want nil after 1", err, calls)
	}
}

func TestUntilStopsAtAPermanentError(t *testing.T) {
	refused := errors.New("refused")
	calls := 0
	err := Until(context.Background(), time.Millisecond, func() error {
		calls++
		return Permanent(refused)
	})
	if err != refused || calls != 1 {
		t.Fatalf("Until: %v after %d calls, want %v after 1", err, calls, refused)
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
}

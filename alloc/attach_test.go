package alloc

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// A hook Attach sets before Start is what the leaseholder calls when numbers
// become usable after a Take found none; Attach after Start panics.
func TestAttachSetsTheReadyHook(t *testing.T) {
	kv, _ := startKV(t)
	h, err := New(testConfig(kv, "r1"))
	if err != nil {
		t.Fatal(err)
	}
	var woken atomic.Int32
	h.Attach(func() { woken.Add(1) })
	if _, ok := h.Take(1); ok {
		t.Fatal("numbers before any lease")
	}
	h.Start()
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	testkit.WaitFor(t, 10*time.Second, func() error {
		if woken.Load() == 0 {
			return errors.New("not woken")
		}
		return nil
	})
	if _, ok := h.Take(1); !ok {
		t.Fatal("woken, but no number to take")
	}
	defer func() {
		if recover() == nil {
			t.Error("Attach after Start did not panic")
		}
	}()
	h.Attach(func() {})
}

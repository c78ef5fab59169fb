package bench

import (
	"context"
	"testing"
	"time"
)

// A run shorter than it takes to start its workers still measures: each
// worker sends one request at least (a 100 ms run on a loaded machine
// once measured none, and its test failed on an empty result).
func TestRunLoadEveryWorkerSendsOnce(t *testing.T) {
	lr := runLoad(context.Background(), loadConfig{Workers: 3, Duration: time.Nanosecond}, func(int) loadOp {
		return func(context.Context) (int64, int64, error) {
			time.Sleep(time.Millisecond) // past the run's end before the next check
			return 1, 1, nil
		}
	})
	if lr.Requests < 3 || lr.Units != lr.Requests || lr.Errors != 0 {
		t.Fatalf("%d requests, %d units, %d errors; want every one of 3 workers to send one", lr.Requests, lr.Units, lr.Errors)
	}
}

package region_test

import (
	"testing"

	"github.com/tally-dev/tally/replication/replicationtest"
)

// TestWindowScripts runs the slot scripts of the repository's
// testdata/windows (replicationtest lists their commands): bookings at
// client times, their bounds, how concurrent and contended likes settle
// in the slots of replicas that exchange their changes, and slots past
// their retention staying gone. `go test ./region -run Scripts -rewrite`
// rewrites the expected output.
func TestWindowScripts(t *testing.T) {
	replicationtest.Run(t, "../testdata/windows")
}

// TestBudgetScripts runs the budget scripts of testdata/budgets: grants,
// spends, rights moving between replicas on asks, and exhaustion.
func TestBudgetScripts(t *testing.T) {
	replicationtest.Run(t, "../testdata/budgets")
}

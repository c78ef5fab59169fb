package replication_test

import (
	"testing"

	"github.com/tally-dev/tally/replication/replicationtest"
)

// TestScenarios runs the replication scripts of the repository's testdata/
// (replicationtest lists their commands). `go test ./replication -run
// Scenarios -rewrite` rewrites the expected output.
func TestScenarios(t *testing.T) {
	replicationtest.Run(t, "../testdata/replication")
}

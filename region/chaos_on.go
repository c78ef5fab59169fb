//go:build chaos

package region

import (
	"os"
	"time"

	"github.com/tally-dev/tally/crdt"
)

// The chaos build (`go build -tags chaos`) can run with ONE deliberate bug,
// named by the environment variable TALLY_CHAOS_BUG, so that the chaos
// suite (package chaos) can prove it catches it. Bugs of this package:
//
//   - ack-before-commit: the writer acknowledges a batch of local operations,
//     waits chaosAckWindow, and only then commits it, so a kill -9 in
//     between loses acknowledged writes;
//   - no-reconcile: the winner of a like record does not reconcile its
//     excess after a merge, so concurrent likes of one user count twice.
//
// Without the variable the chaos build behaves like a normal one.
var chaosBug = os.Getenv("TALLY_CHAOS_BUG")

// chaosAckWindow is how long ack-before-commit holds acknowledged writes
// uncommitted.
const chaosAckWindow = 25 * time.Millisecond

// chaosAckBeforeCommit acknowledges the batch before its commit if the bug
// ack-before-commit is on and the batch holds local operations. It reports
// whether it did, in which case the caller must not acknowledge again.
func chaosAckBeforeCommit(batch []*request) bool {
	if chaosBug != "ack-before-commit" {
		return false
	}
	local := false
	for _, q := range batch {
		local = local || len(q.ops) > 0
	}
	if !local {
		return false
	}
	for _, q := range batch {
		q.finish(nil)
	}
	time.Sleep(chaosAckWindow)
	return true
}

// chaosReconcile skips the reconciliation after a merge if the bug
// no-reconcile is on.
func chaosReconcile(rec *crdt.LikeRecord, self string) int64 {
	if chaosBug == "no-reconcile" {
		return 0
	}
	return rec.Reconcile(self)
}

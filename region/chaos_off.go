//go:build !chaos

package region

import "github.com/tally-dev/tally/crdt"

// Hooks for the chaos build (chaos_on.go, `go build -tags chaos`), which can
// switch on one deliberate bug so that the chaos suite proves it catches
// it. In a normal build they are the plain code and compile away.

// chaosAckBeforeCommit may acknowledge a batch before it is committed. It
// reports whether it did; here it never does.
func chaosAckBeforeCommit([]*request) bool { return false }

// chaosReconcile runs the winner's reconciliation after a merge.
func chaosReconcile(rec *crdt.LikeRecord, self string) int64 { return rec.Reconcile(self) }

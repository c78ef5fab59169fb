package region

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// AuditDiff is a vector whose own entry the event log does not account
// for.
type AuditDiff struct {
	Kind   storage.Kind
	Key    string
	Logged crdt.PN // the own entry recomputed from the log
	Stored crdt.PN // the own entry in the store
}

// AuditReport is the outcome of Audit.
type AuditReport struct {
	Replica string
	// Events, First and Last describe the log audited.
	Events, First, Last uint64
	// Complete: the log starts at its first event (nothing trimmed), so
	// it must account for every own entry exactly.
	Complete bool
	// Vectors is how many vectors were compared.
	Vectors int
	Diffs   []AuditDiff
}

// OK reports whether the log accounts for every own entry compared.
func (a *AuditReport) OK() bool { return len(a.Diffs) == 0 }

// Audit recomputes this replica's own entry of every vector (or of one:
// kind and key set) from its event log and compares it with the stored
// one, from one snapshot. Every region's view of this replica's entries
// converges to the stored ones, so auditing every replica audits every
// region's counts, budgets included: grants, spends, transfers, refunds
// and recoveries are all logged (storage.Event.Moves).
func (a Admin) Audit(kind storage.Kind, key string) (AuditReport, error) {
	r := a.r
	if !r.cfg.EventLog {
		return AuditReport{}, fmt.Errorf("%w: the event log is off", ErrNoLog)
	}
	if key != "" && (!kind.Valid() || !crdt.ValidID(key)) {
		return AuditReport{}, fmt.Errorf("%w: bad audit key %c/%q", ErrInvalid, kind, key)
	}
	t, err := r.store.LogTotals(r.self)
	if err != nil {
		return AuditReport{}, err
	}
	rep := AuditReport{Replica: r.self, Events: t.Events, First: t.First, Last: t.Last, Complete: t.First <= 1}
	keys := map[storage.VectorKey]bool{}
	for k := range t.Logged {
		keys[k] = true
	}
	for k, e := range t.Stored {
		if e != (crdt.PN{}) {
			keys[k] = true
		}
	}
	for k := range keys {
		if key != "" && (k.Kind != kind || auditKey(k) != key) {
			continue
		}
		rep.Vectors++
		if l, s := t.Logged[k], t.Stored[k]; l != s {
			rep.Diffs = append(rep.Diffs, AuditDiff{Kind: k.Kind, Key: k.Key, Logged: l, Stored: s})
		}
	}
	slices.SortFunc(rep.Diffs, func(a, b AuditDiff) int {
		if a.Kind != b.Kind {
			return int(a.Kind) - int(b.Kind)
		}
		return strings.Compare(a.Key, b.Key)
	})
	return rep, nil
}

// auditKey is the key a vector is audited under: a budget's inboxes are
// audited with the budget.
func auditKey(k storage.VectorKey) string {
	if k.Kind == storage.Budgets {
		if key, _, _, ok := crdt.SplitBudgetName(k.Key); ok {
			return key
		}
	}
	return k.Key
}

// MaxHistory bounds the actions one History call returns.
const MaxHistory = 1000

// PairAction is one like or unlike of a pair, with where it was accepted.
type PairAction struct {
	Replica, Region string
	Liked           bool
	HLC             crdt.HLC
	Seq             uint64 // in the replica's event log
}

// PairHistory is a pair's history as gathered from the replicas (package
// replication gathers it; a standalone replica has only its own).
type PairHistory struct {
	Actions []PairAction // oldest first, by stamp
	// Missing lists the replicas that did not answer: their actions are
	// not in Actions.
	Missing []string
	// Partial lists the replicas that answered but whose history does
	// not cover their whole life: their data directory lost state
	// (Replica.StateLost), and the actions they accepted before may be
	// gone.
	Partial []string
}

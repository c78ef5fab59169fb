package chaos

import (
	"sort"
	"sync"
	"time"
)

// OpKind is what an operation does.
type OpKind string

// Operation kinds.
const (
	OpLike   OpKind = "like"
	OpUnlike OpKind = "unlike"
	OpIncr   OpKind = "incr"
	// OpUnique adds ids to a unique count (POST /v1/uniques/{key}, or a
	// batch of unique events). Adding is idempotent, so a timed-out add
	// is retried at the same region until acknowledged, like a like.
	OpUnique OpKind = "unique"
	// OpGrant adds By to budget Key; OpSpend spends By from it, with an
	// idempotency key (Idem) or without; OpCashback spends By from the
	// cashback pool (Key), takes it from counter Merchant and adds it to
	// counter User, under Idem (budgets.go).
	OpGrant    OpKind = "grant"
	OpSpend    OpKind = "spend"
	OpCashback OpKind = "cashback"
	// OpBlock and OpUnblock block and unblock User (an admin route,
	// blocks.go); the acknowledgement's stamp and replica are FlagHLC and
	// FlagReplica. A timed-out one is retried at the same region until
	// acknowledged.
	OpBlock   OpKind = "block"
	OpUnblock OpKind = "unblock"
	// OpHandoff: an admin has Region hand every budget right it holds to
	// replica User (PUT /v1/admin/budgets/handoff), holds the handoff for
	// RetryAfter, then cancels it; Value is the rights it moved. It
	// changes who holds rights, never how many there are, so the budget
	// model does not change, and every budget check must still hold.
	OpHandoff OpKind = "handoff"
	// OpToggle flips User's like of Key at Region (POST
	// /v1/likes/{item}/{user}/toggle) under idempotency key Idem; Liked
	// is the state its acknowledgement answered. A timed-out toggle is
	// retried, same key, at the same region until acknowledged; one
	// acknowledged is resent there once more (Resend), which must answer
	// duplicate:true and the same state. A share of toggles is followed
	// by a resend of the key to another region, recorded as its own
	// operation (sameKey).
	OpToggle OpKind = "toggle"
)

// blockOp reports whether k is a block or an unblock.
func (k OpKind) blockOp() bool { return k == OpBlock || k == OpUnblock }

// budgetOp reports whether k is a budget operation: a grant, a spend or a
// cashback.
func (k OpKind) budgetOp() bool { return k == OpGrant || k == OpSpend || k == OpCashback }

// Outcome is what the client learned of an operation.
type Outcome string

// Outcomes. A timed-out operation may or may not have been applied: a like
// or unlike is retried (at the same region) until acknowledged, and ends ok;
// an increment is resolved after the final heal by resending its
// idempotency key to the same region (see Op.Resolved).
const (
	OutcomeOK      Outcome = "ok"      // acknowledged (2xx)
	OutcomeFailed  Outcome = "failed"  // certainly not applied: connection refused, 503 not_ready, 4xx
	OutcomeTimeout Outcome = "timeout" // indeterminate: no answer in time, connection lost, 5xx
	// OutcomeRefused: a budget spend or cashback answered 409
	// (budget_exhausted or rights_elsewhere, in Reason): the region
	// answered, and spent nothing.
	OutcomeRefused Outcome = "refused"
)

// Resolutions of a timed-out increment.
const (
	ResolvedDuplicate = "duplicate" // the resend said duplicate:true: it had been applied
	ResolvedApplied   = "applied"   // the resend applied it: it had not been
)

// Op is one operation of the history.
type Op struct {
	ID   int64  `json:"id"`
	Kind OpKind `json:"kind"`
	// Region is where the client sent it (every attempt of it but an
	// increment's Retry).
	Region string `json:"region"`
	// Key is the item (likes), the counter key (increments), the
	// unique-count key (unique adds) or the budget (grants, spends and
	// cashbacks).
	Key string `json:"key"`
	// User is the user of a like or unlike, or the counter a cashback
	// credits; Merchant the counter a cashback debits.
	User     string `json:"user,omitempty"`
	Merchant string `json:"merchant,omitempty"`
	By       int64  `json:"by,omitempty"`
	Idem     string `json:"idem,omitempty"`
	// IDs are a unique add's ids, repeats included; an acknowledged add
	// whose answer rejected some of them holds only the applied ones.
	IDs []string `json:"ids,omitempty"`
	// Retry, for an increment or a keyed spend or cashback, is the region
	// the client sent the same idempotency key to after the first answer
	// (a failover); "" if none, sent RetryAfter the first answer.
	// RetryOutcome is that attempt's outcome, RetryDuplicate whether it
	// answered duplicate:true.
	Retry          string        `json:"retry,omitempty"`
	RetryAfter     time.Duration `json:"retry_after,omitempty"`
	RetryOutcome   Outcome       `json:"retry_outcome,omitempty"`
	RetryDuplicate bool          `json:"retry_duplicate,omitempty"`
	// At is the event time the client sent, in unix ms (0: none, the
	// replica's clock decides): for an increment, its own time when the
	// event happened, a little before the first attempt, and the same in
	// every attempt, so the model knows the 1 s slot it belongs in; for
	// a like or unlike, that of its last attempt (each is stamped anew);
	// for a unique add, the same in every attempt, unless a replica
	// refused it (bad_time), when the add is sent again without one.
	At int64 `json:"at,omitempty"`
	// ResolveAt, for an increment resolved after At had fallen out of the
	// replicas' accepted past (a long run), is the time the resolving
	// resend carried instead (see workload.resolve).
	ResolveAt int64 `json:"resolve_at,omitempty"`
	// Events: the increment (or budget grant or spend) was sent as a
	// one-event batch (POST /v1/events) rather than to its own route; a
	// unique add, as one unique event per id.
	Events bool `json:"events,omitempty"`
	// Pair is shared by the two operations of a concurrent pair (the same
	// user acting in two regions at once); 0 otherwise.
	Pair int64 `json:"pair,omitempty"`
	// Start and End are offsets from the start of the run: the first
	// attempt sent, the last answer received.
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// Outcome is the final outcome; Attempts how many requests it took.
	Outcome  Outcome `json:"outcome"`
	Attempts int     `json:"attempts"`
	// FirstAcked: the first attempt was acknowledged, though more were
	// sent (an increment's failover retry goes whatever the first
	// answer was).
	FirstAcked bool `json:"first_acked,omitempty"`
	// Reason says why an operation failed or timed out (first attempt).
	Reason string `json:"reason,omitempty"`
	// Resolved says how a timed-out increment was resolved ("" if not).
	Resolved string `json:"resolved,omitempty"`
	// Value is the count or counter value in the acknowledgement.
	Value int64 `json:"value,omitempty"`
	// Counted, for an increment of an approximate counter, is what each
	// answer that applied it (ok, not duplicate) said it counted, and
	// CountUnseen says an attempt's answer was lost: it may have applied
	// and counted something nobody saw (approx.go).
	Counted     []int64 `json:"counted,omitempty"`
	CountUnseen bool    `json:"count_unseen,omitempty"`
	// Applications, for a keyed spend or cashback, counts the regions
	// whose attempt may have applied the key (answered ok and not
	// duplicate, or no answer): each beyond the first is refunded by
	// reconciliation, raising the budget's granted and spent alike.
	Applications int `json:"applications,omitempty"`
	// CrossShard: a cashback sent to a sharded region, where one whose
	// keys no replica holds together runs across shards, and a run
	// called off gives back what any run of it spent (fences).
	CrossShard bool `json:"cross_shard,omitempty"`
	// FlagHLC and FlagReplica are the stamp and replica of an
	// acknowledged block or unblock, as it answered.
	FlagHLC     string `json:"flag_hlc,omitempty"`
	FlagReplica string `json:"flag_replica,omitempty"`
	// BlockedRetry: a like or unlike whose first attempt timed out and
	// whose retry was refused because the user had been blocked there
	// since; whether the first attempt applied is unknown.
	BlockedRetry bool `json:"blocked_retry,omitempty"`
	// Liked, for an acknowledged toggle, is the state its answer said.
	// ResendOutcome, ResendDuplicate and ResendLiked are what the resend
	// of an acknowledged toggle's key to the same region answered ("":
	// not resent; a sharded run does not resend, as a region's other
	// copy of the shard may not have heard of it yet).
	Liked           bool    `json:"liked,omitempty"`
	ResendOutcome   Outcome `json:"resend_outcome,omitempty"`
	ResendDuplicate bool    `json:"resend_duplicate,omitempty"`
	ResendLiked     bool    `json:"resend_liked,omitempty"`
	// Late: a like or unlike of a late pair (planner.late), sent right
	// after the user's opposite action, stamped 30 s before it.
	Late bool `json:"late,omitempty"`
	// Episode is the fault episode active when the operation started (0:
	// none), and LinkFault whether it cut regions apart.
	Episode   int  `json:"episode,omitempty"`
	LinkFault bool `json:"link_fault,omitempty"`

	// lag is how long before each send the event happened (its At is
	// the client's clock minus lag); stamped: a like or unlike is sent
	// with an event time (an increment always is).
	lag     time.Duration
	stamped bool
	// single: a unique add of one id sent as {"id": ...}, not {"ids": [...]}.
	single bool
	// keyed: a budget spend sent with an idempotency key (a cashback
	// always is, and a toggle).
	keyed bool
	// sameKey: a toggle resent to another region with the idempotency
	// key of the step's previous operation, RetryAfter after its answer.
	sameKey bool
}

// likeState reports the like state a like, unlike or acknowledged toggle
// set, and whether o is one.
func (o *Op) likeState() (liked, ok bool) {
	switch o.Kind {
	case OpLike, OpUnlike:
		return o.Kind == OpLike, true
	case OpToggle:
		return o.Liked, o.Outcome == OutcomeOK
	}
	return false, false
}

// likeOp reports whether o acts on a user's like of an item: a like, an
// unlike or a toggle.
func (o *Op) likeOp() bool { return o.Kind == OpLike || o.Kind == OpUnlike || o.Kind == OpToggle }

// applied reports whether the model counts the operation: acknowledged, or
// timed out and resolved.
func (o *Op) applied() bool {
	return o.Outcome == OutcomeOK || o.Outcome == OutcomeTimeout && o.Resolved != ""
}

// noteCount records what an increment's attempt answered of its count,
// if its counter is approximate (Counted, CountUnseen).
func (o *Op) noteCount(a answer) {
	if !isApprox(o.Key) {
		return
	}
	switch {
	case a.outcome == OutcomeOK && !a.duplicate:
		o.Counted = append(o.Counted, a.counted)
	case a.outcome == OutcomeTimeout:
		o.CountUnseen = true
	}
}

// history is the record of every operation. Workers add finished
// operations; the resolver later completes timed-out increments.
type history struct {
	mu  sync.Mutex // protects ops
	ops []*Op
}

func (h *history) add(o *Op) {
	h.mu.Lock()
	h.ops = append(h.ops, o)
	h.mu.Unlock()
}

// unresolved returns the timed-out, unresolved increments sent to region
// ("" for every region).
func (h *history) unresolved(region string) []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*Op
	for _, o := range h.ops {
		if o.Kind == OpIncr && o.Outcome == OutcomeTimeout && o.Resolved == "" && (region == "" || o.Region == region) {
			out = append(out, o)
		}
	}
	return out
}

// resolve records how a timed-out increment was resolved, and the event
// time of the resolving resend if it was not At (0: it was).
func (h *history) resolve(o *Op, how string, at int64, a answer) {
	h.mu.Lock()
	o.Resolved = how
	o.noteCount(a)
	if at != o.At {
		o.ResolveAt = at
	}
	h.mu.Unlock()
}

// snapshot returns copies of the operations sorted by id.
func (h *history) snapshot() []Op {
	h.mu.Lock()
	out := make([]Op, len(h.ops))
	for i, o := range h.ops {
		out[i] = *o
	}
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

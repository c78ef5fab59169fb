package region

import (
	"fmt"
	"math"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/storage"
)

// EnvChaosBug is the environment variable a chaos build (`go build -tags
// chaos`) reads, through ChaosFromEnv, to switch on one deliberate bug;
// BugAckBeforeCommit and BugNoReconcile are this package's values (other
// packages read other values).
const (
	EnvChaosBug            = "TALLY_CHAOS_BUG"
	BugAckBeforeCommit     = "ack-before-commit"
	BugNoReconcile         = "no-reconcile"
	BugClockFollowsWall    = "clock-follows-wall"
	BugListsLocalOnly      = "lists-local-only"
	BugKeysNotReconciled   = "keys-not-reconciled"
	BugLogSkipsIncrements  = "log-skips-increments"
	BugSlotsAtArrival      = "buckets-at-arrival" // the --bug name keeps the old word for slots
	BugSketchStoredOnly    = "sketch-merge-stored-only"
	BugSpendWithoutRights  = "spend-without-rights"
	BugBlockNotReconciled  = "block-not-reconciled"
	BugApproxCoinTwice     = "approx-coin-twice"
	BugGiveWhatIsAsked     = "give-what-is-asked"
	BugClockFollowsPeers   = "clock-follows-peers"
	BugEstimateUnbounded   = "estimate-unbounded"
	BugAckUnheld           = "ack-unheld-writes"
	BugSplitTwoParts       = "split-user-two-parts"
	BugDropUnsynced        = "delete-before-sync"
	BugToggleTwice         = "toggle-applies-twice"
	BugMergeIgnoresAt      = "merge-ignores-client-time"
	BugCashbackNoFloor     = "cashback-no-floor"
	BugForwardAckUnapplied = "forwarded-ack-unapplied"
	BugFencesLose          = "fences-lose"
)

// Chaos is what a chaos build may do wrong on purpose, so that the chaos
// suite (internal/chaos) proves it catches it. Every field is honoured only
// in a chaos build; in any other the code that reads them compiles away.
// The zero Chaos changes nothing.
type Chaos struct {
	// AckBeforeCommit: the writer acknowledges a batch of local operations,
	// waits AckWindow, and only then commits it, so a kill -9 in between
	// loses acknowledged writes.
	AckBeforeCommit bool
	// NoReconcile: the winner of a like record does not reconcile its
	// excess after a merge, so concurrent likes of one user count twice.
	NoReconcile bool
	// ClockFollowsWall: stamps follow the wall clock whatever it does: no
	// step is kept out, and the peers' clocks are not followed.
	ClockFollowsWall bool
	// ListsLocalOnly: the like lists take only this replica's own likes
	// and unlikes, not those merged from peers, so regions list different
	// likers of the same item.
	ListsLocalOnly bool
	// KeysNotReconciled: the winner of a keyed record does not take back
	// the extra applications of an idempotency key, so a retry that two
	// regions both applied counts twice.
	KeysNotReconciled bool
	// LogSkipsIncrements: increments are applied but not logged, so the
	// event log misses them.
	LogSkipsIncrements bool
	// SlotsAtArrival: counter changes are booked into the slots of
	// the writer's clock when they arrive, not of the client's event time
	// (Op.At) or the winning action's, so the windows misplace them.
	SlotsAtArrival bool
	// SketchStoredOnly: a sketch page from a peer is merged only into a
	// copy of that page this replica already stores; one it has no copy
	// of yet (a zero page is not stored) is skipped, as if there were
	// nothing to merge into. So no replica ever takes another's sketch
	// pages, and each region's unique counts hold only the ids it was
	// sent itself.
	SketchStoredOnly bool
	// SpendWithoutRights: a budget spend is allowed when the budget as
	// this replica sees it has enough left, whoever holds the rights: the
	// classic overspend of two regions that each see the last units.
	SpendWithoutRights bool
	// BlockNotReconciled: a block flag merged from a peer changes the
	// flag but does not make this replica reconcile the user's records it
	// is the winner of, so a block or unblock issued elsewhere leaves
	// those likes counted (or uncounted) for good.
	BlockNotReconciled bool
	// ApproxCoinTwice: a keyed increment of an approximate counter flips
	// one coin for what its answer (and its record) says it counted and
	// another for what it writes to the vector, so the counter drifts
	// from the sum of what its increments were told they counted.
	ApproxCoinTwice bool
	// GiveWhatIsAsked: a replica answers a peer's ask for rights with
	// what the ask wants, or half of what it holds if that is more, up to
	// all it holds: the rule before issue 27, by which one ask of 2^40
	// takes every right a holder has, whatever its own demand.
	GiveWhatIsAsked bool
	// ClockFollowsPeers: the peers' correction of the clock is the whole
	// median offset, every time, with no bound per step or in all: the
	// rule before issue 27, by which heartbeats forged a day ahead drag
	// the clock a day ahead, and slots and idempotency keys
	// expire a day early.
	ClockFollowsPeers bool
	// EstimateUnbounded: a unique count's estimate is not kept finite: a
	// sketch estimated at crdt.HLLMaxEstimate, the clamp, reads +Inf, as
	// a sketch of saturated pages did before issue 27, and its read
	// cannot be answered.
	EstimateUnbounded bool
	// AckUnheld: a write of a key on a shard this replica does not hold
	// (Config.Holds) is acknowledged as applied, and neither stored nor
	// refused: with httpapi's Config.ChaosAckUnheld, which serves such a
	// write here instead of forwarding it to a holder, a sharded region
	// loses acknowledged writes sent to the wrong replica.
	AckUnheld bool
	// SplitTwoParts: an unlike of an item split into parts (node's hot
	// blocks) goes to another part than the user's likes of it, so it
	// finds no like to undo and the like stays counted: with httpapi's
	// Config.ChaosSplitTwoParts, which routes it so.
	SplitTwoParts bool
	// DropUnsynced: a replica joining shards says it synced them at once,
	// without pulling them, and one that leaves shards drops all their
	// data, its own entries included, as soon as it stops serving them,
	// without its entries being at the new holders (node's shard moves;
	// DropShards): a move then loses what the leaving replica wrote,
	// whose entries are taken only from itself.
	DropUnsynced bool
	// ToggleTwice: a toggle does not look for its idempotency key in the
	// record, so a retried toggle flips the state again.
	ToggleTwice bool
	// MergeIgnoresAt: a like record merged from a peer is ordered by its
	// HLC alone, as before issue 34, while the writer decides by the
	// client's time: a like stamped older than an unlike but written
	// later, in a region that had not heard of the unlike, wins wherever
	// it is merged.
	MergeIgnoresAt bool
	// CashbackNoFloor: a cashback takes its amount from the merchant's
	// balance whatever this replica holds of it, as before issue 34, so
	// the merchant's balance goes below zero.
	CashbackNoFloor bool
	// ForwardAckUnapplied: a holder answers a write another replica of
	// its region forwarded to it as served (200, or a RESP integer)
	// without applying it (node's routing): the entry replica then
	// acknowledges a write nobody stored.
	ForwardAckUnapplied bool
	// FencesLose: a keyed record or spend merged from a peer is ordered
	// by its HLC and origin alone, a fence no different from an
	// application of nothing: a purchase called off in one region and
	// paid later in another (before the two heard of each other) ends
	// paid, or each region keeps its own end, instead of called off
	// everywhere. Its control is a scenario, not a chaos run, whose
	// workload would meet it only by luck: internal/chaos's
	// TestCashbackCalledOffInOneRegionPaidInAnotherFencesLose.
	FencesLose bool
}

// ChaosDropUnsynced reports whether the bug DropUnsynced is on (for node,
// which runs the moves).
func (c Chaos) ChaosDropUnsynced() bool { return buildtags.Chaos && c.DropUnsynced }

// chaosAckWindow is how long AckBeforeCommit holds acknowledged writes
// uncommitted. It is wide so that the chaos suite's kill, aimed at the
// moment a client sees an acknowledgement, lands inside it even on a
// machine busy enough to delay that kill by tens of milliseconds.
const chaosAckWindow = 250 * time.Millisecond

// ChaosFromEnv reads EnvChaosBug through getenv (os.Getenv in tallyd). In a
// build without the chaos tag it returns the zero Chaos: the variable means
// nothing there. A value that names another package's bug is not an error.
func ChaosFromEnv(getenv func(string) string) Chaos {
	if !buildtags.Chaos {
		return Chaos{}
	}
	bug := getenv(EnvChaosBug)
	return Chaos{AckBeforeCommit: bug == BugAckBeforeCommit, NoReconcile: bug == BugNoReconcile,
		ClockFollowsWall: bug == BugClockFollowsWall, ListsLocalOnly: bug == BugListsLocalOnly,
		KeysNotReconciled: bug == BugKeysNotReconciled, LogSkipsIncrements: bug == BugLogSkipsIncrements,
		SlotsAtArrival: bug == BugSlotsAtArrival, SketchStoredOnly: bug == BugSketchStoredOnly,
		SpendWithoutRights: bug == BugSpendWithoutRights, BlockNotReconciled: bug == BugBlockNotReconciled,
		ApproxCoinTwice: bug == BugApproxCoinTwice, GiveWhatIsAsked: bug == BugGiveWhatIsAsked,
		ClockFollowsPeers: bug == BugClockFollowsPeers, EstimateUnbounded: bug == BugEstimateUnbounded,
		AckUnheld: bug == BugAckUnheld, SplitTwoParts: bug == BugSplitTwoParts, DropUnsynced: bug == BugDropUnsynced,
		ToggleTwice: bug == BugToggleTwice, MergeIgnoresAt: bug == BugMergeIgnoresAt, CashbackNoFloor: bug == BugCashbackNoFloor,
		ForwardAckUnapplied: bug == BugForwardAckUnapplied, FencesLose: bug == BugFencesLose}
}

// String names the bugs that are on, for logs.
func (c Chaos) String() string {
	return fmt.Sprintf("ack-before-commit=%t no-reconcile=%t clock-follows-wall=%t lists-local-only=%t keys-not-reconciled=%t log-skips-increments=%t buckets-at-arrival=%t sketch-merge-stored-only=%t spend-without-rights=%t block-not-reconciled=%t approx-coin-twice=%t give-what-is-asked=%t clock-follows-peers=%t estimate-unbounded=%t ack-unheld-writes=%t split-user-two-parts=%t delete-before-sync=%t toggle-applies-twice=%t merge-ignores-client-time=%t cashback-no-floor=%t forwarded-ack-unapplied=%t fences-lose=%t",
		c.AckBeforeCommit, c.NoReconcile, c.ClockFollowsWall, c.ListsLocalOnly, c.KeysNotReconciled, c.LogSkipsIncrements, c.SlotsAtArrival, c.SketchStoredOnly, c.SpendWithoutRights, c.BlockNotReconciled, c.ApproxCoinTwice,
		c.GiveWhatIsAsked, c.ClockFollowsPeers, c.EstimateUnbounded, c.AckUnheld, c.SplitTwoParts, c.DropUnsynced, c.ToggleTwice, c.MergeIgnoresAt, c.CashbackNoFloor, c.ForwardAckUnapplied, c.FencesLose)
}

// chaosAckBeforeCommit acknowledges the batch before its commit if the bug
// AckBeforeCommit is on and the batch holds local operations. It reports
// whether it did, in which case the caller must not acknowledge again.
func (r *Replica) chaosAckBeforeCommit(batch []*request) bool {
	if !buildtags.Chaos || !r.cfg.Chaos.AckBeforeCommit {
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

// reconcile runs the winner's reconciliation after a merge, unless the bug
// NoReconcile (or, for keyed records, KeysNotReconciled) is on.
// chaosSpendWithoutRights reports whether the bug SpendWithoutRights is on.
func (r *Replica) chaosSpendWithoutRights() bool {
	return buildtags.Chaos && r.cfg.Chaos.SpendWithoutRights
}

// chaosCashbackNoFloor reports whether the bug CashbackNoFloor is on.
func (r *Replica) chaosCashbackNoFloor() bool {
	return buildtags.Chaos && r.cfg.Chaos.CashbackNoFloor
}

// refundLoser is crdt.Spend.RefundLoser, unless the chaos build's
// KeysNotReconciled bug is on.
func (r *Replica) refundLoser(rec *crdt.Spend) int64 {
	if buildtags.Chaos && r.cfg.Chaos.KeysNotReconciled {
		return 0
	}
	return rec.RefundLoser(r.self)
}

// takeBackLoser is refundLoser for a keyed grant.
func (r *Replica) takeBackLoser(rec *crdt.Spend, rights int64) int64 {
	if buildtags.Chaos && r.cfg.Chaos.KeysNotReconciled {
		return 0
	}
	return rec.TakeBackLoser(r.self, rights)
}

// (blocked: the record's user is blocked in this replica's view.)
func (r *Replica) reconcileLike(rec *crdt.LikeRecord, blocked bool) int64 {
	if buildtags.Chaos && r.cfg.Chaos.NoReconcile {
		return 0
	}
	return rec.ReconcileBlocked(r.self, blocked)
}

// reconcileKeyed is reconcileLike for a counter's keyed record, which the
// bug KeysNotReconciled also stops.
func (r *Replica) reconcileKeyed(rec *crdt.KeyedRecord) int64 {
	if buildtags.Chaos && (r.cfg.Chaos.NoReconcile || r.cfg.Chaos.KeysNotReconciled) {
		return 0
	}
	return rec.Reconcile(r.self)
}

// chaosBlockNotReconciled reports whether the bug BlockNotReconciled is on.
func (r *Replica) chaosBlockNotReconciled() bool {
	return buildtags.Chaos && r.cfg.Chaos.BlockNotReconciled
}

// chaosClockFollowsWall reports whether the bug ClockFollowsWall is on.
func (r *Replica) chaosClockFollowsWall() bool {
	return buildtags.Chaos && r.cfg.Chaos.ClockFollowsWall
}

// chaosListsSkip reports whether the like index must skip a record's
// change: the bug ListsLocalOnly is on and the change came from a merge.
func (r *Replica) chaosListsSkip(rs *recState) bool {
	return buildtags.Chaos && r.cfg.Chaos.ListsLocalOnly && !rs.spread
}

// chaosLogSkipsIncrements reports whether the bug LogSkipsIncrements is on.
func (r *Replica) chaosLogSkipsIncrements() bool {
	return buildtags.Chaos && r.cfg.Chaos.LogSkipsIncrements
}

// chaosApproxWritten is what a keyed increment by `by` of an approximate
// counter at cur writes, having counted `counted`: that, unless the bug
// ApproxCoinTwice is on, when a second coin decides.
func (t *txn) chaosApproxWritten(relErr float64, cur crdt.Vector, by, counted int64) int64 {
	if !buildtags.Chaos || !t.r.cfg.Chaos.ApproxCoinTwice || relErr == 0 {
		return counted
	}
	return t.approxIncr(relErr, cur, by)
}

// chaosBookingTime is the time a change of an own entry of family kind is
// booked at: atMs, unless the bug SlotsAtArrival is on and kind is
// Counters, when it is the writer's clock.
func (t *txn) chaosBookingTime(kind storage.Kind, atMs int64) int64 {
	if buildtags.Chaos && t.r.cfg.Chaos.SlotsAtArrival && kind == storage.Counters {
		return t.nowMs
	}
	return atMs
}

// chaosSkipSketchMerge reports whether the merge of a peer's page into ps
// must be skipped: the bug SketchStoredOnly is on and this replica stores
// no copy of the page.
func (t *txn) chaosSkipSketchMerge(ps *pageState) bool {
	return buildtags.Chaos && t.r.cfg.Chaos.SketchStoredOnly && ps.orig.IsZero() && ps.cur.IsZero()
}

// chaosGive is what give hands a peer that asked for want: crdt.Give's
// amount, unless the bug GiveWhatIsAsked is on, when it is the rule before
// issue 27: at least want, or half of holds if that is more, up to holds.
func (t *txn) chaosGive(holds, keep, want, has int64) int64 {
	if !buildtags.Chaos || !t.r.cfg.Chaos.GiveWhatIsAsked {
		return crdt.Give(holds, keep, want, has)
	}
	if holds <= 0 || want <= 0 {
		return 0
	}
	return min(max(want, (holds+1)/2), holds)
}

// chaosAdjustClock moves the clock by the peers' whole median offset, with
// no bound, and reports true, if the bug ClockFollowsPeers is on; else it
// does nothing and reports false.
func (r *Replica) chaosAdjustClock(medianMs int64) (int64, bool) {
	if !buildtags.Chaos || !r.cfg.Chaos.ClockFollowsPeers {
		return 0, false
	}
	return r.pclock.adjustUnbounded(medianMs), true
}

// adjustUnbounded is Adjust before issue 27 (the ClockFollowsPeers bug):
// the whole median offset past maxPeerSkew, every time.
func (c *physClock) adjustUnbounded(medianMs int64) int64 {
	if medianMs <= maxPeerSkew.Milliseconds() && medianMs >= -maxPeerSkew.Milliseconds() {
		return 0
	}
	c.mu.Lock()
	c.peerMs += medianMs
	corr := c.stepMs + c.peerMs
	c.mu.Unlock()
	c.log.Warn("this replica's clock disagrees with its peers'; following them (chaos bug clock-follows-peers: unbounded)",
		"offset", time.Duration(medianMs)*time.Millisecond, "correction", time.Duration(corr)*time.Millisecond)
	return medianMs
}

// chaosEstimate is a unique read's estimate e as answered: e, unless the
// bug EstimateUnbounded is on and e is the clamp crdt.HLLMaxEstimate, when
// it is +Inf, what a saturated sketch estimated before the clamp.
func (r *Replica) chaosEstimate(e float64) float64 {
	if buildtags.Chaos && r.cfg.Chaos.EstimateUnbounded && e >= crdt.HLLMaxEstimate {
		return math.Inf(1)
	}
	return e
}

// chaosDropOwn reports whether DropShards drops this replica's own
// entries too: the bug DropUnsynced.
func (r *Replica) chaosDropOwn() bool {
	return buildtags.Chaos && r.cfg.Chaos.DropUnsynced
}

// chaosAckUnheld reports whether a batch refused by checkHeld is to be
// acknowledged as applied, unstored, instead: the bug AckUnheld.
func (r *Replica) chaosAckUnheld() bool {
	return buildtags.Chaos && r.cfg.Chaos.AckUnheld
}

// chaosToggleTwice reports whether the bug ToggleTwice is on.
func (r *Replica) chaosToggleTwice() bool {
	return buildtags.Chaos && r.cfg.Chaos.ToggleTwice
}

// chaosMergeByStamp merges a peer's like record into k's by HLC and origin
// alone, ignoring client times, and reports true, if the bug
// MergeIgnoresAt is on; else it does nothing and reports false.
func (t *txn) chaosMergeByStamp(k rkey, in *crdt.LikeRecord) (bool, error) {
	if !buildtags.Chaos || !t.r.cfg.Chaos.MergeIgnoresAt {
		return false, nil
	}
	rs, err := t.record(k)
	if err != nil {
		return true, err
	}
	rec := rs.like()
	byStamp := in.HLC > rec.HLC || in.HLC == rec.HLC && in.Origin > rec.Origin
	switch {
	case byStamp && !in.Wins(rec):
		rec.Liked, rec.HLC, rec.Origin, rec.At, rec.Idem = in.Liked, in.HLC, in.Origin, in.At, in.Idem
		rs.dirty = true
	case !byStamp && in.Wins(rec):
		in = &crdt.LikeRecord{Contrib: in.Contrib} // the register loses
	}
	if err := mergeInto(t, k, in, (*recState).like); err != nil {
		return true, err
	}
	return true, t.reconcileRecord(k, rs)
}

// chaosMergeFenceByStamp merges a peer's keyed record or spend into k's
// by HLC and origin alone, a fence no different from an application, and
// reports true, if the bug FencesLose is on; else it does nothing and
// reports false.
func (t *txn) chaosMergeFenceByStamp(k rkey, in crdt.Record) (bool, error) {
	if !buildtags.Chaos || !t.r.cfg.Chaos.FencesLose {
		return false, nil
	}
	rs, err := t.record(k)
	if err != nil {
		return true, err
	}
	var rec, reg *crdt.KeyedRecord
	switch v := in.(type) {
	case *crdt.KeyedRecord:
		rec, reg = rs.keyed(), v
	case *crdt.Spend:
		rec, reg = (*crdt.KeyedRecord)(rs.spend()), (*crdt.KeyedRecord)(v)
	default:
		return false, nil
	}
	byStamp := reg.HLC > rec.HLC || reg.HLC == rec.HLC && reg.Origin > rec.Origin
	switch {
	case byStamp && !reg.Wins(rec):
		rec.HLC, rec.Origin, rec.Amount, rec.Asked, rec.At, rec.Fenced = reg.HLC, reg.Origin, reg.Amount, reg.Asked, reg.At, reg.Fenced
		rs.dirty = true
	case !byStamp && reg.Wins(rec):
		reg = &crdt.KeyedRecord{Contrib: reg.Contrib} // the register loses
	}
	if _, ok := in.(*crdt.Spend); ok {
		err = mergeInto(t, k, (*crdt.Spend)(reg), (*recState).spend)
	} else {
		err = mergeInto(t, k, reg, (*recState).keyed)
	}
	if err != nil {
		return true, err
	}
	return true, t.reconcileRecord(k, rs)
}

package region

import (
	"math"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/failpoint"
	"github.com/tally-dev/tally/storage"
)

// The deliberate bugs of the chaos suite's negative controls that live in
// the replica, each behind its failpoint (package failpoint's table says
// what each does): Config.Failpoints arms them. Every helper here asks
// failpoint.Set.On, a constant false outside a chaos build, so there the
// compiler removes the bug and the helper is the correct code alone.

// on reports whether the failpoint n is armed for this replica.
func (r *Replica) on(n failpoint.Name) bool { return r.cfg.Failpoints.On(n) }

// chaosAckWindow is how long AckBeforeCommit holds acknowledged writes
// uncommitted. It is wide so that the chaos suite's kill, aimed at the
// moment a client sees an acknowledgement, lands inside it even on a
// machine busy enough to delay that kill by tens of milliseconds.
const chaosAckWindow = 250 * time.Millisecond

// chaosAckBeforeCommit acknowledges the batch before its commit if the bug
// AckBeforeCommit is on and the batch holds local operations. It reports
// whether it did, in which case the caller must not acknowledge again.
func (r *Replica) chaosAckBeforeCommit(batch []*request) bool {
	if !r.on(failpoint.AckBeforeCommit) {
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

// chaosSpendWithoutRights reports whether the bug SpendWithoutRights is on.
func (r *Replica) chaosSpendWithoutRights() bool {
	return r.on(failpoint.SpendWithoutRights)
}

// chaosCashbackNoFloor reports whether the bug CashbackNoFloor is on.
func (r *Replica) chaosCashbackNoFloor() bool {
	return r.on(failpoint.CashbackNoFloor)
}

// refundLoser is crdt.Spend.RefundLoser, unless the chaos build's
// KeysNotReconciled bug is on.
func (r *Replica) refundLoser(rec *crdt.Spend) int64 {
	if r.on(failpoint.KeysNotReconciled) {
		return 0
	}
	return rec.RefundLoser(r.self)
}

// takeBackLoser is refundLoser for a keyed grant.
func (r *Replica) takeBackLoser(rec *crdt.Spend, rights int64) int64 {
	if r.on(failpoint.KeysNotReconciled) {
		return 0
	}
	return rec.TakeBackLoser(r.self, rights)
}

// reconcileLike runs the winner's reconciliation of a like record after a
// merge, unless the bug NoReconcile is on. (blocked: the record's user is
// blocked in this replica's view.)
func (r *Replica) reconcileLike(rec *crdt.LikeRecord, blocked bool) int64 {
	if r.on(failpoint.NoReconcile) {
		return 0
	}
	return rec.ReconcileBlocked(r.self, blocked)
}

// reconcileKeyed is reconcileLike for a counter's keyed record, which the
// bug KeysNotReconciled also stops.
func (r *Replica) reconcileKeyed(rec *crdt.KeyedRecord) int64 {
	if r.on(failpoint.NoReconcile) || r.on(failpoint.KeysNotReconciled) {
		return 0
	}
	return rec.Reconcile(r.self)
}

// chaosBlockNotReconciled reports whether the bug BlockNotReconciled is on.
func (r *Replica) chaosBlockNotReconciled() bool {
	return r.on(failpoint.BlockNotReconciled)
}

// chaosClockFollowsWall reports whether the bug ClockFollowsWall is on.
func (r *Replica) chaosClockFollowsWall() bool {
	return r.on(failpoint.ClockFollowsWall)
}

// chaosListsSkip reports whether the like index must skip a record's
// change: the bug ListsLocalOnly is on and the change came from a merge.
func (r *Replica) chaosListsSkip(rs *recState) bool {
	return r.on(failpoint.ListsLocalOnly) && !rs.spread
}

// chaosLogSkipsIncrements reports whether the bug LogSkipsIncrements is on.
func (r *Replica) chaosLogSkipsIncrements() bool {
	return r.on(failpoint.LogSkipsIncrements)
}

// chaosApproxWritten is what a keyed increment by `by` of an approximate
// counter at cur writes, having counted `counted`: that, unless the bug
// ApproxCoinTwice is on, when a second coin decides.
func (t *txn) chaosApproxWritten(relErr float64, cur crdt.Vector, by, counted int64) int64 {
	if !t.r.on(failpoint.ApproxCoinTwice) || relErr == 0 {
		return counted
	}
	return t.approxIncr(relErr, cur, by)
}

// chaosBookingTime is the time a change of an own entry of family kind is
// booked at: atMs, unless the bug SlotsAtArrival is on and kind is
// Counters, when it is the writer's clock.
func (t *txn) chaosBookingTime(kind storage.Kind, atMs int64) int64 {
	if t.r.on(failpoint.SlotsAtArrival) && kind == storage.Counters {
		return t.nowMs
	}
	return atMs
}

// chaosSkipSketchMerge reports whether the merge of a peer's page into ps
// must be skipped: the bug SketchStoredOnly is on and this replica stores
// no copy of the page.
func (t *txn) chaosSkipSketchMerge(ps *pageState) bool {
	return t.r.on(failpoint.SketchStoredOnly) && ps.orig.IsZero() && ps.cur.IsZero()
}

// chaosGive is what give hands a peer that asked for want: crdt.Give's
// amount, unless the bug GiveWhatIsAsked is on, when it is the rule before
// issue 27: at least want, or half of holds if that is more, up to holds.
func (t *txn) chaosGive(holds, keep, want, has int64) int64 {
	if !t.r.on(failpoint.GiveWhatIsAsked) {
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
	if !r.on(failpoint.ClockFollowsPeers) {
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
	if r.on(failpoint.EstimateUnbounded) && e >= crdt.HLLMaxEstimate {
		return math.Inf(1)
	}
	return e
}

// chaosDropOwn reports whether DropShards drops this replica's own
// entries too: the bug DropUnsynced.
func (r *Replica) chaosDropOwn() bool {
	return r.on(failpoint.DropUnsynced)
}

// chaosAckUnheld reports whether a batch refused by checkHeld is to be
// acknowledged as applied, unstored, instead: the bug AckUnheld.
func (r *Replica) chaosAckUnheld() bool {
	return r.on(failpoint.AckUnheld)
}

// chaosToggleTwice reports whether the bug ToggleTwice is on.
func (r *Replica) chaosToggleTwice() bool {
	return r.on(failpoint.ToggleTwice)
}

// chaosMergeByStamp merges a peer's like record into k's by HLC and origin
// alone, ignoring client times, and reports true, if the bug
// MergeIgnoresAt is on; else it does nothing and reports false.
func (t *txn) chaosMergeByStamp(k rkey, in *crdt.LikeRecord) (bool, error) {
	if !t.r.on(failpoint.MergeIgnoresAt) {
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
	if !t.r.on(failpoint.FencesLose) {
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

package region

import (
	"context"
	"errors"
	"fmt"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Budgets: bounded counters (crdt.Budget) that are never overspent.
//
// Every spend is checked against this replica's own rights in the writer's
// overlay, so the check and the spend are one step of one group commit:
// concurrent spends at one replica cannot both use the last right. A spend
// never waits on another region. One that this replica cannot cover is
// refused at once, ErrBudgetExhausted if the budget as seen here has less
// left, ErrRightsElsewhere if it has more but others hold the rights; the
// latter also asks the peers for rights (Changes.Asks, which replication
// sends in the next delta). A peer that holds rights answers with a
// transfer (GiveRights), an ordinary change of its own entries that comes
// back by the fast path, so a retry a few milliseconds later is covered.

var (
	// ErrBudgetExhausted: the budget as this replica sees it has less left
	// than the spend asks for.
	ErrBudgetExhausted = fmt.Errorf("region: %w", crdt.ErrBudgetExhausted)
	// ErrRightsElsewhere: the budget has enough left, but other replicas
	// hold the rights to it; this one asked them for some.
	ErrRightsElsewhere = fmt.Errorf("region: %w", crdt.ErrRightsElsewhere)
)

// budgetTxn is the batch's overlay of budgets.
type budgetTxn struct {
	noHooks
	// budgets the batch touches, and the asks for rights it sends.
	budgets map[string]*budgetState
	asks    []RightsAsk
	// forward: budgets whose rights may have grown in this batch, moved on
	// at commit while a handoff is on (handoff.go).
	forward map[string]struct{}
	// spendEv: where each budget's unkeyed spends fold in the log.
	spendEv map[string]int
}

// settle moves the rights a handoff forwards (handoff.go) and folds the
// batch's spends into the replica's recent demand.
func (*budgetTxn) settle(t *txn) error {
	t.forwardRights()
	t.noteSpent()
	return nil
}

// write hands the asks for rights to replication.
func (bt *budgetTxn) write(_ *txn, ch *Changes) error {
	ch.Asks = bt.asks
	return nil
}

// askInterval is how often a replica asks its peers for one budget's
// rights at most: a burst of refused spends sends one ask, not one each.
const askIntervalMs = 20

// giveIntervalMs: a replica answers one peer's asks for one budget's
// rights at most this often. An ask takes at most half of what the
// replica can spare (crdt.Give), so asks, however many and however large,
// take a spare away by halves, one halving per interval per asker.
const giveIntervalMs = 100

// spendWindowMs is the window of a replica's own recent demand for a
// budget: what it spent in the current and the previous window (1 to 2
// seconds of spends) it keeps when it gives rights away.
const spendWindowMs = 1000

// recentSpends is what this replica spent of one budget in the current
// spend window (cur, window number slot) and the one before (prev).
type recentSpends struct {
	slot      int64
	cur, prev int64
}

// at is the spends of the last one to two windows at nowMs.
func (w recentSpends) at(nowMs int64) int64 {
	switch s := nowMs / spendWindowMs; {
	case s <= w.slot:
		return w.cur + w.prev
	case s == w.slot+1:
		return w.cur
	}
	return 0
}

// add counts n spent at nowMs.
func (w *recentSpends) add(nowMs, n int64) {
	switch s := nowMs / spendWindowMs; {
	case s == w.slot+1:
		w.slot, w.prev, w.cur = s, w.cur, 0
	case s > w.slot+1:
		w.slot, w.prev, w.cur = s, 0, 0
	}
	w.cur += n
}

// noteSpent folds a commit's spends of each budget into the replica's
// recent demand (writer only).
func (t *txn) noteSpent() {
	for key, bs := range t.budgets {
		if bs.spent == 0 {
			continue
		}
		if len(t.r.spends) >= 1<<14 {
			for k, w := range t.r.spends { // forget budgets not spent lately
				if w.at(t.nowMs) == 0 {
					delete(t.r.spends, k)
				}
			}
		}
		w := t.r.spends[key]
		w.add(t.nowMs, bs.spent)
		t.r.spends[key] = w
	}
}

// lowRightsSpends: after a spend, a replica left with rights for fewer
// than this many more spends of that size asks for more before it runs
// out.
const lowRightsSpends = 4

// RightsAsk is a replica's request for rights to one budget.
type RightsAsk struct {
	Key  string
	Want int64
}

// RightsGive is a peer's request, received by replication: give replica
// To some of this replica's rights to Key.
type RightsGive struct {
	Key  string
	To   string
	Want int64
}

// budgetState is the overlay of one budget: its main vector and the inbox
// vectors the batch touches.
type budgetState struct {
	key   string
	main  *vecState
	inbox map[string]*vecState
	// views is view's map, reused: a batch of spends of one budget reads
	// the view once per spend.
	views map[string]crdt.Vector
	// spent is what this commit spent of the budget (noteSpent).
	spent int64
}

// budget returns a budget's overlay with its main vector and this
// replica's own inbox loaded.
func (t *txn) budget(key string) (*budgetState, error) {
	if bs, ok := t.budgets[key]; ok {
		return bs, nil
	}
	main, err := t.vector(storage.Budgets, key)
	if err != nil {
		return nil, err
	}
	bs := &budgetState{key: key, main: main, inbox: make(map[string]*vecState, 4)}
	// Every stored inbox, so that what the budget has available, and so
	// whether a refusal is exhausted or rights_elsewhere, is judged on the
	// whole view: one range scan per budget per commit. (An inbox this
	// batch's merges create is missed until the next commit; that can
	// only misname a refusal. This replica's own rights need only its own
	// inbox, which is always loaded.)
	stored, err := t.r.store.BudgetInboxes(key)
	if err != nil {
		return nil, err
	}
	for to := range stored {
		if _, err := t.inbox(bs, to); err != nil {
			return nil, err
		}
	}
	if _, err := t.inbox(bs, t.r.self); err != nil {
		return nil, err
	}
	if t.budgets == nil {
		t.budgets = make(map[string]*budgetState)
	}
	t.budgets[key] = bs
	return bs, nil
}

func (t *txn) inbox(bs *budgetState, to string) (*vecState, error) {
	if vs, ok := bs.inbox[to]; ok {
		return vs, nil
	}
	vs, err := t.vector(storage.Budgets, crdt.BudgetInboxName(bs.key, to))
	if err != nil {
		return nil, err
	}
	bs.inbox[to] = vs
	return vs, nil
}

// view is the budget as crdt.Budget over the overlay's current vectors;
// put writes a changed view back.
//
// The view's Inbox map is the budget state's own, refilled by every call:
// a view is good until the next view of the same budget, and changes to
// it reach the state only through put.
func (bs *budgetState) view() crdt.Budget {
	if bs.views == nil {
		bs.views = make(map[string]crdt.Vector, len(bs.inbox))
	}
	clear(bs.views)
	for to, vs := range bs.inbox {
		bs.views[to] = vs.cur
	}
	return crdt.Budget{Main: bs.main.cur, Inbox: bs.views}
}

func (bs *budgetState) put(b crdt.Budget) {
	bs.main.cur = b.Main
	for to, vs := range bs.inbox {
		vs.cur = b.Inbox[to]
	}
}

// refuse turns a crdt budget error into the replica's, and asks for
// rights when they are elsewhere.
func (t *txn) refuse(key string, b *crdt.Budget, by int64, err error) Result {
	res := Result{Value: b.Available(), Rights: b.Rights(t.r.self)}
	switch {
	case errors.Is(err, crdt.ErrRightsElsewhere):
		t.r.metrics.budgetRefused.WithLabelValues("rights_elsewhere").Inc()
		t.ask(key, by)
		res.Err = ErrRightsElsewhere
	case errors.Is(err, crdt.ErrBudgetExhausted):
		t.r.metrics.budgetRefused.WithLabelValues("exhausted").Inc()
		res.Err = ErrBudgetExhausted
	default:
		res.Err = err
	}
	return res
}

// ask queues a request for rights to key for this commit's Changes, at
// most once per askIntervalMs per key.
func (t *txn) ask(key string, want int64) {
	if t.r.cfg.OnCommit == nil || t.r.handoff.Load() != nil {
		return // nobody to ask, or handing rights off
	}
	if last, ok := t.r.asked[key]; ok && t.nowMs-last < askIntervalMs && t.nowMs >= last {
		return
	}
	if len(t.r.asked) >= 1<<14 {
		for k, at := range t.r.asked { // forget asks older than the interval
			if t.nowMs-at >= askIntervalMs || at > t.nowMs {
				delete(t.r.asked, k)
			}
		}
	}
	t.r.asked[key] = t.nowMs
	t.asks = append(t.asks, RightsAsk{Key: key, Want: want})
	t.r.metrics.budgetAsks.Inc()
}

// afterSpend asks for more rights when this replica is running low while
// the budget has more elsewhere.
func (t *txn) afterSpend(key string, b *crdt.Budget, by int64) {
	if rights := b.Rights(t.r.self); rights < lowRightsSpends*by && b.Available() > rights {
		t.ask(key, lowRightsSpends*by)
	}
}

// applyGrant raises the budget by op.By, at most once per IdemKey if set:
// the key's record is a Spend of +By, so a retry here, or at a replica
// that has heard of the grant, is a duplicate. Replicas that applied the
// key before hearing of each other all grant at first; every one but the
// record's winner then takes its grant back as far as its rights allow
// (reconcileBudgetKey).
func (t *txn) applyGrant(op *Op) Result {
	bs, err := t.budget(op.Item)
	if err != nil {
		return Result{Err: err}
	}
	var rs *recState
	if op.IdemKey != "" {
		if rs, err = t.record(spendKey(op.Item, op.IdemKey)); err != nil {
			return Result{Err: err}
		}
		if res, done := t.keyedDuplicate(rs.spend(), op.IdemKey, op.By, 1); done {
			b := bs.view()
			res.Value, res.Rights = b.Available(), b.Rights(t.r.self)
			return res
		}
	}
	if err := t.checkEntry(bs.main.cur.Get(t.r.self), op.By); err != nil {
		return Result{Err: err}
	}
	b := bs.view()
	b.Grant(t.r.self, op.By)
	bs.put(b)
	t.logBudget(storage.EventGrant, op.Item, "", op.IdemKey, op.By)
	if rs != nil {
		t.applyKeyedRecord(rs, op.By, op.At)
	}
	t.forwardLater(op.Item)
	rights := b.Rights(t.r.self)
	if t.r.handoffTo() != "" && t.r.accepting.Load() {
		rights = 0 // the commit moves them on (forwardRights)
	}
	return Result{Value: b.Available(), Rights: rights}
}

func (t *txn) applySpend(op *Op) Result {
	bs, err := t.budget(op.Item)
	if err != nil {
		return Result{Err: err}
	}
	var rs *recState
	if op.IdemKey != "" {
		if rs, err = t.record(spendKey(op.Item, op.IdemKey)); err != nil {
			return Result{Err: err}
		}
		if res, done := t.keyedDuplicate(rs.spend(), op.IdemKey, -op.By, -1); done {
			b := bs.view()
			res.Value, res.Rights = b.Available(), b.Rights(t.r.self)
			return res
		}
	}
	if err := t.checkEntry(bs.main.cur.Get(t.r.self), -op.By); err != nil {
		return Result{Err: err}
	}
	b := bs.view()
	if err := t.spend(&b, op.By); err != nil {
		return t.refuse(op.Item, &b, op.By, err)
	}
	bs.put(b)
	bs.spent += op.By
	t.logBudget(storage.EventSpend, op.Item, "", op.IdemKey, op.By)
	if rs != nil {
		t.applyKeyedRecord(rs, -op.By, op.At)
	}
	t.afterSpend(op.Item, &b, op.By)
	t.r.metrics.budgetSpent.Add(float64(op.By))
	return Result{Value: b.Available(), Rights: b.Rights(t.r.self)}
}

// spend is crdt.Budget.Spend, or the chaos build's deliberate bug.
func (t *txn) spend(b *crdt.Budget, by int64) error {
	if err := t.spendable(b, by); err != nil {
		return err
	}
	b.Main = b.Main.Add(t.r.self, -by)
	return nil
}

// spendable is crdt.Budget.Check: nil if this replica holds the rights to
// spend by, or the chaos build's deliberate bug SpendWithoutRights.
func (t *txn) spendable(b *crdt.Budget, by int64) error {
	if t.r.chaosSpendWithoutRights() && b.Remaining() >= by {
		return nil
	}
	return b.Check(t.r.self, by)
}

// merchantSpendable is spendable for a cashback's merchant, or nil
// whatever the merchant holds with the chaos build's bug CashbackNoFloor.
func (t *txn) merchantSpendable(b *crdt.Budget, by int64) error {
	if t.r.chaosCashbackNoFloor() {
		return nil
	}
	return t.spendable(b, by)
}

// keyedDuplicate answers a keyed operation whose key was applied already
// (here or at a replica this one has heard from): a duplicate, or
// ErrIdempotencyMismatch if it was applied with another amount. done is
// false if the key is new.
//
// sign is how the client wrote the amount: 1 for an increment, −1 for a
// spend (stored as a decrement, asked for as a positive by).
func (t *txn) keyedDuplicate(rec application, idem string, amount, sign int64) (Result, bool) {
	if rec.Empty() {
		return Result{}, false
	}
	if rec.IsFenced() {
		return Result{Err: fmt.Errorf("%w: key %q", ErrFenced, idem)}, true
	}
	if rec.Applied() && rec.Requested() != amount {
		return Result{Err: fmt.Errorf("%w: key %q was applied with by=%d, this request has by=%d",
			ErrIdempotencyMismatch, idem, sign*rec.Requested(), sign*amount)}, true
	}
	return Result{Duplicate: true}, true
}

// application is what keyedDuplicate reads of a keyed record or spend.
type application interface {
	Empty() bool
	Applied() bool
	IsFenced() bool
	Requested() int64
}

// reconcileBudgetKey runs a loser's duty on a budget's keyed record: a
// spend's loser refunds its spend (RefundLoser); a grant's loser takes its
// grant back as far as its rights to the budget allow (TakeBackLoser), so
// no reconciliation spends rights this replica does not hold. It returns
// the change to this replica's entry of the budget's main vector.
func (t *txn) reconcileBudgetKey(budget string, rec *crdt.Spend) (int64, error) {
	if own := rec.Contrib.Get(t.r.self); own.P <= own.N {
		return t.r.refundLoser(rec), nil
	}
	bs, err := t.budget(budget)
	if err != nil {
		return 0, err
	}
	b := bs.view()
	return t.r.takeBackLoser(rec, b.Rights(t.r.self)), nil
}

// applyKeyedRecord writes a new application of a budget spend's or
// cashback's idempotency key into its record, a spend or a balance's keyed
// record (the vectors are the caller's). A spend's winner keeps the
// application; any other replica that applied the key concurrently
// refunds its own (reconcileRecord).
func (t *txn) applyKeyedRecord(rs *recState, amount, at int64) {
	hlc := t.stampAfter(rs)
	switch rec := rs.rec.(type) {
	case *crdt.Spend:
		rec.Apply(t.r.self, amount, hlc)
		rec.At = at
	case *crdt.KeyedRecord:
		rec.ApplyCounted(t.r.self, amount, amount, hlc)
		rec.At = at
	}
	rs.dirty, rs.spread, rs.deleted = true, true, false
}

// applyCashback is one purchase's cashback: spend By from budget Item
// (the pool), spend By from budget Merchant (the merchant's balance) and
// add it to counter User, under one idempotency key, all in this commit or
// none of it. Both spends are checked against this replica's rights before
// anything changes, so the merchant's balance is never overdrawn, in any
// view, however the regions are cut: the merchant's remaining plus the
// users' credits stays what was granted to the merchant.
func (t *txn) applyCashback(op *Op) Result {
	bs, err := t.budget(op.Item)
	if err != nil {
		return Result{Err: err}
	}
	ms, err := t.budget(op.Merchant)
	if err != nil {
		return Result{Err: err}
	}
	brs, err := t.record(spendKey(op.Item, op.IdemKey))
	if err != nil {
		return Result{Err: err}
	}
	mrs, err := t.record(spendKey(op.Merchant, op.IdemKey))
	if err != nil {
		return Result{Err: err}
	}
	urs, err := t.record(keyedKey(op.User, op.IdemKey))
	if err != nil {
		return Result{Err: err}
	}
	uvs, err := t.vector(storage.Counters, op.User)
	if err != nil {
		return Result{Err: err}
	}
	result := func(res Result) Result {
		b, m := bs.view(), ms.view()
		if res.Refused != op.Merchant {
			res.Value, res.Rights = b.Available(), b.Rights(t.r.self)
		}
		res.Merchant, res.UserValue = m.Available(), uvs.cur.Value()
		return res
	}
	// The pool's record speaks for the purchase. The merchant's and the
	// user's records are checked too: one applied without the pool's
	// means the key was used for something else on that balance; a
	// merchant's record fenced means a cashback carried across shards was
	// called off under this key (the pool's spend was refunded).
	if mrs.spend().IsFenced() {
		return result(Result{Err: fmt.Errorf("%w: key %q", ErrFenced, op.IdemKey)})
	}
	if res, done := t.keyedDuplicate(brs.spend(), op.IdemKey, -op.By, -1); done {
		return result(res)
	}
	for _, c := range []struct {
		rec    application
		amount int64
		sign   int64
	}{{mrs.spend(), -op.By, -1}, {urs.keyed(), op.By, 1}} {
		if res, done := t.keyedDuplicate(c.rec, op.IdemKey, c.amount, c.sign); done && res.Err != nil {
			return result(res)
		} else if done {
			return result(Result{Err: fmt.Errorf("%w: key %q was applied to a balance without the budget spend",
				ErrIdempotencyMismatch, op.IdemKey)})
		}
	}
	if err := errors.Join(t.checkEntry(bs.main.cur.Get(t.r.self), -op.By),
		t.checkEntry(ms.main.cur.Get(t.r.self), -op.By), t.checkEntry(uvs.cur.Get(t.r.self), op.By)); err != nil {
		return Result{Err: ErrOverflow}
	}
	// Both checks before either spend: a spend changes the overlay's
	// vectors in place.
	b := bs.view()
	if err := t.spendable(&b, op.By); err != nil {
		res := t.refuse(op.Item, &b, op.By, err)
		if m := ms.view(); errors.Is(t.merchantSpendable(&m, op.By), crdt.ErrRightsElsewhere) {
			t.ask(op.Merchant, op.By) // the retry will need both
		}
		return result(res)
	}
	m := ms.view()
	if err := t.merchantSpendable(&m, op.By); err != nil {
		res := t.refuse(op.Merchant, &m, op.By, err)
		res.Refused = op.Merchant
		return result(res)
	}
	for _, c := range []struct {
		bs  *budgetState
		rs  *recState
		key string
	}{{bs, brs, op.Item}, {ms, mrs, op.Merchant}} {
		v := c.bs.view()
		v.Main = v.Main.Add(t.r.self, -op.By)
		c.bs.put(v)
		c.bs.spent += op.By
		t.logBudget(storage.EventSpend, c.key, "", op.IdemKey, op.By)
		t.applyKeyedRecord(c.rs, -op.By, op.At)
		after := c.bs.view()
		t.afterSpend(c.key, &after, op.By)
		t.r.metrics.budgetSpent.Add(float64(op.By))
	}
	t.applyKeyedRecord(urs, op.By, op.At)
	uvs.cur = uvs.cur.Add(t.r.self, op.By)
	t.book(storage.Counters, op.User, urs.rec.BookedMs(), op.By)
	if t.r.cfg.EventLog {
		p, n := halves(op.By)
		t.logEvent(storage.Event{Type: storage.EventIncr, Kind: storage.Counters, Key: op.User, Idem: op.IdemKey, By: op.By,
			P: p, N: n, Count: 1, HLC: urs.keyed().HLC})
	}
	return result(Result{})
}

// applyFence closes budget Item's key IdemKey to spends (OpFence), unless
// a spend of By under it was applied: then it answers Duplicate. It
// decides, in one writer, whether a cross-shard cashback is called off.
func (t *txn) applyFence(op *Op) Result {
	bs, err := t.budget(op.Item)
	if err != nil {
		return Result{Err: err}
	}
	k := spendKey(op.Item, op.IdemKey)
	rs, err := t.record(k)
	if err != nil {
		return Result{Err: err}
	}
	b := bs.view()
	res := Result{Value: b.Available(), Rights: b.Rights(t.r.self)}
	switch rec := rs.spend(); {
	case rec.IsFenced():
	case !rec.Applied():
		if err := t.fence(k, rs, op.At); err != nil {
			return Result{Err: err}
		}
	case rec.Requested() == -op.By:
		res.Duplicate = true // spent: the purchase goes on
	default:
		res.Err = fmt.Errorf("%w: key %q was applied with by=%d, the fence has by=%d",
			ErrIdempotencyMismatch, op.IdemKey, -rec.Requested(), op.By)
	}
	return res
}

// applyCallOff fences budget Item's key IdemKey (OpCallOff) or counter
// Item's (OpCallOffCredit) whatever was applied under it, and gives back
// what this replica applied under it: a cross-shard cashback called off
// takes back its pool's spend and its user's credit this way, at any
// holder, in any region, and the fence wins over every application of the
// key when the records merge. A key fenced already answers Duplicate.
func (t *txn) applyCallOff(op *Op) Result {
	k := keyedKey(op.Item, op.IdemKey)
	if op.Kind == OpCallOff {
		k = spendKey(op.Item, op.IdemKey)
	}
	rs, err := t.record(k)
	if err != nil {
		return Result{Err: err}
	}
	var res Result
	if rs.rec.(application).IsFenced() { // a spend or a keyed record
		res.Duplicate = true
	} else if err := t.fence(k, rs, op.At); err != nil {
		return Result{Err: err}
	}
	if op.Kind == OpCallOff {
		bs, err := t.budget(op.Item)
		if err != nil {
			return Result{Err: err}
		}
		b := bs.view()
		res.Value, res.Rights = b.Available(), b.Rights(t.r.self)
		return res
	}
	vs, err := t.vector(storage.Counters, op.Item)
	if err != nil {
		return Result{Err: err}
	}
	res.Value = vs.cur.Value()
	return res
}

// fence makes record k a fence by this replica (crdt.KeyedRecord.Fence),
// booked at at, and gives back at once what this replica applied under
// it (reconcileRecord: a spend refunded, an increment taken back).
func (t *txn) fence(k rkey, rs *recState, at int64) error {
	rs.rec.(interface {
		Fence(self string, hlc crdt.HLC, at int64)
	}).Fence(t.r.self, t.stampAfter(rs), at) // a keyed record or a spend
	rs.dirty, rs.spread, rs.deleted = true, true, false
	return t.reconcileRecord(k, rs)
}

// stampAfter is the stamp of this replica's new write of rs's register:
// its clock's now, past the register's stamp.
func (t *txn) stampAfter(rs *recState) crdt.HLC {
	hlc := t.r.clock.Now(t.nowMs)
	if last, _ := rs.rec.Stamp(); hlc <= last {
		hlc = last + 1
	}
	return hlc
}

// logBudget logs a grant, spend or transfer of by (Config.EventLog). The
// P and N it records follow storage.Event.Moves: a grant raises the main
// vector's P, a spend its N; a transfer raises the receiver's inbox P and
// this replica's own inbox N. Unkeyed spends of one budget fold into one
// event per commit (By their sum, Count how many), as unkeyed increments
// do: they have no identity a consumer could use, and a hot budget's
// spends would otherwise cost an event each.
func (t *txn) logBudget(typ storage.EventType, key, to, idem string, by int64) {
	if !t.r.cfg.EventLog {
		return
	}
	e := storage.Event{Type: typ, Kind: storage.Budgets, Key: key, User: to, Idem: idem, By: by, Count: 1, HLC: crdt.MakeHLC(t.nowMs, 0)}
	switch typ {
	case storage.EventGrant:
		e.P = uint64(by)
	case storage.EventSpend:
		e.N = uint64(by)
	case storage.EventTransfer:
		e.P, e.N = uint64(by), uint64(by)
	}
	if typ == storage.EventSpend && idem == "" {
		t.logFolded(&t.spendEv, e)
		return
	}
	t.logEvent(e)
}

// give moves some of this replica's rights to a peer that asked: what
// crdt.Give allows, keeping this replica's own recent spends, and at most
// once per giveIntervalMs for one budget and one asker.
func (t *txn) give(g RightsGive) {
	if g.To == t.r.self || !crdt.ValidID(g.Key) || !crdt.ValidID(g.To) || g.Want <= 0 {
		return
	}
	gk := giveKey{g.Key, g.To}
	if last, ok := t.r.gave[gk]; ok && t.nowMs-last < giveIntervalMs && t.nowMs >= last {
		return
	}
	bs, err := t.budget(g.Key)
	if err != nil {
		t.r.log.Warn("rights not given", "key", g.Key, "to", g.To, "error", err)
		return
	}
	if _, err := t.inbox(bs, g.To); err != nil {
		t.r.log.Warn("rights not given", "key", g.Key, "to", g.To, "error", err)
		return
	}
	b := bs.view()
	keep := t.r.spends[g.Key].at(t.nowMs) + bs.spent
	n := t.chaosGive(b.Rights(t.r.self), keep, g.Want, b.Rights(g.To)) // crdt.Give outside a chaos build
	if n == 0 || t.checkEntry(bs.inbox[g.To].cur.Get(t.r.self), n) != nil || t.checkEntry(bs.inbox[t.r.self].cur.Get(t.r.self), -n) != nil {
		return
	}
	if err := b.Transfer(t.r.self, g.To, n); err != nil {
		return
	}
	bs.put(b)
	if len(t.r.gave) >= 1<<14 {
		for k, at := range t.r.gave { // forget gives older than the interval
			if t.nowMs-at >= giveIntervalMs || at > t.nowMs {
				delete(t.r.gave, k)
			}
		}
	}
	t.r.gave[gk] = t.nowMs
	t.logBudget(storage.EventTransfer, g.Key, g.To, "", n)
	t.r.metrics.budgetGiven.Add(float64(n))
}

// giveKey names one budget's gives to one asker.
type giveKey struct{ key, to string }

// GiveRights answers peers' asks for rights (replication calls it with the
// asks of received deltas): for each, this replica gives the asker part of
// the rights it holds (crdt.Give, and give for how often), if it holds
// more than it spent lately. The transfers commit
// like any write and reach the asker by the fast path.
func (bg Budgets) GiveRights(ctx context.Context, gives []RightsGive) error {
	r := bg.r
	if len(gives) == 0 || !r.accepting.Load() {
		return nil
	}
	return r.submit(ctx, &request{gives: gives, done: make(chan struct{})})
}

// Budgets is the replica's face for budgets: reads, and the rights this
// replica holds and gives or hands off (handoff.go).
type Budgets struct{ r *Replica }

// Budgets returns the replica's budgets face.
func (r *Replica) Budgets() Budgets { return Budgets{r} }

// BudgetRead is a budget as this replica sees it. Remaining is
// crdt.Budget.Available: never negative, and exact once the replicas have
// exchanged state. Granted and Spent are the sums of the entries seen,
// which may be from different moments of different replicas (a spend seen
// before the grant it was spent from).
type BudgetRead struct {
	Remaining, Granted, Spent int64
	// Rights is what each replica holds, by replica id, as far as this
	// replica knows (exact for itself: LocalRights).
	Rights      map[string]int64
	LocalRights int64
	// Unreconciled counts keyed spends and grants applied at more than
	// one replica whose refunds or take-backs have not all arrived.
	Unreconciled int
}

// Get reads a budget.
func (bg Budgets) Get(key string) (BudgetRead, error) {
	r := bg.r
	if !crdt.ValidID(key) {
		return BudgetRead{}, fmt.Errorf("%w: bad budget key %q", ErrInvalid, key)
	}
	if err := r.Err(); err != nil {
		return BudgetRead{}, err
	}
	// One read of the store for the main vector and the inboxes, not the
	// cache's main vector and the store's inboxes: the writer puts a
	// commit in the cache only after it is durable, and a read between
	// the two, or a commit between two reads, mixes that commit's inboxes
	// with the main vector from before it. A commit that raises both (a
	// grant moved on during a handoff, a grant and a give in one batch)
	// then reads as this replica holding less than it ever did, below
	// zero.
	main, inboxes, err := r.store.Budget(key)
	if err != nil {
		return BudgetRead{}, err
	}
	b := crdt.Budget{Main: main, Inbox: inboxes}
	rd := BudgetRead{Remaining: b.Available(), Granted: b.Granted(), Spent: b.Spent(), LocalRights: b.Rights(r.self),
		Rights: make(map[string]int64)}
	for _, id := range b.Holders() {
		rd.Rights[id] = b.Rights(id)
	}
	r.umu.RLock()
	rd.Unreconciled = r.unreconciled[vkey{storage.Budgets, key}]
	r.umu.RUnlock()
	return rd, nil
}

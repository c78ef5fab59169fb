package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tally-dev/tally/api"
	tallyclient "github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/internal/base/poll"
)

// Budgets. Clients grant small amounts to a few budgets (bud:1, bud:2, the
// merchants' balances m:1, m:2 and the cashback pool cb:pool) at random
// regions, and spend from them by 1 to 3 at random regions, so the budgets
// run out again and again and the exhaustion edge is crossed while regions
// are cut apart. Half the spends carry an idempotency key; every cashback
// does (it names the purchase: spend from cb:pool and from a merchant's
// balance m:N, a budget too, credit a user's counter cu:N, in one
// commit). A 409 (budget_exhausted, rights_elsewhere)
// is a normal answer: nothing was spent. A rights_elsewhere is tried again
// at the same region a moment later (the region asked its peers for
// rights). A share of keyed spends and cashbacks (Config.RetryElsewhere),
// and every one whose answer was lost, is sent again with the same key
// and amount to another region, as a client failing over would: in the
// end it must count once.
//
// A grant or an unkeyed spend whose answer is lost is not sent again (it
// could apply twice), and a keyed one that no region acknowledged may or
// may not have been applied: the model counts each as "maybe", and checks
// that the truth lies between the acknowledged amounts and those plus the
// maybes. A budget's granted and spent both include the refunds of keyed
// spends that two regions applied (the loser takes its application back
// as a grant of its own); the model bounds those by the keys sent to more
// than one region, and checks remaining = granted − spent, which refunds
// do not move, against the acknowledged grants and spends.
//
// During the run the sampler reads every region's view of every budget:
// none may show remaining < 0, and no replica may hold
// negative rights in its own view (local_rights). After the final heal
// every region must read every budget alike, with nothing unreconciled,
// rights ≥ 0 adding up to remaining, remaining ≥ 0 and within the model's
// bounds. The merchants' balances are budgets, so all of that is their
// floor: no view, during the run or after, may show a merchant below 0 or
// a region holding negative rights to one. The accounts must conserve
// their sum (what the merchants have left plus what the users were
// credited is what was granted to the merchants), each user's credits
// within the model's bounds (each acknowledged purchase once), and the
// users' credits must be exactly what the pool spent.

// Budget workload ids.
const (
	budgetSpendKeys   = 2 // bud:1, bud:2: spent by spends
	cashbackPool      = "cb:pool"
	cashbackMerchants = 2 // m:1, m:2: budgets spent by cashbacks
	cashbackUsers     = 3 // cu:1, cu:2, cu:3
)

func budgetKeyID(i int) string    { return fmt.Sprintf("bud:%d", i+1) }
func merchantID(i int) string     { return fmt.Sprintf("m:%d", i+1) }
func cashbackUserID(i int) string { return fmt.Sprintf("cu:%d", i+1) }

// budgetIDs are every budget the workload may touch (the spend keys, the
// merchants' balances, then the pool): none if the mix has no budget
// operations.
func budgetIDs(cfg Config) []string {
	if cfg.BudgetWeight == 0 {
		return nil
	}
	var out []string
	for i := range budgetSpendKeys {
		out = append(out, budgetKeyID(i))
	}
	for i := range cashbackMerchants {
		out = append(out, merchantID(i))
	}
	return append(out, cashbackPool)
}

// cashbackCounters are the merchants' balances (budgets) and the users'
// counters: none if the mix has no budget operations.
func cashbackCounters(cfg Config) (merchants, users []string) {
	if cfg.BudgetWeight == 0 {
		return nil, nil
	}
	for i := range cashbackMerchants {
		merchants = append(merchants, merchantID(i))
	}
	for i := range cashbackUsers {
		users = append(users, cashbackUserID(i))
	}
	return merchants, users
}

// Amounts: a grant is small, a few spends' worth, so that the budgets
// keep running out; a spend or cashback takes 1 to maxBudgetSpend.
const (
	minGrant       = 2
	maxGrant       = 6
	maxBudgetSpend = 3
)

// A rights_elsewhere answer is tried again at the same region up to
// rightsRetries times, rightsRetryWait apart: the region asked its peers
// for rights, which arrive by the fast path in a few milliseconds.
const (
	rightsRetries   = 2
	rightsRetryWait = 30 * time.Millisecond
)

// handoffShare: one budget operation in handoffShare is a handoff of a
// region's rights to another, held for a moment (OpHandoff).
const handoffShare = 40

// execHandoff runs a handoff: on, held for o.RetryAfter, off. The cancel
// is retried until the region answers (a region killed meanwhile has lost
// the mode with the process, and answers once it is back).
func (w *workload) execHandoff(ctx context.Context, o *Op) {
	c := w.client(o.Region) // the handoff is this replica's mode: cancelled there too
	o.Attempts++
	cctx, cancel := context.WithTimeout(ctx, w.cfg.ClientTimeout)
	out, err := c.api.HandOff(cctx, o.User)
	cancel()
	o.Outcome, o.Reason = classify(err)
	if err != nil {
		if o.Outcome == OutcomeFailed {
			return // not on
		}
	} else {
		o.Value = out.Moved
	}
	if !poll.Sleep(ctx, o.RetryAfter) {
		ctx = context.WithoutCancel(ctx) // the workload ended: still turn it off
	}
	for try := 0; try < 50; try++ {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.ClientTimeout)
		_, err := c.api.CancelHandoff(cctx)
		cancel()
		if err == nil || !poll.Sleep(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// budget draws a budget operation: a grant a fifth of the time (to any
// budget, the pool included), a cashback a third, else a spend from
// bud:N, half of them keyed. A share of the keyed ones (RetryElsewhere)
// will be sent again to another region, at once or a little later.
func (p *planner) budget() []*Op {
	c := p.cfg
	o := &Op{Region: p.region()}
	if p.rng.IntN(handoffShare) == 0 {
		o.Kind, o.User = OpHandoff, replicaID(p.otherRegion(o.Region))
		o.RetryAfter = time.Duration(200+p.rng.IntN(800)) * time.Millisecond
		return []*Op{o}
	}
	switch r := p.rng.IntN(15); {
	case r < 3:
		o.Kind, o.By = OpGrant, int64(minGrant+p.rng.IntN(maxGrant-minGrant+1))
		ids := budgetIDs(c)
		o.Key = ids[p.rng.IntN(len(ids))]
	case r < 8:
		o.Kind, o.Key, o.keyed = OpCashback, cashbackPool, true
		o.Merchant, o.User = merchantID(p.rng.IntN(cashbackMerchants)), cashbackUserID(p.rng.IntN(cashbackUsers))
		o.By = int64(1 + p.rng.IntN(maxBudgetSpend))
		o.lag = p.lag() // the purchase's time, for the user's credit
	default:
		o.Kind, o.Key = OpSpend, budgetKeyID(p.rng.IntN(budgetSpendKeys))
		o.By, o.keyed = int64(1+p.rng.IntN(maxBudgetSpend)), p.rng.IntN(2) == 0
	}
	// A third of grants and spends go as one-event batches (POST
	// /v1/events), as increments do.
	o.Events = o.Kind != OpCashback && p.rng.IntN(3) == 0
	if o.keyed && p.rng.Float64() < c.RetryElsewhere {
		// The client loses the answer and fails over: the same key and
		// amount to another region, at once or a little later.
		o.Retry = p.otherRegion(o.Region)
		if p.rng.IntN(2) == 0 {
			o.RetryAfter = time.Duration(100+p.rng.IntN(400)) * time.Millisecond
		}
	}
	return []*Op{o}
}

// otherRegion draws a region other than r.
func (p *planner) otherRegion(r string) string {
	i := slices.Index(p.cfg.Regions, r)
	return p.cfg.Regions[(i+1+p.rng.IntN(len(p.cfg.Regions)-1))%len(p.cfg.Regions)]
}

// execBudget runs a budget operation. A grant or an unkeyed spend is sent
// once (a lost answer leaves it maybe applied). A keyed spend or cashback
// is sent again, same key and amount, to its Retry region, or, if no
// region answered the first attempt, to another one: it is acknowledged
// if any attempt was.
func (w *workload) execBudget(ctx context.Context, o *Op) {
	if o.Kind == OpCashback {
		o.At = eventTime(o.lag) // every attempt carries it
		o.CrossShard = w.cfg.sharded()
	}
	first, maybe := w.budgetAttempts(ctx, o, o.Region)
	o.Outcome, o.Reason, o.Value = first.outcome, first.reason, first.value
	if maybe {
		o.Applications++
	}
	if !o.keyed {
		return
	}
	if o.Retry == "" && (first.outcome == OutcomeTimeout || first.outcome == OutcomeFailed) {
		i := slices.Index(w.cfg.Regions, o.Region)
		o.Retry = w.cfg.Regions[(i+1)%len(w.cfg.Regions)]
	}
	if o.Retry == "" || o.Retry == o.Region || !poll.Sleep(ctx, o.RetryAfter) {
		return
	}
	a, maybe := w.budgetAttempts(ctx, o, o.Retry)
	o.RetryOutcome, o.RetryDuplicate = a.outcome, a.duplicate
	if maybe {
		o.Applications++
	}
	// A cashback run across shards and called off ends called off in
	// every region, an acknowledged run elsewhere included (its fences
	// win when the records merge). One refused by its merchant there, or
	// not answered, may have been called off.
	crossShard := o.CrossShard
	mayCallOff := func(x Outcome, atMerchant bool) bool {
		return crossShard && (x == OutcomeTimeout || x == OutcomeRefused && atMerchant)
	}
	switch {
	case o.Kind == OpCashback && (o.Reason == "called_off" && o.Outcome == OutcomeRefused || a.outcome == OutcomeRefused && a.reason == "called_off"):
		o.Outcome, o.Reason = OutcomeRefused, "called_off"
	case (o.Outcome == OutcomeOK || a.outcome == OutcomeOK) && (mayCallOff(o.Outcome, first.atMerchant) || mayCallOff(a.outcome, a.atMerchant)):
		o.Outcome = OutcomeTimeout // paid, unless a run that may have been called off was
	case o.Outcome == OutcomeOK:
	case a.outcome == OutcomeOK:
		o.Outcome, o.Value = OutcomeOK, a.value
	case o.Outcome == OutcomeTimeout || a.outcome == OutcomeTimeout:
		o.Outcome = OutcomeTimeout // one of them may have applied it
	case a.outcome == OutcomeRefused:
		o.Outcome, o.Reason = OutcomeRefused, a.reason
	}
}

// budgetAttempts sends o to region, again after a rights_elsewhere up to
// rightsRetries times, and returns the last answer, and whether an
// attempt may have applied o there (answered ok and not duplicate, or not
// answered).
func (w *workload) budgetAttempts(ctx context.Context, o *Op, region string) (answer, bool) {
	for try := 0; ; try++ {
		o.Attempts++
		a := w.client(region).budgetWrite(ctx, o, w.cfg.ClientTimeout)
		if a.outcome == OutcomeRefused && a.reason == "rights_elsewhere" && try < rightsRetries && poll.Sleep(ctx, rightsRetryWait) {
			continue
		}
		return a, a.outcome == OutcomeOK && !a.duplicate || a.outcome == OutcomeTimeout
	}
}

// budgetWrite sends one grant, spend or cashback. A 409 whose code says
// the budget cannot cover it is OutcomeRefused, with the code as reason.
func (c *client) budgetWrite(ctx context.Context, o *Op, timeout time.Duration) answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if o.Events {
		return c.budgetEvent(ctx, o)
	}
	var err error
	var a answer
	switch o.Kind {
	case OpGrant:
		var out api.BudgetGrant
		out, err = c.api.Grant(ctx, o.Key, o.By)
		a.value = out.Remaining
	case OpSpend:
		var out api.BudgetSpend
		out, err = c.api.Spend(ctx, o.Key, tallyclient.SpendRequest{By: o.By, IdempotencyKey: o.Idem})
		a.value, a.duplicate = out.Remaining, out.Duplicate
	case OpCashback:
		var out api.Cashback
		out, err = c.api.Cashback(ctx, tallyclient.CashbackRequest{Budget: o.Key, Merchant: o.Merchant, User: o.User,
			Amount: o.By, IdempotencyKey: o.Idem, At: atOf(o.At)})
		a.value, a.duplicate = out.Budget.Value, out.Duplicate
	default:
		return answer{outcome: OutcomeFailed, reason: "not a budget operation: " + string(o.Kind)}
	}
	var refused *tallyclient.Error
	if errors.As(err, &refused) && refused.Budget != nil {
		return answer{outcome: OutcomeRefused, reason: refused.Code, atMerchant: o.Kind == OpCashback && refused.Budget.Key == o.Merchant}
	}
	if o.Kind == OpCashback && tallyclient.Code(err) == "called_off" {
		// A cashback across shards that a run of it called off under
		// this key: its fences beat every application of the key.
		return answer{outcome: OutcomeRefused, reason: "called_off"}
	}
	if err != nil {
		return answerOf(err)
	}
	a.outcome = OutcomeOK
	return a
}

// budgetEvent sends a grant or spend as a one-event batch (POST
// /v1/events). A rejected event whose code says the budget cannot cover
// it is OutcomeRefused, as a 409 of the spend route; another rejected
// event was not applied.
func (c *client) budgetEvent(ctx context.Context, o *Op) answer {
	ev := tallyclient.Event{Type: tallyclient.EventSpend, Key: o.Key, By: o.By, IdempotencyKey: o.Idem}
	if o.Kind == OpGrant {
		ev.Type = tallyclient.EventGrant
	}
	r, a, ok := c.oneEvent(ctx, ev)
	switch {
	case !ok:
		return a
	case r.OK:
		return answer{outcome: OutcomeOK, value: r.Value, duplicate: r.Duplicate}
	case r.Code == "budget_exhausted" || r.Code == "rights_elsewhere":
		return answer{outcome: OutcomeRefused, reason: r.Code}
	}
	return answer{outcome: OutcomeFailed, reason: "event rejected: " + r.Code}
}

// readBudget reads GET /v1/budgets/{key}.
func (c *client) readBudget(ctx context.Context, key string, timeout time.Duration) (api.Budget, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.api.Budget(ctx, key)
}

// budgetViolation describes what is wrong with one region's view of a
// budget at any time ("" if nothing): the remaining it shows below 0, or
// its own rights below 0. A view's spent may pass its granted for a while
// (it can hold a replica's spends before the grant they were spent from:
// no replica relays another's entries), so spent ≤ granted is checked on
// the final, complete state, and on the acknowledged history.
func budgetViolation(b api.Budget) string {
	var bad []string
	if b.Remaining < 0 {
		bad = append(bad, fmt.Sprintf("remaining %d (granted %d, spent %d): below the bound 0", b.Remaining, b.Granted, b.Spent))
	}
	if b.LocalRights < 0 {
		bad = append(bad, fmt.Sprintf("its own rights are %d: it spent or gave rights it did not hold", b.LocalRights))
	}
	return strings.Join(bad, "; ")
}

// budgetName is a budget's name in violations.
func budgetName(k string) string { return "budget/" + k }

// bounds is what the model knows of an amount: at least Lo, at most Hi.
type bounds struct{ Lo, Hi int64 }

func (b bounds) String() string {
	if b.Lo == b.Hi {
		return fmt.Sprint(b.Lo)
	}
	return fmt.Sprintf("%d to %d", b.Lo, b.Hi)
}

// budgetBounds is what the model knows of one budget from the history.
type budgetBounds struct {
	// Granted and Spent are the acknowledged grants and spends (a keyed
	// spend or cashback once, however many regions applied it);
	// MaybeGranted and MaybeSpent those no region acknowledged, which may
	// or may not have been applied.
	Granted, MaybeGranted int64
	Spent, MaybeSpent     int64
	// Refunds bounds what reconciliation may have given back: the amount
	// of every keyed spend or cashback times the regions beyond the first
	// that may have applied it.
	Refunds int64
}

// remaining bounds what must be left: the grants less the spends.
func (b budgetBounds) remaining() bounds {
	return bounds{Lo: b.Granted - b.Spent - b.MaybeSpent, Hi: b.Granted + b.MaybeGranted - b.Spent}
}

// budgetModel is what the budgets and the cashback balances must be after
// the final heal.
type budgetModel struct {
	// Budgets: a cashback is a spend of the pool and of its merchant's.
	Budgets map[string]*budgetBounds
	// Balances bound each user's counter.
	Balances map[string]bounds
	// Merchants are the merchants' budgets, Users the users' counters.
	Merchants, Users []string
}

// buildBudgetModel derives the budgets' bounds from the history. A budget
// operation answered with another 4xx than the two refusals is a
// violation: the workload's requests are valid.
func buildBudgetModel(ops []Op, keys, merchants, users []string) (budgetModel, []Violation) {
	m := budgetModel{Budgets: map[string]*budgetBounds{}, Balances: map[string]bounds{}, Merchants: merchants, Users: users}
	for _, k := range keys {
		m.Budgets[k] = &budgetBounds{}
	}
	for _, c := range users {
		m.Balances[c] = bounds{}
	}
	var vs []Violation
	for i := range ops {
		o := &ops[i]
		if !o.Kind.budgetOp() {
			continue
		}
		ok, maybe := o.Outcome == OutcomeOK, o.Outcome == OutcomeTimeout
		spent := []string{o.Key}
		if o.Kind == OpCashback {
			spent = append(spent, o.Merchant)
		}
		for _, k := range spent {
			b := m.Budgets[k]
			if b == nil {
				b = &budgetBounds{}
				m.Budgets[k] = b
			}
			b.Refunds += o.By * int64(max(o.Applications-1, 0))
			if o.CrossShard && o.Outcome != OutcomeOK {
				// Called off, or maybe: each region's run may have
				// spent and then given it back.
				tried := int64(1)
				if o.Retry != "" && o.Retry != o.Region {
					tried++
				}
				b.Refunds += o.By * tried
			}
			switch {
			case o.Kind == OpGrant && ok:
				b.Granted += o.By
			case o.Kind == OpGrant && maybe:
				b.MaybeGranted += o.By
			case ok:
				b.Spent += o.By
			case maybe:
				b.MaybeSpent += o.By
			}
		}
		if o.Outcome == OutcomeFailed && strings.HasPrefix(o.Reason, "http 4") {
			vs = append(vs, Violation{Kind: KindBudgets, Region: o.Region, Key: budgetName(o.Key), Op: o.ID,
				Detail: fmt.Sprintf("%s of %d (idempotency key %q) answered %s", o.Kind, o.By, o.Idem, o.Reason)})
		}
		if o.Kind == OpCashback && (ok || maybe) {
			ub := m.Balances[o.User]
			ub.Hi += o.By
			if ok {
				ub.Lo += o.By
			}
			m.Balances[o.User] = ub
		}
	}
	return m, vs
}

// budgetState is what the regions say of the budgets and the cashback
// balances.
type budgetState struct {
	Regions []string
	// Budgets are per region, per budget, the reads; Balances per region,
	// per cashback counter. One missing could not be read (Errs says why).
	Budgets  map[string]map[string]api.Budget
	Balances map[string]map[string]reading
	Errs     []Violation
}

// readBudgetState reads every budget and cashback counter in every region.
func readBudgetState(ctx context.Context, procs []*proc, keys, counters []string) budgetState {
	st := budgetState{Budgets: map[string]map[string]api.Budget{}, Balances: map[string]map[string]reading{}}
	type regionReads struct {
		budgets  map[string]api.Budget
		balances map[string]reading
		errs     []Violation
	}
	reads := perRegion(ctx, procs, 10*time.Second, func(ctx context.Context, p *proc) (regionReads, error) {
		rr := regionReads{budgets: map[string]api.Budget{}, balances: map[string]reading{}}
		for _, k := range keys {
			b, err := p.client.readBudget(ctx, k, 2*time.Second)
			if err != nil {
				rr.errs = append(rr.errs, Violation{Kind: KindBudgets, Region: p.view, Key: budgetName(k), Detail: "could not be read: " + err.Error()})
				continue
			}
			rr.budgets[k] = b
		}
		for _, c := range counters {
			k := key{ID: c}
			rd, err := p.client.read(ctx, k, 2*time.Second)
			if err != nil {
				rr.errs = append(rr.errs, Violation{Kind: KindBudgets, Region: p.view, Key: k.String(), Detail: "could not be read: " + err.Error()})
				continue
			}
			rr.balances[c] = rd
		}
		return rr, nil
	})
	for _, p := range procs {
		st.Regions = append(st.Regions, p.view)
		rr, ok := reads[p.view]
		if !ok {
			st.Errs = append(st.Errs, Violation{Kind: KindBudgets, Region: p.view, Detail: "the budgets could not be read"})
			continue
		}
		st.Budgets[p.view], st.Balances[p.view] = rr.budgets, rr.balances
		st.Errs = append(st.Errs, rr.errs...)
	}
	return st
}

// sameBudget reports whether two reads of a budget say the same.
func sameBudget(a, b api.Budget) bool {
	return a.Remaining == b.Remaining && a.Granted == b.Granted && a.Spent == b.Spent && maps.Equal(a.Rights, b.Rights)
}

// settled reports whether every region read everything, all alike, with
// nothing unreconciled, and the same as in prev: the budgets have
// converged, be they right or wrong.
func (st budgetState) settled(prev budgetState, keys, counters []string) bool {
	if len(st.Errs) > 0 || len(st.Regions) == 0 {
		return false
	}
	ref := st.Regions[0]
	for _, r := range st.Regions {
		for _, k := range keys {
			b, p := st.Budgets[r][k], prev.Budgets[r][k]
			if b.Unreconciled > 0 || !sameBudget(b, st.Budgets[ref][k]) || !sameBudget(b, p) {
				return false
			}
		}
		for _, c := range counters {
			rd, p := st.Balances[r][c], prev.Balances[r][c]
			if rd.Approx || rd.Unreconciled > 0 || rd.Value != st.Balances[ref][c].Value || rd.Value != p.Value {
				return false
			}
		}
	}
	return true
}

// unchanged reports whether every region read every budget and counter the
// same as in prev.
func (st budgetState) unchanged(prev budgetState, keys, counters []string) bool {
	if len(st.Errs) > 0 || len(prev.Errs) > 0 {
		return false
	}
	for _, r := range st.Regions {
		for _, k := range keys {
			if !sameBudget(st.Budgets[r][k], prev.Budgets[r][k]) || st.Budgets[r][k].Unreconciled != prev.Budgets[r][k].Unreconciled {
				return false
			}
		}
		for _, c := range counters {
			if st.Balances[r][c].Value != prev.Balances[r][c].Value {
				return false
			}
		}
	}
	return true
}

// budgetChecked counts what checkBudgets compared.
type budgetChecked struct {
	Keys  int // budgets
	Reads int // final reads of budgets and cashback balances compared, every region
	// Refunds is what reconciliation gave back of keyed spends and
	// cashbacks that two regions applied (granted beyond the acknowledged
	// grants), in the budgets with no unanswered grant.
	Refunds int64
}

// checkBudgets compares every region's budgets and cashback balances with
// the model and with each other.
func checkBudgets(m budgetModel, st budgetState, keys []string) ([]Violation, budgetChecked) {
	vs := slices.Clone(st.Errs)
	n := budgetChecked{Keys: len(keys)}
	for _, k := range keys {
		want := *m.Budgets[k]
		rem := want.remaining()
		first := ""
		for _, r := range st.Regions {
			b, ok := st.Budgets[r][k]
			if !ok {
				continue // Errs says why
			}
			n.Reads++
			bad := func(format string, args ...any) {
				vs = append(vs, Violation{Kind: KindBudgets, Region: r, Key: budgetName(k), Detail: fmt.Sprintf(format, args...)})
			}
			if first == "" {
				first = r
				if want.MaybeGranted == 0 {
					n.Refunds += max(b.Granted-want.Granted, 0)
				}
			} else if f := st.Budgets[first][k]; !sameBudget(b, f) {
				bad("remaining %d, granted %d, spent %d, rights %v; %s reads %d, %d, %d, %v: the regions disagree after the final heal",
					b.Remaining, b.Granted, b.Spent, b.Rights, first, f.Remaining, f.Granted, f.Spent, f.Rights)
			}
			if b.Unreconciled > 0 {
				bad("unreconciled %d after the final heal: a refund of a keyed spend applied in two regions never arrived", b.Unreconciled)
			}
			if v := budgetViolation(b); v != "" {
				bad("after the final heal: %s", v)
			}
			var held int64
			for id, h := range b.Rights {
				held += h
				if h < 0 {
					bad("%s holds %d rights after the final heal", id, h)
				}
			}
			if held != b.Remaining {
				bad("the rights %v add up to %d, but remaining is %d", b.Rights, held, b.Remaining)
			}
			switch {
			case b.Remaining > rem.Hi:
				bad("remaining %d, but the grants (%d acknowledged, %d unanswered) less the acknowledged spends (%d) leave at most %d: an acknowledged spend is missing, or a grant counted twice",
					b.Remaining, want.Granted, want.MaybeGranted, want.Spent, rem.Hi)
			case b.Remaining < rem.Lo:
				bad("remaining %d, but the acknowledged grants (%d) less the spends (%d acknowledged, %d unanswered) leave at least %d: something was spent that no client asked for, or counted twice, or an acknowledged grant is lost",
					b.Remaining, want.Granted, want.Spent, want.MaybeSpent, rem.Lo)
			}
			// Refunds raise granted and spent alike; each is at least the
			// acknowledged amount and at most the maybes and refunds more.
			if hi := want.Granted + want.MaybeGranted + want.Refunds; b.Granted < want.Granted || b.Granted > hi {
				bad("granted %d, but %d was granted and acknowledged (%d unanswered) and at most %d refunded: want %d to %d",
					b.Granted, want.Granted, want.MaybeGranted, want.Refunds, want.Granted, hi)
			}
			if hi := want.Spent + want.MaybeSpent + want.Refunds; b.Spent < want.Spent || b.Spent > hi {
				bad("spent %d, but %d was spent and acknowledged (%d unanswered, each key once) and at most %d refunded: want %d to %d",
					b.Spent, want.Spent, want.MaybeSpent, want.Refunds, want.Spent, hi)
			}
		}
	}
	if _, ok := m.Budgets[cashbackPool]; ok && len(m.Users) > 0 && len(m.Merchants) > 0 {
		cvs, cn := checkCashback(m, st)
		vs = append(vs, cvs...)
		n.Reads += cn
	}
	return vs, n
}

// checkCashback checks the cashback balances in every region: each user
// within the model's bounds, what the merchants have left plus what the
// users were credited what was granted to the merchants (the sum of the
// accounts is constant: a cashback only moves an amount), and the users'
// credits what the pool spent. The merchants' floor is their budgets'
// (checkBudgets, and the sampler during the run).
func checkCashback(m budgetModel, st budgetState) ([]Violation, int) {
	var vs []Violation
	n := 0
	pool := *m.Budgets[cashbackPool]
	var granted bounds // to the merchants
	for _, c := range m.Merchants {
		if b := m.Budgets[c]; b != nil {
			granted.Lo += b.Granted
			granted.Hi += b.Granted + b.MaybeGranted
		}
	}
	for _, r := range st.Regions {
		var merchants, users int64
		whole := true
		for _, c := range m.Users {
			rd, ok := st.Balances[r][c]
			if !ok {
				whole = false
				continue // Errs says why
			}
			n++
			bad := func(format string, args ...any) {
				vs = append(vs, Violation{Kind: KindBudgets, Region: r, Key: key{ID: c}.String(), Detail: fmt.Sprintf(format, args...)})
			}
			if rd.Approx || rd.Unreconciled > 0 {
				bad("the final read says approx:%v unreconciled:%d", rd.Approx, rd.Unreconciled)
			}
			if b := m.Balances[c]; rd.Value < b.Lo || rd.Value > b.Hi {
				bad("value %d, but the acknowledged cashbacks (each purchase once, and those with no answer) make it %s", rd.Value, b)
			}
			users += rd.Value
		}
		for _, c := range m.Merchants {
			b, ok := st.Budgets[r][c]
			if !ok {
				whole = false
				continue
			}
			merchants += b.Remaining
		}
		b, ok := st.Budgets[r][cashbackPool]
		if !whole || !ok {
			continue
		}
		bad := func(format string, args ...any) {
			vs = append(vs, Violation{Kind: KindBudgets, Region: r, Key: "cashback/" + cashbackPool, Detail: fmt.Sprintf(format, args...)})
		}
		if sum := merchants + users; sum < granted.Lo || sum > granted.Hi {
			bad("the merchants have %d left and the users were credited %d, %d in all, but %s was granted to the merchants: a cashback did not move its amount whole",
				merchants, users, sum, granted)
		}
		// The pool is spent by cashbacks only, so what the users were
		// credited is what the pool's grants less its remaining say it
		// spent: exactly, unless a grant's answer was lost.
		if lo, hi := pool.Granted, pool.Granted+pool.MaybeGranted; users+b.Remaining < lo || users+b.Remaining > hi {
			bad("the users were credited %d and the pool has %d left, so %d was granted to it; but %s was (the grants acknowledged, and those with no answer): credits and the pool's spending differ",
				users, b.Remaining, users+b.Remaining, bounds{lo, hi})
		}
	}
	return vs, n
}

// budgetCheckTimeout bounds how long the checker waits for every region's
// budgets to agree: they replicate with the counters, but a refund of a
// keyed spend applied in two regions comes a round trip later. Answers
// that have not moved for budgetStableFor, though they differ between
// regions, are final too.
const (
	budgetCheckTimeout = 15 * time.Second
	budgetStableFor    = 3 * time.Second
)

// checkBudgetsUntil reads and checks the budgets until they pass, or the
// regions have settled on them, or they have not moved for
// budgetStableFor, or budgetCheckTimeout has gone by, and returns the last
// check's result with the model's violations.
func checkBudgetsUntil(ctx context.Context, procs []*proc, ops []Op, cfg Config) ([]Violation, budgetChecked) {
	keys := budgetIDs(cfg)
	if len(keys) == 0 {
		return nil, budgetChecked{}
	}
	merchants, users := cashbackCounters(cfg)
	counters := users // the merchants' balances are budgets, in keys
	m, mvs := buildBudgetModel(ops, keys, merchants, users)
	start := time.Now()
	moved := start
	var prev budgetState
	for {
		st := readBudgetState(ctx, procs, keys, counters)
		vs, n := checkBudgets(m, st, keys)
		if !st.unchanged(prev, keys, counters) {
			moved = time.Now()
		}
		if len(vs) == 0 || st.settled(prev, keys, counters) || time.Since(moved) >= budgetStableFor ||
			time.Since(start) >= budgetCheckTimeout || !poll.Sleep(ctx, 300*time.Millisecond) {
			return append(mvs, vs...), n
		}
		prev = st
	}
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-dev/tally/internal/base/poll"
)

// workload drives the regions with likes, unlikes, increments, unique
// adds and budget grants, spends and cashbacks, like many users of many
// clients would, and records every operation.
//
// Users are split among workers; a worker runs one operation at a time, so
// each user's actions are serialized (the next one waits for the answer
// to the last), except concurrent pairs, where one user acts in two
// regions at once. A like, unlike or unique add whose answer is lost is
// retried at the same region until acknowledged; a lost increment is
// resolved later with its idempotency key (resolve). Each worker draws its choices from its own
// generator seeded by the run's seed, so the same seed gives every worker
// the same sequence of operations.
type workload struct {
	cfg Config
	// clients are each region's replicas' clients, in order; client
	// picks one for every request.
	clients map[string][]*replicaClient
	hist    *history
	gate    *gate
	start   time.Time
	// episode returns the fault episode running now (0 if none) and
	// whether it cuts regions apart.
	episode func() (int, bool)

	nextID   atomic.Int64
	nextPair atomic.Int64

	mu     sync.Mutex               // protects paused and acked
	paused map[string]bool          // regions and replicas whose process is stopped (KindPause)
	acked  map[string]chan struct{} // closed at a region's next acknowledged increment
}

// nextAck returns a channel closed when region next acknowledges an
// increment (see Episode.AfterAck).
func (w *workload) nextAck(region string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.acked == nil {
		w.acked = map[string]chan struct{}{}
	}
	ch := w.acked[region]
	if ch == nil {
		ch = make(chan struct{})
		w.acked[region] = ch
	}
	return ch
}

// noteAck tells whoever waits in nextAck that region acknowledged an
// increment.
func (w *workload) noteAck(region string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.acked[region]; ch != nil {
		close(ch)
		delete(w.acked, region)
	}
}

// replicaClient is the client of one replica of a region.
type replicaClient struct {
	replica string
	client  *client
}

// client returns the client of a replica of region for one request: its
// only one, or, in a sharded run, a random one of those not paused (as a
// load balancer in front of a region would pick), which need not hold the
// key: it forwards the request to a holder.
func (w *workload) client(region string) *client {
	cs := w.clients[region]
	if len(cs) == 1 {
		return cs[0].client
	}
	w.mu.Lock()
	up := make([]*replicaClient, 0, len(cs))
	for _, c := range cs {
		if !w.paused[c.replica] {
			up = append(up, c)
		}
	}
	w.mu.Unlock()
	if len(up) == 0 {
		up = cs
	}
	return up[rand.IntN(len(up))].client
}

// setPaused marks a region, or one replica of a sharded region, paused or
// not: while a region is, new operations planned for it go to another
// region, and while a replica is, its region's other replicas take its
// requests, as a load balancer would send them away from a hung process,
// so the others keep working.
func (w *workload) setPaused(name string, paused bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused == nil {
		w.paused = map[string]bool{}
	}
	w.paused[name] = paused
}

// reroute moves a step's operations off paused regions, keeping the two
// operations of a pair in two regions when it can.
func (w *workload) reroute(ops []*Op) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, o := range ops {
		if !w.paused[o.Region] {
			continue
		}
		for _, r := range w.cfg.Regions {
			taken := slices.ContainsFunc(ops, func(x *Op) bool { return x != ops[i] && x.Region == r })
			if !w.paused[r] && !taken {
				o.Region = r
				break
			}
		}
	}
}

func (w *workload) since() time.Duration { return time.Since(w.start) }

// run starts the workers. They stop taking new operations when gen ends;
// an operation in progress is still retried until acknowledged or retry
// ends. run returns once every worker has returned.
func (w *workload) run(gen, retry context.Context) {
	var wg sync.WaitGroup
	for i := range w.cfg.Workers {
		wg.Go(func() { w.worker(gen, retry, i) })
	}
	wg.Wait()
}

// plannedOp is one step of a worker's sequence: an operation, or two for a
// concurrent pair, or two one after the other (sequential: a late pair, a
// toggle and its resend to another region).
type plannedOp struct {
	think      time.Duration
	ops        []*Op
	sequential bool
}

// planner draws one worker's operations.
type planner struct {
	cfg   Config
	rng   *rand.Rand
	zipf  *rand.Zipf
	users []int
	mean  time.Duration
}

func newPlanner(cfg Config, worker int) *planner {
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(worker)+1))
	p := &planner{cfg: cfg, rng: rng}
	if cfg.Items > 1 {
		p.zipf = rand.NewZipf(rng, 1.2, 1, uint64(cfg.Items-1))
	}
	for u := worker; u < cfg.Users; u += cfg.Workers {
		p.users = append(p.users, u)
	}
	p.mean = time.Duration(float64(cfg.Workers) / cfg.Rate * float64(time.Second))
	return p
}

func (p *planner) item() string {
	if p.zipf == nil {
		return itemID(0)
	}
	return itemID(int(p.zipf.Uint64()))
}

func (p *planner) region() string { return p.cfg.Regions[p.rng.IntN(len(p.cfg.Regions))] }

// next draws the next step. Ids are filled in when it runs.
func (p *planner) next() plannedOp {
	// Think time: exponential around the mean that gives Rate overall, at
	// least 20 ms (no user acts twice within a clock millisecond).
	think := max(time.Duration(p.rng.ExpFloat64()*float64(p.mean)), 20*time.Millisecond)
	c := p.cfg
	n := p.rng.IntN(c.LikeWeight + c.PairWeight + c.IncrWeight + c.UniqueWeight + c.BudgetWeight + c.BlockWeight + c.ToggleWeight + c.LateWeight)
	user := userID(p.users[p.rng.IntN(len(p.users))])
	// Toggles and late pairs come last in the mix, so a mix without them
	// draws as before.
	if rest := c.LikeWeight + c.PairWeight + c.IncrWeight + c.UniqueWeight + c.BudgetWeight + c.BlockWeight; n >= rest {
		if n < rest+c.ToggleWeight {
			return p.toggle(think, user)
		}
		return p.late(think, user)
	}
	likeKind := func(pLike float64) OpKind {
		if p.rng.Float64() < pLike {
			return OpLike
		}
		return OpUnlike
	}
	switch {
	case n < c.LikeWeight:
		return plannedOp{think: think, ops: []*Op{p.stamp(&Op{Kind: likeKind(0.6), Region: p.region(), Key: p.item(), User: user})}}
	case n < c.LikeWeight+c.PairWeight:
		item := p.item()
		i := p.rng.IntN(len(c.Regions))
		j := (i + 1 + p.rng.IntN(len(c.Regions)-1)) % len(c.Regions)
		// Half the pairs like twice (the double count reconciliation
		// removes), half disagree (last-writer-wins picks one).
		a, b := OpLike, OpLike
		if p.rng.IntN(2) == 0 {
			a, b = likeKind(0.5), likeKind(0.5)
		}
		return plannedOp{think: think, ops: []*Op{
			p.stamp(&Op{Kind: a, Region: c.Regions[i], Key: item, User: user}),
			p.stamp(&Op{Kind: b, Region: c.Regions[j], Key: item, User: user}),
		}}
	case n >= c.LikeWeight+c.PairWeight+c.IncrWeight+c.UniqueWeight+c.BudgetWeight:
		return plannedOp{think: think, ops: []*Op{p.block()}}
	case n >= c.LikeWeight+c.PairWeight+c.IncrWeight+c.UniqueWeight:
		return plannedOp{think: think, ops: p.budget()}
	case n >= c.LikeWeight+c.PairWeight+c.IncrWeight:
		return plannedOp{think: think, ops: p.uniques()}
	default:
		by := int64(1 + p.rng.IntN(5))
		if p.rng.IntN(10) < 3 {
			by = -int64(1 + p.rng.IntN(3))
		}
		ctr := counterID(p.rng.IntN(c.Counters))
		if n := p.rng.IntN(c.Counters + c.ApproxCounters); n >= c.Counters {
			ctr = approxID(n - c.Counters)
		}
		o := &Op{Kind: OpIncr, Region: p.region(), Key: ctr, By: by,
			lag: p.lag(), Events: p.rng.IntN(3) == 0}
		if p.rng.Float64() < c.RetryElsewhere {
			// The client loses the answer and fails over: it sends the
			// same key to another region, at once (before replication
			// could tell it) or a little later, even during a cut.
			i := slices.Index(c.Regions, o.Region)
			o.Retry = c.Regions[(i+1+p.rng.IntN(len(c.Regions)-1))%len(c.Regions)]
			if p.rng.IntN(2) == 0 {
				o.RetryAfter = time.Duration(100+p.rng.IntN(400)) * time.Millisecond
			}
		}
		return plannedOp{think: think, ops: []*Op{o}}
	}
}

// toggle plans a toggle under its own idempotency key and, for a share
// (Config.RetryElsewhere), a resend of the key to another region a moment
// after its answer, as a client failing over would: a duplicate there if
// the toggle has reached it, else a flip of what that region sees.
func (p *planner) toggle(think time.Duration, user string) plannedOp {
	o := &Op{Kind: OpToggle, Region: p.region(), Key: p.item(), User: user, keyed: true}
	if p.rng.Float64() >= p.cfg.RetryElsewhere {
		return plannedOp{think: think, ops: []*Op{o}}
	}
	i := slices.Index(p.cfg.Regions, o.Region)
	again := &Op{Kind: OpToggle, Region: p.cfg.Regions[(i+1+p.rng.IntN(len(p.cfg.Regions)-1))%len(p.cfg.Regions)],
		Key: o.Key, User: user, keyed: true, sameKey: true, RetryAfter: time.Duration(100+p.rng.IntN(400)) * time.Millisecond}
	return plannedOp{think: think, ops: []*Op{o, again}, sequential: true}
}

// lateLag is how long before the user's previous action a late pair's
// second action is stamped: well inside the accepted skew (5 min).
const lateLag = 30 * time.Second

// late plans a late pair: a like or unlike stamped now at one region,
// then, once it is answered, the opposite action stamped lateLag earlier
// at another region (an app's queued event arriving late), which must
// lose to the first everywhere: the client's time orders a user's
// actions.
func (p *planner) late(think time.Duration, user string) plannedOp {
	item := p.item()
	i := p.rng.IntN(len(p.cfg.Regions))
	j := (i + 1 + p.rng.IntN(len(p.cfg.Regions)-1)) % len(p.cfg.Regions)
	first, second := OpLike, OpUnlike
	if p.rng.IntN(2) == 0 {
		first, second = OpUnlike, OpLike
	}
	return plannedOp{think: think, sequential: true, ops: []*Op{
		{Kind: first, Region: p.cfg.Regions[i], Key: item, User: user, stamped: true, Late: true},
		{Kind: second, Region: p.cfg.Regions[j], Key: item, User: user, stamped: true, lag: lateLag, Late: true},
	}}
}

// maxLag bounds how long before it is sent an event happened: a client
// stamps an event with its own clock when it happens (Op.At) and sends
// it a moment later, as an app that queues its events does. Most events
// thus belong in another 1 s slot than the one they arrive in.
const maxLag = 3 * time.Second

func (p *planner) lag() time.Duration {
	return time.Duration(p.rng.Int64N(maxLag.Milliseconds())) * time.Millisecond
}

// stamp decides whether a like or unlike carries its event time: half do
// (sent by the body routes, POST /v1/likes and DELETE /v1/likes/{item}),
// half do not (PUT and DELETE /v1/likes/{item}/{user}: the replica's
// clock decides).
func (p *planner) stamp(o *Op) *Op {
	o.stamped, o.lag = p.rng.IntN(2) == 0, p.lag()
	return o
}

// eventTime is the client's time of an event that happened lag ago, in
// unix ms.
func eventTime(lag time.Duration) int64 { return time.Now().Add(-lag).UnixMilli() }

func (w *workload) worker(gen, retry context.Context, i int) {
	p := newPlanner(w.cfg, i)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		step := p.next()
		timer.Reset(step.think)
		select {
		case <-gen.Done():
			return
		case <-timer.C:
		}
		if w.gate.enter(gen) != nil {
			return
		}
		w.runStep(retry, step)
		w.gate.leave()
	}
}

func (w *workload) runStep(retry context.Context, step plannedOp) {
	var pair int64
	if len(step.ops) > 1 && !step.sequential {
		pair = w.nextPair.Add(1)
	}
	ep, link := w.episode()
	w.reroute(step.ops)
	for i, o := range step.ops {
		o.ID, o.Pair, o.Episode, o.LinkFault = w.nextID.Add(1), pair, ep, link
		switch {
		case o.sameKey:
			o.Idem = step.ops[i-1].Idem
		case o.Kind == OpIncr || o.keyed:
			o.Idem = fmt.Sprintf("op-%d", o.ID)
		}
	}
	if len(step.ops) == 1 || step.sequential {
		for _, o := range step.ops {
			if o.sameKey && !poll.Sleep(retry, o.RetryAfter) {
				return
			}
			w.exec(retry, o)
		}
		return
	}
	var wg sync.WaitGroup
	for _, o := range step.ops {
		wg.Go(func() { w.exec(retry, o) })
	}
	wg.Wait()
}

// exec runs one operation and records it.
func (w *workload) exec(retry context.Context, o *Op) {
	o.Start = w.since()
	defer func() {
		o.End = w.since()
		w.hist.add(o)
	}()
	if o.Kind == OpUnique {
		w.addUniques(retry, o)
		return
	}
	if o.Kind.budgetOp() {
		w.execBudget(retry, o)
		return
	}
	if o.Kind.blockOp() {
		w.execBlock(retry, o)
		return
	}
	if o.Kind == OpHandoff {
		w.execHandoff(retry, o)
		return
	}
	if o.Kind == OpToggle {
		w.execToggle(retry, o)
		return
	}
	if o.Kind == OpIncr {
		o.At = eventTime(o.lag) // every attempt and resend carries it
	}
	for {
		o.Attempts++
		var a answer
		c := w.client(o.Region)
		if o.Kind == OpIncr {
			a = c.incrAt(retry, o.Key, o.By, o.Idem, o.At, o.Events, w.cfg.ClientTimeout)
		} else {
			if o.stamped {
				o.At = eventTime(o.lag)
			}
			a = c.likeAt(retry, o.Key, o.User, o.Kind == OpLike, o.At, w.cfg.ClientTimeout)
		}
		if o.Attempts == 1 {
			o.Outcome, o.Reason = a.outcome, a.reason
			o.FirstAcked = a.outcome == OutcomeOK
		}
		if a.outcome == OutcomeOK {
			o.Outcome = OutcomeOK
			o.Value = a.value
			if o.Kind == OpIncr {
				w.noteAck(o.Region)
			}
		}
		if o.Kind == OpIncr {
			o.noteCount(a)
			w.retryElsewhere(retry, o)
			return
		}
		if a.outcome == OutcomeOK {
			return
		}
		if a.blocked && o.Outcome == OutcomeTimeout {
			// The user was blocked here since the first attempt, whose
			// fate is unknown: no retry can settle it now (blocks.go).
			o.BlockedRetry = true
			return
		}
		// A failed first attempt was not applied. A like or unlike that may
		// have been applied is retried at the same region. The client
		// says its timeout (api.TimeoutHeader), so a first attempt that
		// has not reached a writer by then never will (one forwarded to
		// a stopped holder, say), and one that did was stamped before
		// the retry: once acknowledged, the retry is the user's latest
		// action whatever happened to the first.
		if o.Outcome == OutcomeFailed {
			return
		}
		if !poll.Sleep(retry, 200*time.Millisecond) {
			return // stays a timeout: unresolved
		}
	}
}

// execToggle sends a toggle until a region answers, as a like: a
// timed-out one is sent again, same key, to the same region (a duplicate
// there if the first applied). Once acknowledged, its key is sent there
// once more, as a client that lost the answer would: it must answer
// duplicate:true and the same state (unless the run is sharded: another
// copy of the shard may not have heard of it yet).
func (w *workload) execToggle(retry context.Context, o *Op) {
	for {
		o.Attempts++
		a := w.client(o.Region).toggle(retry, o.Key, o.User, o.Idem, w.cfg.ClientTimeout)
		if o.Attempts == 1 {
			o.Outcome, o.Reason = a.outcome, a.reason
			o.FirstAcked = a.outcome == OutcomeOK
		}
		if a.outcome == OutcomeOK {
			o.Outcome, o.Value, o.Liked = OutcomeOK, a.value, a.liked
			break
		}
		if a.blocked && o.Outcome == OutcomeTimeout {
			o.BlockedRetry = true
			return
		}
		if o.Outcome == OutcomeFailed || !poll.Sleep(retry, 200*time.Millisecond) {
			return
		}
	}
	if w.cfg.sharded() {
		return
	}
	a := w.client(o.Region).toggle(retry, o.Key, o.User, o.Idem, w.cfg.ClientTimeout)
	o.Attempts++
	o.ResendOutcome, o.ResendDuplicate, o.ResendLiked = a.outcome, a.duplicate, a.liked
}

// retryElsewhere sends an increment's key again to the op's Retry region,
// as a client that lost the first answer and failed over would: once, at
// once, whatever the first answer was. Sent while regions are cut apart,
// both may apply it; it must still count once. A retry answered ok makes
// the op acknowledged; one with no answer leaves it to resolve.
func (w *workload) retryElsewhere(ctx context.Context, o *Op) {
	if o.Retry == "" || !poll.Sleep(ctx, o.RetryAfter) {
		return
	}
	o.Attempts++
	a := w.client(o.Retry).incrAt(ctx, o.Key, o.By, o.Idem, o.At, o.Events, w.cfg.ClientTimeout)
	o.RetryOutcome, o.RetryDuplicate = a.outcome, a.duplicate
	o.noteCount(a)
	switch {
	case a.outcome == OutcomeOK:
		o.Outcome, o.Value = OutcomeOK, a.value
	case a.outcome == OutcomeTimeout && o.Outcome == OutcomeFailed:
		o.Outcome = OutcomeTimeout // the first did not apply; the retry may have
	}
}

// resolve settles the timed-out increments sent to region ("" for all):
// each is resent with the same idempotency key to the region it was sent
// to until that answers. duplicate:true means an attempt had been applied
// (at that region or, replicated, at the other); otherwise the resend
// applied it. Either way it now counts exactly once. A key applied by a
// region and not yet replicated is lost with the region's data dir, so
// this must run before a region is wiped. It returns how many remain
// unresolved when ctx ends.
//
// The resend carries the increment's event time, unless the replica
// refuses it as too old (400 bad_time: a timed-out increment of a long
// run's first minutes). It then goes as an event of now, which a replica
// that had applied the key answers duplicate:true as before; one that
// applies it books it now (Op.ResolveAt), and the model knows it is in one
// of the two slots (windowModel).
func (w *workload) resolve(ctx context.Context, region string) int {
	left := 0
	for _, o := range w.hist.unresolved(region) {
		at := o.At
		for {
			a := w.client(o.Region).incrAt(ctx, o.Key, o.By, o.Idem, at, o.Events, w.cfg.ClientTimeout)
			if a.outcome == OutcomeOK {
				how := ResolvedApplied
				if a.duplicate {
					how = ResolvedDuplicate
				}
				w.hist.resolve(o, how, at, a)
				break
			}
			if a.badTime && at == o.At {
				at = eventTime(0)
				continue
			}
			if !poll.Sleep(ctx, 200*time.Millisecond) {
				left++
				break
			}
		}
	}
	return left
}

// gate lets the fault executor quiesce the workload: pause waits until no
// worker is inside an operation and keeps new ones out until resume.
type gate struct {
	mu      sync.Mutex // protects the fields below
	paused  bool
	busy    int
	changed chan struct{} // closed and replaced at every change
}

func newGate() *gate { return &gate{changed: make(chan struct{})} }

func (g *gate) signalLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

// enter waits until the gate is open and counts the caller in.
func (g *gate) enter(ctx context.Context) error {
	for {
		g.mu.Lock()
		if !g.paused {
			g.busy++
			g.mu.Unlock()
			return nil
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *gate) leave() {
	g.mu.Lock()
	g.busy--
	g.signalLocked()
	g.mu.Unlock()
}

// pause closes the gate and waits until every operation in progress is
// done. On error the gate is open again.
func (g *gate) pause(ctx context.Context) error {
	g.mu.Lock()
	g.paused = true
	for g.busy > 0 {
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			g.resume()
			return errors.New("workload did not quiesce: " + ctx.Err().Error())
		}
		g.mu.Lock()
	}
	g.mu.Unlock()
	return nil
}

func (g *gate) resume() {
	g.mu.Lock()
	g.paused = false
	g.signalLocked()
	g.mu.Unlock()
}

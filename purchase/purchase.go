// Package purchase carries a cashback whose three balances (the pool,
// the merchant and the user) lie on shards that no one replica of a
// sharded region holds together, so that it never overdraws the pool or
// the merchant and never loses or doubles money, whatever fails and
// wherever a process is killed.
//
// A cashback whose keys one set of holders holds goes to one of them and
// commits there at once (region.OpCashback). Any other runs as steps,
// each an idempotent operation under the purchase's idempotency key k at
// a holder of its key, in this order:
//
//  1. the intent is written to this replica's journal, synced;
//  2. pool: spend the amount from the pool under k. Refused: the
//     purchase is refused, nothing was spent anywhere;
//  3. merchant: spend it from the merchant under k. Refused: fence the
//     merchant's k (region.OpFence), a compare-and-set at the merchant's
//     holder: if a spend under k was applied after all (another run of
//     the same purchase), go on; else the purchase is called off: the
//     user's k and the pool's k are fenced too (region.OpCallOffCredit,
//     region.OpCallOff), and the purchase refused. A fence beats every
//     application of its key when records merge, and every replica gives
//     back what it applied under it, so a run of the same purchase that
//     paid in another region is undone there too, by refunds only;
//  4. user: add the amount to the user's counter under k;
//  5. the intent is deleted.
//
// Every step may be repeated: a spend, fence or increment whose key was
// applied answers duplicate. So a run that stops anywhere (a
// timeout, no holder up, a kill -9) is finished by running it again from
// the start: by the client's retry at any replica, or by this replica's
// recovery, which runs every intent left in its journal. A refusal is
// only acted on when no earlier attempt of the same purchase can still
// apply (Config.Timeout after it was sent: a holder drops a forwarded
// request past its deadline), so a late attempt can never apply behind a
// decision. The decision to call a purchase off is made in one place in
// a region, the merchant's record under k at its first holder, so every
// run of the purchase there comes to the same end; across regions, a
// purchase called off in any ends called off in all.
package purchase

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/shard"
)

// Router runs region operations, all of keys on shard s, at a holder of
// s and returns their results in order. With primary, only at the holder
// every replica of the region would choose first (shard.Map.Preferred),
// so that operations that decide (a spend and the fence of a merchant's
// key) meet in one writer: a second holder of the shard may not have
// heard of the first's records yet. An error means there is no answer:
// the operations may or may not have applied (the coordinator treats
// every such error alike).
type Router interface {
	Apply(ctx context.Context, s int, ops []region.Op, primary bool) ([]region.Result, error)
}

// Journal is where a replica keeps its intents: durably (a put or delete
// is on disk when it returns), and its own (never replicated).
// storage.Store is one.
type Journal interface {
	PutIntent(id string, v []byte) error
	Intent(id string) ([]byte, bool, error)
	DeleteIntent(id string) error
	Intents(fn func(id string, v []byte) bool) error
}

// Step names a point of a run, for Config.AtStep.
type Step uint8

// The steps of a run, in order (StepFence only when the merchant
// refuses, StepCallOff only when the purchase is called off).
const (
	StepJournaled Step = iota + 1 // the intent is on disk
	StepPool
	StepMerchant
	StepFence
	StepCallOff
	StepUser
	StepDone // every step answered; the intent is deleted next
)

func (s Step) String() string {
	switch s {
	case StepJournaled:
		return "journaled"
	case StepPool:
		return "pool"
	case StepMerchant:
		return "merchant"
	case StepFence:
		return "fence"
	case StepCallOff:
		return "call_off"
	case StepUser:
		return "user"
	case StepDone:
		return "done"
	}
	return fmt.Sprintf("step(%d)", uint8(s))
}

// Config configures a Coordinator.
type Config struct {
	// Router and Journal are required; Map is the region's shard map in
	// force (required).
	Router  Router
	Journal Journal
	Map     func() shard.Map
	// Timeout is the longest a forwarded operation may still apply after
	// it was sent (the region's request timeout). Default 5 s.
	Timeout time.Duration
	// RetryEvery is how often recovery runs the journal's intents. Default
	// Timeout, at most 5 s.
	RetryEvery time.Duration
	Logger     hclog.Logger
	// Registerer takes the coordinator's metrics (nil: none).
	Registerer prometheus.Registerer
	// Now is the clock that spaces a purchase's attempts. Default
	// time.Now.
	Now func() time.Time
	// AtStep, if set, is called before each step of a run; an error stops
	// the run there, leaving everything as a crash at that point would
	// (tests and the chaos build's failpoints).
	AtStep func(id string, s Step) error
}

// ErrInProgress is what Cashback returns for a purchase this replica is
// running, or whose last attempt may still apply somewhere: nothing new
// was sent; retry after Config.Timeout.
var ErrInProgress = errors.New("purchase: this purchase is in progress here; retry it shortly with the same key")

// ErrUnfinished wraps what Cashback returns for a purchase whose steps
// did not all answer: it may have spent; a retry with the same key, or
// recovery, finishes it.
var ErrUnfinished = errors.New("purchase: unfinished")

// Coordinator runs cross-shard cashbacks and finishes those its journal
// holds.
type Coordinator struct {
	cfg Config
	log hclog.Logger
	mu  sync.Mutex
	// busy: purchases being run now. quiet: purchases an attempt of which
	// may apply until then (a refusal is not acted on before).
	busy  map[string]bool
	quiet map[string]time.Time
	// restarted is when this coordinator started: an intent found in the
	// journal may have had an attempt in flight until restarted+Timeout.
	restarted time.Time
	outcomes  *prometheus.CounterVec

	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// New returns a Coordinator; Start starts its recovery.
func New(cfg Config) (*Coordinator, error) {
	if cfg.Router == nil || cfg.Journal == nil || cfg.Map == nil {
		return nil, errors.New("purchase: Router, Journal and Map are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.RetryEvery <= 0 {
		cfg.RetryEvery = min(5*time.Second, cfg.Timeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Coordinator{cfg: cfg, log: cfg.Logger.Named("purchase"), busy: map[string]bool{}, quiet: map[string]time.Time{},
		restarted: cfg.Now(),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tally_cashback_cross_shard_total",
			Help: "Cashbacks carried across shards, by outcome: done, refused, called_off (refused after the pool's spend, which was given back) or unfinished (left to recovery)."},
			[]string{"outcome"})}
	if cfg.Registerer != nil {
		intents := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tally_cashback_intents",
			Help: "Cross-shard cashbacks in this replica's journal: started here and not yet finished or called off."},
			func() float64 {
				n := 0
				_ = cfg.Journal.Intents(func(string, []byte) bool { n++; return true })
				return float64(n)
			})
		for _, col := range []prometheus.Collector{c.outcomes, intents} {
			if err := cfg.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("purchase: register metrics: %w", err)
			}
		}
	}
	c.ctx, c.stop = context.WithCancel(context.Background())
	return c, nil
}

// Start runs recovery every Config.RetryEvery until Close.
func (c *Coordinator) Start() {
	c.wg.Go(func() {
		t := time.NewTicker(c.cfg.RetryEvery)
		defer t.Stop()
		for {
			select {
			case <-c.ctx.Done():
				return
			case <-t.C:
				if _, err := c.Recover(c.ctx); err != nil && c.ctx.Err() == nil {
					c.log.Warn("recover purchases", "error", err)
				}
			}
		}
	})
}

// Close stops recovery and waits for it.
func (c *Coordinator) Close() {
	c.stop()
	c.wg.Wait()
}

// intent is a purchase as the journal keeps it.
type intent struct {
	Pool     string `json:"pool"`
	Merchant string `json:"merchant"`
	User     string `json:"user"`
	Idem     string `json:"idem"`
	Amount   int64  `json:"amount"`
	AtMs     int64  `json:"at_ms,omitempty"`
}

func intentOf(op *region.Op) intent {
	return intent{Pool: op.Item, Merchant: op.Merchant, User: op.User, Idem: op.IdemKey, Amount: op.By, AtMs: op.At}
}

func (in *intent) id() string { return in.Pool + "/" + in.Idem }

// Cashback runs op, a checked region.OpCashback, wherever its keys are,
// and returns its result as the one replica holding all three would. An
// error means the purchase is unfinished (ErrInProgress, or no answer
// from a holder): it may have spent, and it is finished by a retry with
// the same key or by recovery.
func (c *Coordinator) Cashback(ctx context.Context, op region.Op) (region.Result, error) {
	if op.Kind != region.OpCashback {
		return region.Result{}, fmt.Errorf("%w: not a cashback", region.ErrInvalid)
	}
	if err := op.Validate(); err != nil {
		return region.Result{}, err
	}
	sp := shard.Of(op.Item)
	if c.cfg.Map().SameHolders(sp, shard.Of(op.Merchant), shard.Of(op.User)) {
		res, err := c.cfg.Router.Apply(ctx, sp, []region.Op{op}, false)
		if err != nil {
			return region.Result{}, err
		}
		return res[0], res[0].Err
	}
	in := intentOf(&op)
	id := in.id()
	if err := c.claim(id); err != nil {
		return region.Result{}, err
	}
	defer c.release(id)
	if b, ok, err := c.cfg.Journal.Intent(id); err != nil {
		return region.Result{}, fmt.Errorf("purchase %s: %w", id, err)
	} else if ok {
		var was intent
		if json.Unmarshal(b, &was) == nil && was != in {
			return region.Result{}, fmt.Errorf("%w: purchase %q is in progress here with another request (amount %d, merchant %q, user %q)",
				region.ErrIdempotencyMismatch, in.Idem, was.Amount, was.Merchant, was.User)
		}
	}
	b, err := json.Marshal(in)
	if err != nil {
		return region.Result{}, fmt.Errorf("purchase %s: %w", id, err)
	}
	if err := c.cfg.Journal.PutIntent(id, b); err != nil {
		return region.Result{}, fmt.Errorf("purchase %s: journal: %w", id, err)
	}
	return c.finish(ctx, id, in)
}

// claim marks purchase id as run by the caller, or says why it may not
// be run now.
func (c *Coordinator) claim(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	if c.busy[id] {
		return ErrInProgress
	}
	if until, ok := c.quiet[id]; ok && now.Before(until) {
		return ErrInProgress
	}
	delete(c.quiet, id)
	c.busy[id] = true
	return nil
}

func (c *Coordinator) release(id string) {
	c.mu.Lock()
	delete(c.busy, id)
	c.mu.Unlock()
}

// finish runs the purchase's steps; when they all answered, it deletes
// the intent. Otherwise the intent stays for the next run, which waits
// until no attempt of this one can still apply.
func (c *Coordinator) finish(ctx context.Context, id string, in intent) (region.Result, error) {
	res, outcome, err := c.run(ctx, id, in)
	if err == nil && c.cfg.AtStep != nil {
		err = c.cfg.AtStep(id, StepDone)
	}
	if err == nil {
		err = c.cfg.Journal.DeleteIntent(id)
	}
	if err != nil {
		c.mu.Lock()
		c.quiet[id] = c.cfg.Now().Add(c.cfg.Timeout)
		c.mu.Unlock()
		c.outcomes.WithLabelValues("unfinished").Inc()
		return region.Result{}, fmt.Errorf("%w: purchase %q (it finishes on a retry with the same key, or by itself): %w", ErrUnfinished, in.Idem, err)
	}
	c.outcomes.WithLabelValues(outcome).Inc()
	return res, res.Err
}

// refusal reports whether err is a budget's refusal: nothing was spent,
// and the budget could not cover the spend as the holder saw it.
func refusal(err error) bool {
	return errors.Is(err, region.ErrBudgetExhausted) || errors.Is(err, region.ErrRightsElsewhere)
}

// A spend refused with rights elsewhere is tried rightsTries more times,
// rightsWait apart, before the refusal stands.
const (
	rightsTries = 20
	rightsWait  = 25 * time.Millisecond
)

// run runs every step of in. A nil error means every step answered: res
// is the purchase's result (res.Err its refusal), outcome its metric's
// label.
func (c *Coordinator) run(ctx context.Context, id string, in intent) (res region.Result, outcome string, err error) {
	step := func(s Step, op region.Op) (region.Result, error) {
		// The merchant's spend and fence at its shard's first holder
		// only: the fence decides there whether the spend applied.
		primary := s == StepMerchant || s == StepFence
		for try := 0; ; try++ {
			if c.cfg.AtStep != nil {
				if err := c.cfg.AtStep(id, s); err != nil {
					return region.Result{}, err
				}
			}
			rs, err := c.cfg.Router.Apply(ctx, shard.Of(op.Item), []region.Op{op}, primary)
			if err != nil {
				return region.Result{}, fmt.Errorf("%s step: %w", s, err)
			}
			// Rights to a budget held by another replica are asked for
			// by the refusal and come within milliseconds: a spend
			// refused for them is tried again for a while before the
			// purchase is refused (nothing was spent by the refusal).
			if !errors.Is(rs[0].Err, region.ErrRightsElsewhere) || try >= rightsTries {
				return rs[0], nil
			}
			select {
			case <-ctx.Done():
				return rs[0], nil
			case <-time.After(rightsWait):
			}
		}
	}
	if c.cfg.AtStep != nil {
		if err := c.cfg.AtStep(id, StepJournaled); err != nil {
			return region.Result{}, "", err
		}
	}
	spend := func(key string) region.Op {
		return region.Op{Kind: region.OpSpend, Item: key, By: in.Amount, IdemKey: in.Idem, At: in.AtMs}
	}
	poolRes, err := step(StepPool, spend(in.Pool))
	if err != nil {
		return region.Result{}, "", err
	}
	if poolRes.Err != nil {
		// Refused, called off already (fenced), or the key used for
		// another spend: nothing spent by this run.
		outcome := "refused"
		if errors.Is(poolRes.Err, region.ErrFenced) {
			outcome = "called_off"
		}
		return region.Result{Err: poolRes.Err, Value: poolRes.Value, Rights: poolRes.Rights}, outcome, nil
	}
	merchant, err := step(StepMerchant, spend(in.Merchant))
	if err != nil {
		return region.Result{}, "", err
	}
	fenced := errors.Is(merchant.Err, region.ErrFenced) // by an earlier run
	if merchant.Err != nil && refusal(merchant.Err) {
		fence, err := step(StepFence, region.Op{Kind: region.OpFence, Item: in.Merchant, By: in.Amount, IdemKey: in.Idem})
		if err != nil {
			return region.Result{}, "", err
		}
		switch {
		case fence.Err != nil:
			return region.Result{}, "", fmt.Errorf("fence the merchant's key: %w", fence.Err)
		case fence.Duplicate:
			merchant = fence // spent by another run of this purchase: go on
		default:
			fenced = true // this run's fence: the purchase is called off
		}
	}
	// callOff calls the purchase off at the balances named, its key on
	// each fenced whatever was applied under it (region.OpCallOff,
	// OpCallOffCredit), and answers cause. A fence beats every
	// application of its key when the records merge, so another run of
	// this purchase that paid somewhere (another region, before the two
	// heard of each other) is undone there too: a purchase called off
	// anywhere ends called off everywhere, and undoing it only ever gives
	// back (a refund, a credit taken back), never spends.
	callOff := func(cause region.Result, ops ...region.Op) (region.Result, string, error) {
		for _, op := range ops {
			r, err := step(StepCallOff, op)
			if err != nil {
				return region.Result{}, "", err
			}
			if r.Err != nil {
				return region.Result{}, "", fmt.Errorf("call off %q: %w", op.Item, r.Err)
			}
		}
		c.log.Info("cashback called off", "purchase", in.Idem, "pool", in.Pool, "merchant", in.Merchant, "cause", cause.Err)
		return cause, "called_off", nil
	}
	off := func(kind region.OpKind, key string) region.Op {
		return region.Op{Kind: kind, Item: key, By: in.Amount, IdemKey: in.Idem, At: in.AtMs}
	}
	pool, user, merchantKey := off(region.OpCallOff, in.Pool), off(region.OpCallOffCredit, in.User), off(region.OpCallOff, in.Merchant)
	if merchant.Err != nil {
		cause := region.Result{Err: merchant.Err, Refused: in.Merchant, Value: merchant.Value, Rights: merchant.Rights}
		if fenced {
			// Fenced, by this run or an earlier one: the purchase is
			// called off, and a run elsewhere may have credited the user.
			return callOff(cause, user, pool)
		}
		// The key used for another spend of the merchant: only the
		// pool's spend goes back.
		return callOff(cause, pool)
	}
	credit, err := step(StepUser, region.Op{Kind: region.OpIncr, Item: in.User, By: in.Amount, IdemKey: in.Idem, At: in.AtMs})
	if err != nil {
		return region.Result{}, "", err
	}
	if credit.Err != nil {
		// Called off by another run (the user's key fenced), or the key
		// used for another increment: nothing can be credited under it,
		// so both spends go back.
		return callOff(region.Result{Err: credit.Err}, pool, merchantKey)
	}
	return region.Result{Value: poolRes.Value, Rights: poolRes.Rights, Merchant: merchant.Value, UserValue: credit.Value,
		Duplicate: credit.Duplicate}, "done", nil
}

// Recover runs every purchase of the journal that no run has in hand and
// no earlier attempt may still apply to, and returns how many it
// finished.
func (c *Coordinator) Recover(ctx context.Context) (int, error) {
	type pending struct {
		id string
		in intent
	}
	var todo []pending
	var bad error
	err := c.cfg.Journal.Intents(func(id string, v []byte) bool {
		var in intent
		if err := json.Unmarshal(v, &in); err != nil || in.id() != id {
			bad = errors.Join(bad, fmt.Errorf("intent %q unreadable: %v", id, err))
			return true
		}
		todo = append(todo, pending{id, in})
		return true
	})
	if err != nil {
		return 0, err
	}
	done := 0
	for _, p := range todo {
		if ctx.Err() != nil {
			break
		}
		if c.cfg.Now().Before(c.restarted.Add(c.cfg.Timeout)) {
			break // a run of the last life may have an attempt in flight
		}
		if c.claim(p.id) != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		res, err := c.finish(rctx, p.id, p.in)
		cancel()
		c.release(p.id)
		switch {
		case err == nil || res.Err != nil:
			done++
			c.log.Info("finished a purchase from the journal", "purchase", p.in.Idem, "refused", res.Err)
		default:
			bad = errors.Join(bad, err)
		}
	}
	return done, bad
}

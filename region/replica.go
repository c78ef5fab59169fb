package region

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Metadata keys this package keeps in the store.
const (
	metaReplica = "replica" // this data dir's replica id, checked on open
	metaRegion  = "region"  // its region
	// metaAccepted is written the first time the replica accepts writes.
	// Until then the store counts as fresh, also across restarts: a wiped
	// replica killed again halfway through recovering from its peers must
	// not come back as "has data" and start counting from partial state.
	metaAccepted = "accepted-writes"
	metaHLC      = "hlc-max" // the largest HLC issued or observed, as committed
	// metaHandoff is the replica a handoff of budget rights goes to, ""
	// or absent if none is on (handoff.go).
	metaHandoff = "budget-handoff"
	// metaStateLost is written, for good, in the first batch in which
	// recovery took back from a peer state of this replica's own that
	// the store did not hold: the data directory was wiped, restored
	// from an old copy, or lost acknowledged writes (durability none).
	// What the lost state recorded of the actions accepted then (the
	// like history) is gone, so the history no longer covers this
	// replica's whole life (StateLost).
	metaStateLost = "own-state-lost"
)

// The largest HLC this replica has issued is stored (metaHLC) in every
// group commit that issued one, atomically with the records that carry it.
// On restart the clock starts there, so a wall clock that went backwards
// cannot issue a stamp below one already durable. An earlier design kept a
// ceiling some seconds *ahead* of the clock; after a restart that pushed
// every local action into the future, where it beat later actions in other
// regions (found by the chaos suite).

// maxClockDriftMs is how far ahead of our wall clock a remote HLC may be and
// still advance our clock.
const maxClockDriftMs = 60_000

// Replica is one tally replica. All methods are safe for concurrent use.
type Replica struct {
	cfg     Config
	self    string
	store   *storage.Store
	log     hclog.Logger
	metrics *metrics
	cache   *cache
	fresh   bool // the store had no state when opened

	reqs    chan *request
	closeMu sync.RWMutex // protects closed against concurrent submit
	closed  bool
	// stopped ends when Close begins: the writer and the idempotency
	// sweeper stop, and a sweep waiting on the writer gives up.
	stopped    context.Context
	stop       context.CancelFunc
	wg         sync.WaitGroup
	accepting  atomic.Bool
	shut       atomic.Bool // set by Close, for lock-free readers
	acceptOnce sync.Once
	failure    atomic.Pointer[error]
	clockAhead atomic.Int64 // ms the stored clock was ahead of the wall clock at open, if past the bound
	stateLost  atomic.Bool  // metaStateLost is stored

	windows      windowRules // Config.Windows, compiled
	uniqueLevels []level     // Config.Windows.Uniques, compiled
	ownPages     *pageCache  // owned by the writer goroutine (uniques.go)
	trends       *trends     // trending sketches (trending.go)
	approx       approxRules // Config.Approx, compiled

	umu          sync.RWMutex // protects unreconciled
	unreconciled map[vkey]int // vector -> records counting in it whose excess is not zero

	// Owned by the writer goroutine (and New, before it starts).
	clock     crdt.Clock
	pclock    *physClock   // safe for concurrent use
	hlcStored crdt.HLC     // largest HLC persisted in metaHLC
	nums      []*numbering // one per Config.Sequences
	rng       *rand.Rand   // approximate counters' coin flips (Config.Seed)

	// asked: when this replica last asked its peers for each budget's
	// rights (budgets.go).
	asked map[string]int64
	// gave: when this replica last gave each asker rights to each budget;
	// spends: what it spent of each budget lately (budgets.go).
	gave   map[giveKey]int64
	spends map[string]recentSpends
	// handoff: the replica this one hands its budget rights to, if any
	// (handoff.go).
	handoff atomic.Pointer[string]
	// handoffMu serializes starting, cancelling and resuming handoffs.
	handoffMu sync.Mutex
	// resumeHandoff: the handoff found in the store on open, to turn on
	// again once writes are accepted (resumeHandoffWhenReady), unless an
	// admin starts or cancels one first.
	resumeHandoff atomic.Pointer[string]
	// accepted is closed once local writes are accepted.
	accepted chan struct{}
	// handedOff: rights moved by handoffs in all (the writer adds).
	handedOff atomic.Int64

	kick chan struct{} // wakes the writer to number queued likes
	// reconcileKick asks the writer for the reconciliation pass that
	// recovery put off (see txn.mergeRecord).
	reconcileKick chan struct{}
}

// request is one submission to the writer: local ops or remote merges.
type request struct {
	ops []Op
	res []Result
	// ctx is the caller's context of local ops (Do): ops whose caller
	// gave up before the writer takes them are not applied (see commit).
	ctx     context.Context
	vmerges []VectorMerge
	rmerges []RecordMerge
	smerges []SketchMerge
	// gives are peers' asks for budget rights (GiveRights).
	gives []RightsGive
	// handoff lists budgets whose rights to hand off now (HandOffRights).
	handoff []string
	// handoffTo lists budgets whose rights go to a given replica
	// (HandOffShards).
	handoffTo []keyTo
	// setHandoff, if not nil, is the handoff target to record in the
	// store ("": none).
	setHandoff *string
	// ids counts the unique ids of the ops (OpUniques), which weigh on
	// the batch like ops.
	ids int
	// expire lists keyed records to delete if still expired by the rule;
	// expired is how many the writer deleted.
	expire  []rkey
	expired int
	// expireWin lists slots to delete if still expired by the
	// rule (expired counts them too).
	expireWin []storage.WindowRef
	// reconcileAll: reconcile every marked record this replica is the
	// origin of (the pass recovery put off).
	reconcileAll bool
	// finals: blocks of numbers whose ranks are known (Finalize).
	finals   []FinalBlock
	finalSeq string
	// drop: shards whose data to delete (DropShards), alone in a commit;
	// dropped counts the entries deleted.
	drop    []int
	dropped int
	// applyErr: a part of the request failed before the commit; the
	// request fails with it (the commit still happens for the others).
	applyErr error
	err      error // whole-request failure (commit failed, closed)
	done     chan struct{}
}

// abandoned reports whether q's ops are local ones whose caller has given
// up on them.
func (q *request) abandoned() bool { return q.ctx != nil && q.ctx.Err() != nil }

func (q *request) size() int {
	return len(q.ops) + q.ids + len(q.gives) + len(q.handoff) + len(q.handoffTo) + len(q.vmerges) + len(q.rmerges) + len(q.smerges) + len(q.expire) + len(q.expireWin) + len(q.finals)
}

// New opens a replica on cfg.Store and starts its writer.
func New(cfg Config) (*Replica, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:           cfg,
		self:          cfg.Replica,
		store:         cfg.Store,
		log:           cfg.Logger.Named("replica"),
		metrics:       newMetrics(cfg.Registerer),
		cache:         newCache(cfg.CacheItems),
		reqs:          make(chan *request, cfg.QueueDepth),
		kick:          make(chan struct{}, 1),
		reconcileKick: make(chan struct{}, 1),
		accepted:      make(chan struct{}),
		unreconciled:  make(map[vkey]int),
		asked:         make(map[string]int64),
		gave:          make(map[giveKey]int64),
		spends:        make(map[string]recentSpends),
		windows:       compileWindows(cfg.Windows),
		uniqueLevels:  compileLevels(cfg.Windows.Uniques),
		ownPages:      newPageCache(ownPageCacheBytes),
		approx:        compileApprox(cfg.Approx),
		rng:           newRand(cfg.Seed),
		trends:        newTrends(cfg.Windows.TrendingCapacity),
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(stoppedCollector{r}); err != nil {
			return nil, fmt.Errorf("register replica metrics: %w", err)
		}
	}
	mono := cfg.Monotonic
	if r.chaosClockFollowsWall() { // never outside a chaos build
		mono = nil
		r.log.Warn("chaos build: deliberate bug on", "bug", BugClockFollowsWall)
	}
	r.pclock = newPhysClock(cfg.Now, mono, r.log, r.metrics.clockSteps)
	if err := r.load(); err != nil {
		return nil, err
	}
	if n, err := r.store.ConvertIdempotency(r.self); err != nil {
		return nil, err
	} else if n > 0 {
		r.log.Info("idempotency keys converted to replicated keyed records", "keys", n)
	}
	if !cfg.LikeLists {
		if err := r.store.DropLikeIndex(); err != nil {
			return nil, err
		}
	} else if n, err := r.store.BuildLikeIndex(); err != nil {
		return nil, err
	} else if n > 0 {
		r.log.Info("like index built from the stored records", "liked_pairs", n)
	}
	if err := r.loadNumbering(); err != nil {
		return nil, err
	}
	if err := r.rebuildTrends(); err != nil {
		return nil, err
	}
	if !cfg.HoldWrites {
		r.AcceptWrites()
		if err := r.Err(); err != nil {
			return nil, err
		}
	}
	r.stopped, r.stop = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.run()
	if cfg.IdempotencyTTL > 0 {
		r.wg.Add(1)
		go r.sweepIdempotency()
	}
	if r.resumeHandoff.Load() != nil {
		r.wg.Add(1)
		go r.resumeHandoffWhenReady()
	}
	if len(r.windows.rules) > 0 {
		r.wg.Add(1)
		go r.sweepWindows()
	}
	return r, nil
}

// load checks the store belongs to this replica and restores clock and
// reconciliation state.
func (r *Replica) load() error {
	id, ok, err := r.store.Meta(metaReplica)
	if err != nil {
		return fmt.Errorf("load replica: %w", err)
	}
	if ok && string(id) != r.self {
		return fmt.Errorf("load replica: data belongs to replica %q, not %q", id, r.self)
	}
	if ceil, ok, err := r.store.Meta(metaHLC); err != nil {
		return fmt.Errorf("load replica: %w", err)
	} else if ok {
		e, err := crdt.DecodePN(ceil)
		if err != nil {
			return fmt.Errorf("load replica hlc: %w", err)
		}
		stored := crdt.HLC(e.P)
		r.hlcStored = stored
		if ahead := stored.WallMs() - r.pclock.NowMs(); ahead > maxClockDriftMs {
			// The wall clock went back a long way, or ran ahead for a
			// while and wrote that into the store. Following the stored
			// clock would stamp every action in the future, where it
			// beats later actions everywhere until the real time passes
			// it. New stamps follow the wall clock instead; an action on
			// a record stamped ahead is stamped just above that record
			// (txn.applyLike), so it still wins and is never reverted.
			r.log.Error("stored clock is far ahead of the wall clock: check this host's time; new stamps follow the wall clock",
				"stored", stored, "ahead", time.Duration(ahead)*time.Millisecond)
			r.clockAhead.Store(ahead)
		} else {
			r.clock.Observe(stored)
		}
	}
	err = r.store.Markers(func(kind storage.Kind, a, b string) bool {
		r.unreconciled[rkey{kind, a, b}.vector()]++
		return true
	})
	if err != nil {
		return fmt.Errorf("load replica: %w", err)
	}
	_, accepted, err := r.store.Meta(metaAccepted)
	if err != nil {
		return fmt.Errorf("load replica: %w", err)
	}
	if to, ok, err := r.store.Meta(metaHandoff); err != nil {
		return fmt.Errorf("load replica: %w", err)
	} else if ok && len(to) > 0 {
		if err := r.loadHandoff(string(to)); err != nil {
			return fmt.Errorf("load replica: %w", err)
		}
	}
	r.fresh = !accepted
	if at, ok := r.restoredFrom(); ok && r.fresh {
		r.log.Warn("starting from a backup: writes are held until every peer has been synced from", "backup_taken", at)
	}
	if _, lost, err := r.store.Meta(metaStateLost); err != nil {
		return fmt.Errorf("load replica: %w", err)
	} else if lost {
		r.stateLost.Store(true)
	}
	if !ok {
		b := r.store.NewBatch()
		defer b.Close()
		b.PutMeta(metaReplica, []byte(r.self))
		b.PutMeta(metaRegion, []byte(r.cfg.Region))
		if err := b.Commit(); err != nil {
			return fmt.Errorf("load replica: %w", err)
		}
	}
	return nil
}

// ClockAheadMs is how far the clock stored in the data directory was
// ahead of the wall clock when the replica opened, if more than the drift
// bound (else 0): the host's time is wrong, or was.
func (r *Replica) ClockAheadMs() int64 { return r.clockAhead.Load() }

// Now is the replica's clock: the wall clock with steps taken out and
// corrected toward the peers' (see physClock). Replication stamps its
// messages with it.
func (r *Replica) Now() time.Time { return time.UnixMilli(r.pclock.NowMs()) }

// AdjustClock moves the replica's clock toward its peers' by their median
// offset from it (positive: theirs are ahead), if that is more than 2 s:
// at most 10 s at a time, and never more than a minute past the replica's
// own readings of the time, however many peers say so (physClock). It
// returns how far it moved, in ms.
func (r *Replica) AdjustClock(medianMs int64) int64 {
	if r.chaosClockFollowsWall() {
		return 0
	}
	if moved, bug := r.chaosAdjustClock(medianMs); bug { // never outside a chaos build
		return moved
	}
	return r.pclock.Adjust(medianMs)
}

// ClockCorrectionMs is how far the replica's clock is from the wall clock.
func (r *Replica) ClockCorrectionMs() int64 { return r.pclock.CorrectionMs() }

// ID is the replica id.
func (r *Replica) ID() string { return r.self }

// Region is the replica's region.
func (r *Replica) Region() string { return r.cfg.Region }

// Durability is the store's commit durability.
func (r *Replica) Durability() storage.Durability { return r.store.Durability() }

// Fresh reports whether the store had never accepted writes when the
// replica opened: a new replica, one whose data was lost, or one whose
// recovery from peers was interrupted before it finished.
func (r *Replica) Fresh() bool { return r.fresh }

// StateLost reports whether this replica's data directory once had to
// take back from its peers state of its own it did not hold: it was
// wiped, restored from an old copy, or lost acknowledged writes. The
// actions it accepted before then are not all in its like history, for
// good: its history does not cover its whole life.
func (r *Replica) StateLost() bool { return r.stateLost.Load() }

// AcceptWrites lets the replica acknowledge writes (see Config.HoldWrites).
// The first time, it durably records that the store has accepted writes, so
// later restarts do not count as fresh.
func (r *Replica) AcceptWrites() {
	r.acceptOnce.Do(func() {
		b := r.store.NewBatch()
		defer b.Close()
		b.PutMeta(metaAccepted, []byte{1})
		b.DeleteMeta(metaRestored) // recovered: no longer a backup's state
		if err := b.Commit(); err != nil {
			err = fmt.Errorf("%w: record first accepted write: %w", ErrFailed, err)
			r.failure.CompareAndSwap(nil, &err)
			return
		}
		r.accepting.Store(true)
		close(r.accepted)
		select {
		case r.reconcileKick <- struct{}{}:
		default:
		}
	})
}

// Stop makes the replica refuse every read and write with err (which
// should wrap ErrIDConflict or ErrFailed) until the process restarts. The
// first error sticks.
func (r *Replica) Stop(err error) {
	if r.failure.CompareAndSwap(nil, &err) {
		r.log.Error("replica stopped", "error", err)
	}
}

// Accepted is closed once local writes are accepted (AcceptWrites).
func (r *Replica) Accepted() <-chan struct{} { return r.accepted }

// Accepting reports whether local writes are accepted.
func (r *Replica) Accepting() bool {
	return r.accepting.Load() && !r.shut.Load() && r.Err() == nil
}

// Err returns the storage failure that stopped the replica, if any: a
// commit that failed, or a store that failed on its own (a memtable flush
// on a full disk).
func (r *Replica) Err() error {
	if p := r.failure.Load(); p != nil {
		return *p
	}
	if err := r.store.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrFailed, err)
	}
	return nil
}

// Close stops the writer after it finishes the batch in hand; queued
// requests fail with ErrClosed. Close is idempotent and does not close the
// store.
func (r *Replica) Close() error {
	r.closeMu.Lock()
	already := r.closed
	r.closed = true
	r.closeMu.Unlock()
	if already {
		return nil
	}
	r.shut.Store(true)
	r.stop()
	r.wg.Wait()
	for {
		select {
		case q := <-r.reqs:
			q.finish(ErrClosed)
		default:
			return nil
		}
	}
}

// Do applies local operations in order, durably, and returns one Result per
// op. A nil error means every op was attempted; each Result carries its own
// error. If ctx ends first the ops may or may not have been applied.
func (r *Replica) Do(ctx context.Context, ops []Op) ([]Result, error) {
	if r.shut.Load() {
		return nil, ErrClosed
	}
	if !r.accepting.Load() {
		return nil, ErrNotReady
	}
	if err := r.checkHeld(ops); err != nil {
		if r.chaosAckUnheld() {
			return make([]Result, len(ops)), nil // acknowledged, never stored
		}
		return nil, err
	}
	q := &request{ops: ops, res: make([]Result, len(ops)), ctx: ctx}
	for i := range ops {
		q.ids += len(ops[i].IDs)
	}
	if err := r.submit(ctx, q); err != nil {
		return nil, err
	}
	return q.res, nil
}

// checkHeld refuses a batch with a key on a shard this replica does not
// hold: every key an op writes (a cashback writes three) must be here.
// Block flags live on the global shard, which every replica holds.
func (r *Replica) checkHeld(ops []Op) error {
	if r.cfg.Holds == nil {
		return nil
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind == OpBlock || o.Kind == OpUnblock || o.Kind == OpType {
			continue // on shard.Global, which every replica holds
		}
		if err := r.checkKeyHeld(o.Item); err != nil {
			return err
		}
		if o.Kind == OpCashback {
			if err := r.checkKeyHeld(o.Merchant); err != nil {
				return err
			}
			if err := r.checkKeyHeld(o.User); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Replica) checkKeyHeld(k string) error {
	if s := shard.Of(k); !r.cfg.Holds(s) {
		return fmt.Errorf("%w: %q is on shard %d", ErrNotHeld, k, s)
	}
	return nil
}

// do1 runs a single op and folds its error into the return.
// Apply runs one operation durably, as Do, and returns its result or error.
func (r *Replica) Apply(ctx context.Context, op Op) (Result, error) { return r.do1(ctx, op) }

func (r *Replica) do1(ctx context.Context, op Op) (Result, error) {
	res, err := r.Do(ctx, []Op{op})
	if err != nil {
		return Result{}, err
	}
	return res[0], res[0].Err
}

// Like marks item liked by user.
func (r *Replica) Like(ctx context.Context, item, user string) (Result, error) {
	return r.do1(ctx, Op{Kind: OpLike, Item: item, User: user})
}

// Unlike marks item not liked by user.
func (r *Replica) Unlike(ctx context.Context, item, user string) (Result, error) {
	return r.do1(ctx, Op{Kind: OpUnlike, Item: item, User: user})
}

// Incr adds by to counter key, once per idem key if idem is not empty.
func (r *Replica) Incr(ctx context.Context, key string, by int64, idem string) (Result, error) {
	return r.do1(ctx, Op{Kind: OpIncr, Item: key, By: by, IdemKey: idem})
}

// Merge folds remote state in. It is idempotent and order-insensitive.
func (r *Replica) Merge(ctx context.Context, vecs []VectorMerge, recs []RecordMerge) error {
	if len(vecs) == 0 && len(recs) == 0 {
		return nil
	}
	return r.submit(ctx, &request{vmerges: vecs, rmerges: recs})
}

func (r *Replica) submit(ctx context.Context, q *request) error {
	if err := r.Err(); err != nil {
		return err
	}
	q.done = make(chan struct{})
	r.closeMu.RLock()
	if r.closed {
		r.closeMu.RUnlock()
		return ErrClosed
	}
	select {
	case r.reqs <- q:
		r.closeMu.RUnlock()
	case <-ctx.Done():
		r.closeMu.RUnlock()
		return fmt.Errorf("queue for writer: %w", ctx.Err())
	}
	select {
	case <-q.done:
		return q.err
	case <-ctx.Done():
		return fmt.Errorf("wait for commit: %w", ctx.Err())
	}
}

func (q *request) finish(err error) {
	q.err = err
	close(q.done)
}

// run is the writer goroutine.
func (r *Replica) run() {
	defer r.wg.Done()
	batch := make([]*request, 0, 64)
	for {
		select {
		case <-r.stopped.Done():
			return
		case <-r.kick:
			if r.accepting.Load() {
				r.commit(nil) // number queued likes
			}
		case <-r.reconcileKick:
			r.commit([]*request{{reconcileAll: true, done: make(chan struct{})}})
		case q := <-r.reqs:
			batch = append(batch[:0], q)
			n := q.size()
		fill:
			for n < r.cfg.MaxBatch {
				select {
				case q := <-r.reqs:
					batch = append(batch, q)
					n += q.size()
				default:
					break fill
				}
			}
			r.commit(batch)
			clear(batch) // drop references for the GC
		}
	}
}

// commit applies a group of requests as one durable batch.
func (r *Replica) commit(batch []*request) {
	if err := r.Err(); err != nil {
		for _, q := range batch {
			q.finish(err)
		}
		return
	}
	if slices.ContainsFunc(batch, func(q *request) bool { return len(q.drop) > 0 }) {
		rest := batch[:0:0]
		for _, q := range batch {
			if len(q.drop) > 0 {
				r.commitDrop(q)
			} else {
				rest = append(rest, q)
			}
		}
		if batch = rest; len(batch) == 0 {
			return
		}
	}
	if slices.ContainsFunc(batch, (*request).abandoned) {
		// The caller of these ops has given up (its deadline passed or
		// its client left) while they waited for the writer: they are
		// not applied. Applied now, a like whose client has already
		// retried it elsewhere, then unliked, would come after the
		// unlike and win (a replica paused with forwarded requests in
		// hand, a writer stalled behind a slow disk).
		rest := batch[:0:0]
		for _, q := range batch {
			if q.abandoned() {
				q.finish(fmt.Errorf("the caller gave up before the writer took the ops: %w", context.Cause(q.ctx)))
			} else {
				rest = append(rest, q)
			}
		}
		if batch = rest; len(batch) == 0 {
			return
		}
	}
	records := 0 // how many like and keyed records the batch may touch
	for _, q := range batch {
		records += len(q.rmerges)
		for i := range q.ops {
			if k := q.ops[i].Kind; k == OpLike || k == OpUnlike || k == OpToggle || k == OpIncr && q.ops[i].IdemKey != "" {
				records++
			}
		}
	}
	tx := r.newTxn(records)
	defer tx.close()
	for _, q := range batch {
		tx.apply(q)
	}
	if r.chaosAckBeforeCommit(batch) { // never outside a chaos build
		batch = nil // acknowledged already
	}
	changes, err := tx.commit()
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrFailed, err)
		r.failure.CompareAndSwap(nil, &err)
		r.log.Error("commit failed; replica stops writing", "error", err)
		for _, q := range batch {
			q.finish(err)
		}
		return
	}
	r.metrics.ownChanged.Add(float64(len(changes.Vectors)))
	// Before the acks too: an acknowledged write is already queued for
	// replication, so the next flush after the ack carries it.
	if r.cfg.OnCommit != nil && (!changes.Empty() || changes.Merged > 0) {
		r.cfg.OnCommit(changes)
	}
	for _, q := range batch {
		q.finish(q.applyErr)
	}
}

// Read is a vector read.
type Read struct {
	Value  int64
	Vector crdt.Vector
	// Unreconciled counts like records of the item (keyed records of the
	// counter) whose excess is not yet zero in this replica's view: the
	// count may still move.
	Unreconciled int
	// ApproxError is the relative error target of an approximate counter
	// (Config.Approx), 0 for an exact one and for likes. CounterStd turns
	// it and Vector into a bound on the value's standard deviation.
	ApproxError float64
}

// Likes reads an item's like count.
func (r *Replica) Likes(item string) (Read, error) { return r.read(storage.Likes, item) }

// Counter reads a counter.
func (r *Replica) Counter(key string) (Read, error) { return r.read(storage.Counters, key) }

// After a storage failure reads are refused too: the failed commit may or
// may not be in the store (Pebble may have applied it before its WAL sync
// failed), so what a read would see is not known to be durable. Clients
// go to another replica until this one restarts.
func (r *Replica) read(kind storage.Kind, item string) (Read, error) {
	if !storage.ValidItem(kind, item) {
		return Read{}, fmt.Errorf("%w: bad id %q", ErrInvalid, item)
	}
	if err := r.Err(); err != nil {
		return Read{}, err
	}
	v, ok := r.cache.get(vkey{kind, item})
	if !ok {
		var err error
		if v, err = r.store.Vector(kind, item); err != nil {
			return Read{}, err
		}
	}
	r.umu.RLock()
	u := r.unreconciled[vkey{kind, item}]
	r.umu.RUnlock()
	rd := Read{Value: v.Value(), Vector: v, Unreconciled: u}
	if kind == storage.Counters {
		rd.ApproxError = r.approx.errorOf(item)
	}
	return rd, nil
}

// Liked reports whether user likes item in this replica's view.
func (r *Replica) Liked(item, user string) (bool, error) {
	st, err := r.LikeOf(item, user)
	return st.Liked, err
}

// LikeState is a user's like of an item as this replica sees it.
type LikeState struct {
	Liked bool
	// HLC and Origin are the winning like or unlike's stamp and the
	// replica that accepted it (zero if the user never liked the item).
	HLC    crdt.HLC
	Origin string
}

// LikeOf returns user's like state of item in this replica's view.
func (r *Replica) LikeOf(item, user string) (LikeState, error) {
	if !crdt.ValidItemName(item) || !crdt.ValidID(user) {
		return LikeState{}, fmt.Errorf("%w: bad id", ErrInvalid)
	}
	if err := r.Err(); err != nil {
		return LikeState{}, err // see read
	}
	rec, ok, err := r.store.LikeRecord(item, user)
	if err != nil || !ok {
		return LikeState{}, err
	}
	return LikeState{Liked: rec.Liked, HLC: rec.HLC, Origin: rec.Origin}, nil
}

// MaxListLimit bounds one page of Likers and LikedItems.
const MaxListLimit = 1000

// Likers lists up to limit users who like item in this replica's view,
// in id order, after the user id after ("" from the first); more reports
// whether any follow. Replicas whose records agree list the same.
func (r *Replica) Likers(item, after string, limit int) ([]storage.Listed, bool, error) {
	if err := r.checkList(crdt.ItemOf(item), after, limit); err != nil { // a part lists its likers too
		return nil, false, err
	}
	return r.store.Likers(item, after, limit)
}

// LikedItems lists up to limit items user likes, as Likers.
func (r *Replica) LikedItems(user, after string, limit int) ([]storage.Listed, bool, error) {
	if err := r.checkList(user, after, limit); err != nil {
		return nil, false, err
	}
	return r.store.LikedItems(user, after, limit)
}

func (r *Replica) checkList(id, after string, limit int) error {
	if !r.cfg.LikeLists {
		return ErrNoLists
	}
	if !crdt.ValidID(id) || after != "" && !crdt.ValidItemName(after) {
		return fmt.Errorf("%w: bad id", ErrInvalid)
	}
	if limit < 1 || limit > MaxListLimit {
		return fmt.Errorf("%w: limit %d: want 1..%d", ErrInvalid, limit, MaxListLimit)
	}
	return nil
}

// Record returns a user's like record as this replica sees it.
func (r *Replica) Record(item, user string) (*crdt.LikeRecord, bool, error) {
	return r.store.LikeRecord(item, user)
}

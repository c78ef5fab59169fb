package region

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/internal/base/failpoint"
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
		r.log.Warn("chaos build: deliberate bug on", "bug", failpoint.ClockFollowsWall)
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

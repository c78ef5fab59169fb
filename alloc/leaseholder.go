package alloc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/poll"
)

// Leaseholder is one replica's client of one sequence: it keeps up to two
// leases, hands their numbers to the replica's writer (Take), renews them
// and reports what was used, and gives back what is left when idle,
// closed, or restarted (and, if ReclaimAfter is set, frees the tails of
// other replicas' leases once they have been silent that long).
//
// The writer's side (Take, Snapshot, Durable) never waits on the network;
// the KV is used only by the leaseholder's own goroutine.
type Leaseholder struct {
	cfg     Config
	kv      *seqKV
	log     hclog.Logger
	metrics *metrics

	mu       sync.Mutex // protects the fields below
	leases   []*held    // by epoch
	restored map[uint64]uint64
	starved  bool      // a Take found nothing usable
	lastTake time.Time // when numbers were last taken
	taken    uint64    // numbers taken in all
	kvErr    error     // last KV failure, nil once a round succeeds
	kvOK     time.Time // last successful round
	size     uint64    // current block size

	// Owned by the leaseholder goroutine.
	watch     map[uint64]beatSeen // other leaseholders' leases: epoch -> beat
	settle    []uint64            // folded blocks of ours OnFinal took, to settle in the KV
	rate      float64             // numbers per second, smoothed
	lastTaken uint64
	lastRound time.Time

	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// held is a lease this leaseholder has.
type held struct {
	Lease
	since    time.Time // when this leaseholder got it
	taken    uint64    // next number to hand out
	durable  uint64    // numbers below it are committed by the writer
	deadline time.Time // fence: no number is handed out at or after it
	release  bool      // being given back: hand out nothing more
}

type beatSeen struct {
	beat  uint64
	since time.Time
}

// New creates a leaseholder; Start runs it.
func New(cfg Config) (*Leaseholder, error) {
	cfg.ensureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	restored, err := decodeSnapshot(cfg.Restored)
	if err != nil {
		return nil, fmt.Errorf("alloc: restore %s: %w", cfg.Sequence, err)
	}
	h := &Leaseholder{
		cfg:      cfg,
		kv:       &seqKV{kv: cfg.KV, key: "seq." + cfg.Sequence, leaseholder: cfg.Replica, opTimeout: cfg.OpTimeout},
		log:      cfg.Logger.Named("alloc").With("sequence", cfg.Sequence),
		metrics:  newMetrics(cfg.Registerer, cfg.Sequence),
		restored: restored,
		size:     cfg.MinBlock,
		watch:    make(map[uint64]beatSeen),
		kick:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	return h, nil
}

// Attach sets the function called when numbers become available after a
// Take found none, replacing Config.OnReady. It is for a consumer built
// from the leaseholder (a replica numbers from it), which cannot exist yet when
// the leaseholder's Config is written. Call it before Start, never after.
func (h *Leaseholder) Attach(onReady func()) {
	if h.cancel != nil {
		panic("alloc: Attach after Start")
	}
	h.cfg.OnReady = onReady
}

// AttachFinal sets Config.OnFinal, for the same reason as Attach. Call it
// before Start, never after.
func (h *Leaseholder) AttachFinal(onFinal func(ctx context.Context, blocks []Closed) error) {
	if h.cancel != nil {
		panic("alloc: AttachFinal after Start")
	}
	h.cfg.OnFinal = onFinal
}

// Start runs the leaseholder's goroutine until Close.
func (h *Leaseholder) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go h.run(ctx)
}

// Close stops renewing and gives back the unused part of every lease
// whose numbers are all committed, waiting at most ctx. Call it after the
// writer has stopped. Close is idempotent.
func (h *Leaseholder) Close(ctx context.Context) error {
	var err error
	h.once.Do(func() {
		if h.cancel != nil {
			h.cancel()
			<-h.done
		}
		h.mu.Lock()
		// No round yet: leases of an earlier run may be ours to give back.
		// The last round failed: it may have landed an acquire whose
		// answer was lost (Close cuts off a round in flight), a lease
		// only a round can find and give back.
		work := h.kvOK.IsZero() || h.kvErr != nil
		for _, l := range h.leases {
			if l.taken == l.durable {
				l.release, work = true, true
			}
		}
		h.mu.Unlock()
		if work {
			err = h.round(ctx, false)
		}
	})
	return err
}

// Take hands out up to n numbers, consecutive, from a lease that is still
// fenced in (its deadline has not passed). ok is false when no lease is
// usable; the leaseholder then gets one as soon as it can and calls OnReady.
// Take is for the replica's writer only: one caller at a time.
func (h *Leaseholder) Take(n uint64) (sp Span, ok bool) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastTake = now
	var left uint64
	for _, l := range h.leases {
		if l.release || l.taken == l.End || !now.Before(l.deadline) {
			continue
		}
		if !ok {
			k := min(n, l.End-l.taken)
			sp, ok = Span{l.taken, l.taken + k}, true
			l.taken += k
			h.taken += k
		}
		left += l.End - l.taken
	}
	if !ok {
		h.starved = true
	}
	if !ok || left < h.size/2 {
		h.nudge()
	}
	return sp, ok
}

func (h *Leaseholder) nudge() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Snapshot is the state the writer stores with every batch that took
// numbers: each lease and how far it was handed out. After a crash it goes
// back in as Config.Restored.
func (h *Leaseholder) Snapshot() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	snap := make([]snapLease, len(h.leases))
	for i, l := range h.leases {
		snap[i] = snapLease{Epoch: l.Epoch, Start: l.Start, End: l.End, Next: l.taken}
	}
	return appendSnapshot(nil, snap)
}

// snapLease is one lease of a Snapshot: its span and the next number to
// hand out.
type snapLease struct{ Epoch, Start, End, Next uint64 }

// appendSnapshot encodes leases as a Snapshot.
func appendSnapshot(b []byte, leases []snapLease) []byte {
	b = append(b, snapshotVersion)
	b = binary.AppendUvarint(b, uint64(len(leases)))
	for _, l := range leases {
		b = binary.AppendUvarint(b, l.Epoch)
		b = binary.AppendUvarint(b, l.Start)
		b = binary.AppendUvarint(b, l.End)
		b = binary.AppendUvarint(b, l.Next)
	}
	return b
}

// Durable tells the leaseholder that everything taken so far is committed.
func (h *Leaseholder) Durable() {
	h.mu.Lock()
	for _, l := range h.leases {
		l.durable = l.taken
	}
	h.mu.Unlock()
}

const snapshotVersion = 1

// decodeSnapshot returns epoch -> next of a Snapshot.
func decodeSnapshot(b []byte) (map[uint64]uint64, error) {
	out := make(map[uint64]uint64)
	if len(b) == 0 {
		return out, nil
	}
	if b[0] != snapshotVersion {
		return nil, fmt.Errorf("snapshot version %d", b[0])
	}
	b = b[1:]
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, errors.New("truncated snapshot")
		}
		b = b[n:]
		return v, nil
	}
	count, err := next()
	if err != nil || count > 1024 {
		return nil, fmt.Errorf("snapshot lease count %d: %v", count, err)
	}
	for range count {
		var v [4]uint64
		for i := range v {
			if v[i], err = next(); err != nil {
				return nil, err
			}
		}
		if v[1] > v[3] || v[3] > v[2] {
			return nil, fmt.Errorf("snapshot lease %d: next %d outside [%d,%d)", v[0], v[3], v[1], v[2])
		}
		out[v[0]] = v[3]
	}
	if len(b) != 0 {
		return nil, errors.New("trailing bytes in snapshot")
	}
	return out, nil
}

// run renews every RenewEvery, and at once when the writer needs numbers.
func (h *Leaseholder) run(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.cfg.RenewEvery)
	defer t.Stop()
	var last time.Time
	for {
		// A starving writer nudges at most every 50ms, so a dead KV is
		// not hammered.
		if wait := 50*time.Millisecond - time.Since(last); wait > 0 && !poll.Sleep(ctx, wait) {
			return
		}
		last = time.Now()
		if h.cfg.beforeTick != nil {
			h.cfg.beforeTick()
		}
		if err := h.round(ctx, true); err != nil && ctx.Err() == nil {
			h.log.Debug("lease round failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		}
	}
}

// plan is what one round will write for this leaseholder's own leases.
type plan struct {
	epoch   uint64
	used    uint64
	release bool
}

// round is one CAS: renew (or give back) this leaseholder's leases reporting
// what was committed, give back leases of ours we do not know (a restart,
// an acquire whose answer was lost), free silent leaseholders' tails, and take
// a new lease if the writer will soon need one.
func (h *Leaseholder) round(ctx context.Context, mayAcquire bool) error {
	start := time.Now()
	h.mu.Lock()
	h.updateRate(start)
	idle := start.Sub(h.lastTake) >= h.cfg.IdleRelease
	var plans []plan
	var left uint64
	for _, l := range h.leases {
		if idle && l.taken == l.durable || start.Sub(l.since) >= h.cfg.CloseAfter {
			l.release = true // hand out nothing more; given back once committed
		}
		plans = append(plans, plan{l.Epoch, l.durable, l.release && l.taken == l.durable})
		if !l.release {
			left += l.End - l.taken
		}
	}
	n := 0
	for _, l := range h.leases {
		if !l.release {
			n++
		}
	}
	acquire := uint64(0)
	if mayAcquire && n < 2 && !idle && (left < h.size/2+1 || h.starved) {
		acquire = h.size
	}
	restored := h.restored
	h.mu.Unlock()
	settle := slices.Clone(h.settle)

	mine := make(map[uint64]bool, len(plans))
	for _, p := range plans {
		mine[p.epoch] = true
	}
	// What each attempt decided, by nonce: the attempt that landed counts.
	type outcome struct {
		lost, gone []uint64
		acquired   *Lease
		reclaimed  int
	}
	outcomes := make(map[string]*outcome)
	st, err := h.kv.apply(ctx, func(st *State, nonce string) error {
		o := &outcome{}
		outcomes[nonce] = o
		changed := false
		for _, p := range plans {
			var err error
			if p.release {
				err = st.Release(h.cfg.Replica, p.epoch, p.used)
				o.gone = append(o.gone, p.epoch)
			} else {
				err = st.Renew(h.cfg.Replica, p.epoch, p.used)
			}
			if errors.Is(err, ErrNotLeaseholder) {
				o.lost = append(o.lost, p.epoch)
				continue
			} else if err != nil {
				return err
			}
			changed = true
		}
		// Our leases we do not hold: give back from what we last stored.
		// One our store does not know at all was used by a run whose data
		// is gone (or never used): which likes took its numbers is gone
		// with it, so none of them gets a rank.
		for _, l := range slices.Clone(st.Leases) {
			if l.Leaseholder != h.cfg.Replica || mine[l.Epoch] {
				continue
			}
			var err error
			if next, ok := restored[l.Epoch]; ok {
				err = st.Release(h.cfg.Replica, l.Epoch, max(l.Used, min(next, l.End)))
			} else {
				err = st.Forget(h.cfg.Replica, l.Epoch)
			}
			if err != nil {
				return err
			}
			changed = true
		}
		// Others' leases silent for ReclaimAfter.
		for _, l := range slices.Clone(st.Leases) {
			w, ok := h.watch[l.Epoch]
			if h.cfg.ReclaimAfter == 0 || l.Leaseholder == h.cfg.Replica || !ok || w.beat != l.Beat || start.Sub(w.since) < h.cfg.ReclaimAfter {
				continue
			}
			if st.Reclaim(l.Epoch, l.Beat) {
				o.reclaimed++
				changed = true
				h.log.Warn("reclaimed the tail of a silent leaseholder's lease", "holder", l.Leaseholder, "epoch", l.Epoch, "from", l.Used, "to", l.End)
			}
		}
		for _, e := range settle {
			st.Settle(h.cfg.Replica, e)
			changed = true
		}
		if acquire > 0 {
			l := st.Acquire(h.cfg.Replica, acquire)
			o.acquired = &l
			changed = true
		}
		if !changed {
			return errStop
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		h.mu.Lock()
		h.kvErr = err
		h.mu.Unlock()
		h.metrics.kvErrors.Inc()
		return err
	}
	h.observe(st, time.Now())
	o := outcomes[st.Applied[h.cfg.Replica]]
	if errors.Is(err, errStop) || o == nil {
		o = &outcome{}
	}
	if !errors.Is(err, errStop) {
		h.settle = h.settle[len(settle):] // written with this round
	}
	deadline := start.Add(h.cfg.TTL)
	h.mu.Lock()
	h.kvErr, h.kvOK, h.restored = nil, time.Now(), nil
	drop := func(epoch uint64) {
		h.leases = slices.DeleteFunc(h.leases, func(l *held) bool { return l.Epoch == epoch })
	}
	for _, e := range o.lost {
		if !slices.Contains(o.gone, e) {
			h.metrics.lost.Inc()
			h.log.Error("lease was reclaimed while this replica was silent; numbers it used after its last report may be used again", "epoch", e)
		}
		drop(e)
	}
	for _, e := range o.gone {
		drop(e)
		h.metrics.released.Inc()
	}
	for _, l := range h.leases {
		l.deadline = deadline
	}
	// Leases spent to the end were removed from the KV by Renew.
	h.leases = slices.DeleteFunc(h.leases, func(l *held) bool {
		_, inKV := st.Lease(l.Epoch)
		return !inKV && l.durable == l.End
	})
	if l := o.acquired; l != nil {
		h.leases = append(h.leases, &held{Lease: *l, since: start, taken: l.Start, durable: l.Start, deadline: deadline})
		h.metrics.acquired.Inc()
		h.metrics.blockSize.Set(float64(l.Len()))
	}
	h.metrics.reclaimed.Add(float64(o.reclaimed))
	h.metrics.held.Set(float64(len(h.leases)))
	ready := false
	if h.starved {
		for _, l := range h.leases {
			if !l.release && l.taken < l.End {
				ready, h.starved = true, false
				break
			}
		}
	}
	h.mu.Unlock()
	if ready && h.cfg.OnReady != nil {
		h.cfg.OnReady()
	}
	h.final(ctx, st)
	return nil
}

// final passes this leaseholder's folded blocks not yet settled to OnFinal, and
// queues those it took for the next round to settle.
func (h *Leaseholder) final(ctx context.Context, st *State) {
	if h.cfg.OnFinal == nil || st == nil {
		return
	}
	var blocks []Closed
	for _, c := range st.Folded(h.cfg.Replica) {
		if !slices.Contains(h.settle, c.Epoch) {
			blocks = append(blocks, c)
		}
	}
	if len(blocks) == 0 {
		return
	}
	if err := h.cfg.OnFinal(ctx, blocks); err != nil {
		h.log.Warn("final ranks not taken; trying again next round", "blocks", len(blocks), "error", err)
		return
	}
	for _, c := range blocks {
		h.settle = append(h.settle, c.Epoch)
	}
	h.nudge() // settle them soon
}

// updateRate folds the numbers taken since the last round into the rate
// and sets the block size to Target's worth of it. Caller holds mu.
func (h *Leaseholder) updateRate(now time.Time) {
	if !h.lastRound.IsZero() {
		if dt := now.Sub(h.lastRound).Seconds(); dt > 0 {
			r := float64(h.taken-h.lastTaken) / dt
			h.rate = 0.5*h.rate + 0.5*r
		}
	}
	h.lastRound, h.lastTaken = now, h.taken
	want := math.Ceil(h.rate * h.cfg.Target.Seconds())
	h.size = uint64(min(max(want, float64(h.cfg.MinBlock)), float64(h.cfg.MaxBlock)))
}

// observe notes when each other leaseholder's lease beat was first seen.
func (h *Leaseholder) observe(st *State, now time.Time) {
	if st == nil {
		return
	}
	seen := make(map[uint64]bool, len(st.Leases))
	for _, l := range st.Leases {
		if l.Leaseholder == h.cfg.Replica {
			continue
		}
		seen[l.Epoch] = true
		if w, ok := h.watch[l.Epoch]; !ok || w.beat != l.Beat {
			h.watch[l.Epoch] = beatSeen{beat: l.Beat, since: now}
		}
	}
	for e := range h.watch {
		if !seen[e] {
			delete(h.watch, e)
		}
	}
}

// LeaseStatus describes one held lease.
type LeaseStatus struct {
	Epoch     uint64 `json:"epoch"`
	Start     uint64 `json:"start"`
	End       uint64 `json:"end"`
	Next      uint64 `json:"next"`
	Committed uint64 `json:"committed"`
	ExpiresMs int64  `json:"expires_in_ms"` // negative: fenced off
}

// Status is what an operator sees of a leaseholder.
type Status struct {
	Sequence  string        `json:"sequence"`
	Leases    []LeaseStatus `json:"leases"`
	BlockSize uint64        `json:"block_size"`
	Taken     uint64        `json:"numbers_taken"`
	Waiting   bool          `json:"waiting_for_lease"`
	KVError   string        `json:"kv_error,omitempty"`
}

// Status reports the leaseholder's leases and health.
func (h *Leaseholder) Status() Status {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Status{Sequence: h.cfg.Sequence, BlockSize: h.size, Taken: h.taken, Waiting: h.starved, Leases: []LeaseStatus{}}
	if h.kvErr != nil {
		s.KVError = h.kvErr.Error()
	}
	for _, l := range h.leases {
		s.Leases = append(s.Leases, LeaseStatus{
			Epoch: l.Epoch, Start: l.Start, End: l.End, Next: l.taken, Committed: l.durable,
			ExpiresMs: l.deadline.Sub(now).Milliseconds(),
		})
	}
	return s
}

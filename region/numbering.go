package region

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Numbers is the replica's face for numbering: sequences' queued events,
// final ranks (Finalize) and milestone claim intents.
type Numbers struct{ r *Replica }

// Numbers returns the replica's numbers face.
func (r *Replica) Numbers() Numbers { return Numbers{r} }

// Numbering: the replica numbers counted events from global sequences,
// each from blocks this replica leases (see package alloc). A sequence
// numbers either counted likes (a user's first like of an item, the op
// that adds to our own P entry) or the units of increments (an increment
// by k takes k numbers), of every item or key or of those its Match
// accepts: the global likes sequence, a per-item sequence ("the millionth
// like of this video") and a numbered counter ("the 100-billionth search
// query") are the same machinery. The writer numbers a group commit's
// counted events in the same batch that counts them, in commit order, so
// an event and its numbers are durable together. When no lease is usable
// (the KV is out of reach and the lease's TTL has passed, or the block is
// spent and no new one has come yet) counted events are queued, durably,
// in the same batch, and the write is still acknowledged: numbering never
// stands in the write's way. Queued events are numbered first, in order,
// once numbers come back.
//
// The number an event takes is provisional: the sequence's final
// numbering is dense, each used number's rank among all used numbers,
// known once every block below it is closed (package alloc). So the writer
// records which event took numbers from where (key l/<sequence>/<number>,
// one key per event and block) in the batch that assigns them, and when
// the leaseholder learns the ranks of one of its blocks (Finalize), a milestone
// rank is written as a claim intent (key n/<sequence>/<rank>) in the batch
// that forgets the block's events. A crash after that finishes the claim
// on restart. Claims themselves are made outside the writer (package
// milestone).

// Sequencer hands out numbers to the writer without waiting.
type Sequencer interface {
	// Take returns up to n consecutive numbers [start, end), or ok=false
	// if none is usable now.
	Take(n uint64) (start, end uint64, ok bool)
	// Snapshot is the sequencer's state to store with a batch that took
	// numbers.
	Snapshot() []byte
	// Durable reports that every number taken so far is committed.
	Durable()
}

// Counts is what a sequence numbers.
type Counts uint8

const (
	// CountLikes numbers counted likes: one number per user's first like
	// of an item.
	CountLikes Counts = iota
	// CountIncrements numbers the units of positive increments: an
	// applied increment by k takes k numbers. Decrements take none.
	CountIncrements
)

// Numbering configures one sequence.
type Numbering struct {
	// Sequence names the sequence, e.g. "likes".
	Sequence string
	// Counts says which events the sequence numbers.
	Counts Counts
	// Match, if set, limits the sequence to the items (CountLikes) or
	// counter keys (CountIncrements) it accepts. Nil: all of them.
	Match func(key string) bool
	// Seq hands out the numbers. Required.
	Seq Sequencer
	// Milestone reports whether a rank is a milestone. Nil: none is.
	Milestone func(n uint64) bool
	// Next, if set, returns the smallest milestone at or above n (ok false
	// if there is none): finalizing a block then visits only its
	// milestones, not every number (a counter's blocks can hold millions).
	// It must agree with Milestone.
	Next func(n uint64) (m uint64, ok bool)
	// OnClaim, if set, is called after a commit that stored claim intents
	// of this sequence. It must not block.
	OnClaim func()
}

// drainBatch caps the queued events numbered in one commit, per sequence.
const drainBatch = 4096

// maxSequences bounds the sequences of one replica: each adds a check to
// every like or increment it could match.
const maxSequences = 64

// metaSeq is the meta key of a sequence's stored Snapshot.
func metaSeq(seq string) string { return "seq/" + seq }

// NumberingSnapshot returns the sequencer state stored with the last batch
// that took numbers of seq (nil if none): the Restored state of the
// sequencer after a restart.
func NumberingSnapshot(s *storage.Store, seq string) ([]byte, error) {
	b, _, err := s.Meta(metaSeq(seq))
	if err != nil {
		return nil, fmt.Errorf("read numbering state of %s: %w", seq, err)
	}
	return b, nil
}

// numbering is the writer's state of one sequence. Owned by the writer
// goroutine (and load, before it starts), except the atomics read by
// Status.
type numbering struct {
	cfg     *Numbering
	queued  int    // events in the store's unnumbered queue
	nextOrd uint64 // ordinal for the next queued event

	numbered   atomic.Uint64 // numbers taken by this process
	unnumbered atomic.Int64  // queued, as of the last commit
	mNumbered  prometheus.Counter
	mQueued    prometheus.Gauge
}

// numberTxn is the batch's numbering: per sequence, nil until one is
// touched.
type numberTxn struct {
	noHooks
	seq []seqTxn
}

// write numbers the batch's counted events (number).
func (*numberTxn) write(t *txn, _ *Changes) error { return t.number() }

// publish tells the sequences what the durable batch took (afterNumber):
// before the acks, so a caller sees its like numbered or queued.
func (*numberTxn) publish(t *txn) { t.afterNumber() }

// seqTxn is one sequence's part of a group commit.
type seqTxn struct {
	counted                             []storage.CountedLike
	byKey                               map[string]int // CountIncrements: key → its entry in counted
	numbered, drained, enqueued, claims int
	took                                bool
}

// loadNumbering restores each sequence's queue length and next ordinal.
func (r *Replica) loadNumbering() error {
	for i, cfg := range r.cfg.Sequences {
		if i == 0 && cfg.Counts == CountLikes && cfg.Match == nil {
			// The likes queued by the version that had one sequence.
			moved, err := r.store.MigrateUnnumbered(cfg.Sequence)
			if err != nil {
				return fmt.Errorf("load numbering: %w", err)
			}
			if moved > 0 {
				r.log.Info("queued likes moved to their sequence's queue", "sequence", cfg.Sequence, "likes", moved)
			}
		}
		n := &numbering{cfg: cfg,
			mNumbered: r.metrics.numbered.WithLabelValues(cfg.Sequence),
			mQueued:   r.metrics.unnumbered.WithLabelValues(cfg.Sequence),
		}
		if err := r.store.Unnumbered(cfg.Sequence, func(uint64, storage.CountedLike) bool { n.queued++; return true }); err != nil {
			return fmt.Errorf("load numbering of %s: %w", cfg.Sequence, err)
		}
		last, ok, err := r.store.LastUnnumbered(cfg.Sequence)
		if err != nil {
			return fmt.Errorf("load numbering of %s: %w", cfg.Sequence, err)
		}
		if ok {
			n.nextOrd = last + 1
		}
		n.mQueued.Set(float64(n.queued))
		n.unnumbered.Store(int64(n.queued))
		r.nums = append(r.nums, n)
		if n.queued > 0 {
			// Events queued before a restart: the writer asks for numbers
			// as soon as it runs, without waiting for a new one to do it.
			r.Numbers().Ready()
		}
	}
	return nil
}

// Ready wakes the writer to number queued events: a sequencer
// calls it when numbers are usable again. It does not block.
func (ns Numbers) Ready() {
	r := ns.r
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// numberPending is one event waiting for numbers in a commit.
type numberPending struct {
	like storage.CountedLike
	rest uint64 // numbers it still needs
	ord  uint64
	old  bool // from the queue (ord valid), else counted in this batch
}

// seqs is the txn's per-sequence state, made on first use.
func (t *txn) seqs() []seqTxn {
	if t.seq == nil {
		t.seq = make([]seqTxn, len(t.r.nums))
	}
	return t.seq
}

// countLike notes a counted like of this batch for the sequences that
// number it.
func (t *txn) countLike(item, user string) {
	item = crdt.ItemOf(item) // a like of a hot item's part is a like of the item
	for i, n := range t.r.nums {
		if n.cfg.Counts == CountLikes && (n.cfg.Match == nil || n.cfg.Match(item)) {
			st := &t.seqs()[i]
			st.counted = append(st.counted, storage.CountedLike{Item: item, User: user, AtMs: t.nowMs})
		}
	}
}

// countIncr notes an applied increment of this batch for the sequences
// that number its units.
func (t *txn) countIncr(key string, by int64) {
	if by <= 0 {
		return
	}
	for i, n := range t.r.nums {
		if n.cfg.Counts == CountIncrements && (n.cfg.Match == nil || n.cfg.Match(key)) {
			st := &t.seqs()[i]
			// A milestone of a counter names the key, and every increment
			// of a commit has the commit's time: a commit's increments of
			// one key are one event, numbered as one run, logged as one
			// key per block instead of one per increment.
			if j, ok := st.byKey[key]; ok {
				st.counted[j].Units += uint64(by)
				continue
			}
			if st.byKey == nil {
				st.byKey = make(map[string]int)
			}
			st.byKey[key] = len(st.counted)
			st.counted = append(st.counted, storage.CountedLike{Item: key, AtMs: t.nowMs, Units: uint64(by)})
		}
	}
}

// number assigns numbers to queued events, then to this batch's counted
// events, and queues what gets none, for every sequence. It writes into
// the batch; afterNumber updates the in-memory state once the batch is
// durable.
func (t *txn) number() error {
	for i, n := range t.r.nums {
		if n.queued == 0 && (t.seq == nil || len(t.seq[i].counted) == 0) {
			continue
		}
		if err := t.numberSeq(n, &t.seqs()[i]); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) numberSeq(n *numbering, st *seqTxn) error {
	seq := n.cfg.Sequence
	want := uint64(min(n.queued, drainBatch)) // queued units: at least one each
	for _, l := range st.counted {
		want += l.N()
	}
	start, end, ok := n.cfg.Seq.Take(want)
	if !ok {
		t.enqueue(n, st, st.counted)
		return nil
	}
	var todo []numberPending
	if n.queued > 0 {
		err := t.r.store.Unnumbered(seq, func(ord uint64, l storage.CountedLike) bool {
			todo = append(todo, numberPending{like: l, rest: l.N(), ord: ord, old: true})
			return len(todo) < drainBatch
		})
		if err != nil {
			return err
		}
	}
	for _, l := range st.counted {
		todo = append(todo, numberPending{like: l, rest: l.N()})
	}
	i := 0
	for {
		for start < end && i < len(todo) {
			p := &todo[i]
			k := min(end-start, p.rest)
			rec := p.like
			rec.Units = k
			t.b.PutNumbered(seq, start, rec)
			st.numbered += int(k)
			start += k
			if p.rest -= k; p.rest == 0 {
				if p.old {
					t.b.DeleteUnnumbered(seq, p.ord)
					st.drained++
				}
				i++
			}
		}
		if i == len(todo) {
			break
		}
		var more uint64
		for _, p := range todo[i:] {
			more += p.rest
		}
		if start, end, ok = n.cfg.Seq.Take(more); !ok {
			break
		}
	}
	t.b.PutMeta(metaSeq(seq), n.cfg.Seq.Snapshot())
	st.took = true
	// What got no number: queued events stay queued (with what they still
	// need); new ones join them.
	var rest []storage.CountedLike
	for _, p := range todo[i:] {
		l := p.like
		l.Units = p.rest
		switch {
		case !p.old:
			rest = append(rest, l)
		case p.rest < p.like.N():
			t.b.PutUnnumbered(seq, p.ord, l)
		}
	}
	t.enqueue(n, st, rest)
	return nil
}

func (t *txn) enqueue(n *numbering, st *seqTxn, events []storage.CountedLike) {
	for _, l := range events {
		t.b.PutUnnumbered(n.cfg.Sequence, n.nextOrd+uint64(st.enqueued), l)
		st.enqueued++
	}
}

// afterNumber runs once the batch is durable.
func (t *txn) afterNumber() {
	if t.seq == nil {
		return
	}
	for i, n := range t.r.nums {
		st := &t.seq[i]
		if st.took {
			n.cfg.Seq.Durable()
		}
		n.nextOrd += uint64(st.enqueued)
		n.queued += st.enqueued - st.drained
		n.mNumbered.Add(float64(st.numbered))
		n.mQueued.Set(float64(n.queued))
		n.numbered.Add(uint64(st.numbered))
		n.unnumbered.Store(int64(n.queued))
		if st.claims > 0 && n.cfg.OnClaim != nil {
			n.cfg.OnClaim()
		}
		if st.drained > 0 && n.queued > 0 {
			t.r.Numbers().Ready() // more to drain
		}
	}
}

// FinalBlock is a block of numbers whose ranks are known: number p,
// Start <= p < Used, is the (Base + p - Start + 1)th number used in the
// sequence (alloc.Closed).
type FinalBlock struct {
	Start, Used, Base uint64
}

// sequence returns the numbering of the named sequence.
func (r *Replica) sequence(name string) (int, *numbering, error) {
	for i, n := range r.nums {
		if n.cfg.Sequence == name {
			return i, n, nil
		}
	}
	return 0, nil, fmt.Errorf("%w: no sequence %q", ErrInvalid, name)
}

// Finalize takes the ranks of blocks of numbers of seq this replica used:
// a rank that is a milestone becomes a claim intent for the event that
// took its number, and the blocks' events are forgotten, all in one
// durable batch. Taking the same block twice changes nothing more.
func (ns Numbers) Finalize(ctx context.Context, seq string, blocks []FinalBlock) error {
	r := ns.r
	if len(blocks) == 0 {
		return nil
	}
	if _, _, err := r.sequence(seq); err != nil {
		return err
	}
	return r.submit(ctx, &request{finals: blocks, finalSeq: seq})
}

// finalize is Finalize's part of a group commit.
func (t *txn) finalize(seq string, blocks []FinalBlock) error {
	i, n, err := t.r.sequence(seq)
	if err != nil {
		return err
	}
	st := &t.seqs()[i]
	for _, b := range blocks {
		if b.Used < b.Start {
			return fmt.Errorf("%w: final block used %d before start %d", ErrInvalid, b.Used, b.Start)
		}
		if n.cfg.Milestone != nil {
			first, last := b.Base+1, b.Base+b.Used-b.Start // ranks of the block's used numbers
			for rank := range milestonesIn(n.cfg, first, last) {
				p := b.Start + (rank - first)
				like, _, ok, err := t.r.store.Numbered(seq, p)
				if err != nil {
					return err
				}
				if !ok {
					// Forgotten already (the block was taken before), or lost
					// with the data directory (a wiped replica's old blocks).
					t.r.log.Warn("a milestone's event is not recorded here; if it was not taken before, it does not fire",
						"sequence", seq, "rank", rank, "number", p)
					continue
				}
				like.Units = 0
				t.b.PutClaim(seq, rank, like)
				st.claims++
			}
		}
		t.b.DeleteNumbered(seq, b.Start, b.Used)
	}
	return nil
}

// milestonesIn yields the milestones in [first, last] by cfg's rule.
func milestonesIn(cfg *Numbering, first, last uint64) func(yield func(uint64) bool) {
	return func(yield func(uint64) bool) {
		if first > last {
			return
		}
		if cfg.Next == nil {
			for r := first; r <= last && r >= first; r++ {
				if cfg.Milestone(r) && !yield(r) {
					return
				}
			}
			return
		}
		for r := first; r <= last; r++ {
			m, ok := cfg.Next(r)
			if !ok || m > last || m < r || !yield(m) || m == last {
				return
			}
			r = m
		}
	}
}

// Unnumbered is how many counted events of seq wait for numbers, as of
// the last commit.
func (ns Numbers) Unnumbered(seq string) int {
	r := ns.r
	if _, n, err := r.sequence(seq); err == nil {
		return int(n.unnumbered.Load())
	}
	return 0
}

// Numbered is how many numbers of seq this process has taken.
func (ns Numbers) Numbered(seq string) uint64 {
	r := ns.r
	if _, n, err := r.sequence(seq); err == nil {
		return n.numbered.Load()
	}
	return 0
}

// Claims calls fn for every milestone claim intent of seq not yet
// settled, in number order.
func (ns Numbers) Claims(seq string, fn func(n uint64, l storage.CountedLike) bool) error {
	return ClaimIntents{Store: ns.r.store, Sequence: seq}.Claims(fn)
}

// PendingClaims is how many milestone claim intents of seq are not yet
// settled: milestones whose rank this replica took and whose claim is not
// yet made and published. Until then the like each one names is recorded
// only in this replica's data directory.
func (ns Numbers) PendingClaims(seq string) (int, error) {
	r := ns.r
	n := 0
	err := r.Numbers().Claims(seq, func(uint64, storage.CountedLike) bool { n++; return true })
	return n, err
}

// SettleClaim removes a claim intent of seq once its milestone is claimed
// and published, or lost to another replica.
func (ns Numbers) SettleClaim(seq string, n uint64) error {
	return ClaimIntents{Store: ns.r.store, Sequence: seq}.SettleClaim(n)
}

// ClaimIntents are the milestone claim intents of one sequence in a store,
// read and settled without the replica: a claimer can be built on them
// before the replica exists (the replica's Numbering.OnClaim then names the
// claimer directly). The writer stores intents; only SettleClaim deletes
// them.
type ClaimIntents struct {
	Store    *storage.Store
	Sequence string
}

// Claims calls fn for every claim intent not yet settled, in number order.
func (c ClaimIntents) Claims(fn func(n uint64, l storage.CountedLike) bool) error {
	return c.Store.Claims(c.Sequence, fn)
}

// SettleClaim removes a claim intent. Claim keys are written once by the
// writer and deleted only here, so this needs no writer round trip.
func (c ClaimIntents) SettleClaim(n uint64) error {
	b := c.Store.NewBatch()
	defer b.Close()
	b.DeleteClaim(c.Sequence, n)
	if err := b.Commit(); err != nil {
		return fmt.Errorf("settle claim %d: %w", n, err)
	}
	return nil
}

package region

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/storage"
)

// Numbering: every counted like (a user's like going from not-liked to
// liked in this replica, the op that adds to our own P entry) takes the
// next number of a global sequence, from blocks this replica leases (see
// package alloc). The writer numbers a group commit's counted likes in the
// same batch that counts them, in commit order, so a like and its number
// are durable together. When no lease is usable (the KV is out of reach
// and the lease's TTL has passed, or the block is spent and no new one has
// come yet) counted likes are queued, durably, in the same batch, and the
// like is still acknowledged: numbering never stands in the like's way.
// Queued likes are numbered first, in order, once numbers come back.
//
// The number a like takes is provisional: the sequence's final numbering
// is dense, each used number's rank among all used numbers, known once
// every block below it is closed (package alloc). So the writer records
// which like took each number (key l/<sequence>/<number>) in the batch
// that assigns it, and when the holder learns the ranks of one of its
// blocks (Finalize), a milestone rank is written as a claim intent (key
// n/<sequence>/<rank>) in the batch that forgets the block's likes. A
// crash after that finishes the claim on restart. Claims themselves are
// made outside the writer (package milestone).

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

// Numbering configures like numbering.
type Numbering struct {
	// Sequence names the sequence, e.g. "likes".
	Sequence string
	// Seq hands out the numbers. Required.
	Seq Sequencer
	// Milestone reports whether a rank is a milestone. Nil: none is.
	Milestone func(n uint64) bool
	// OnClaim, if set, is called after a commit that stored claim intents.
	// It must not block.
	OnClaim func()
}

// drainBatch caps the queued likes numbered in one commit.
const drainBatch = 4096

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

// numbering is the writer's numbering state. Owned by the writer goroutine
// (and load, before it starts), except the atomics read by Status.
type numbering struct {
	cfg     *Numbering
	queued  int    // likes in the store's unnumbered queue
	nextOrd uint64 // ordinal for the next queued like
}

// loadNumbering restores the queue's length and next ordinal.
func (r *Replica) loadNumbering() error {
	if r.cfg.Numbering == nil {
		return nil
	}
	n := &numbering{cfg: r.cfg.Numbering}
	if err := r.store.Unnumbered(func(uint64, storage.CountedLike) bool { n.queued++; return true }); err != nil {
		return fmt.Errorf("load numbering: %w", err)
	}
	last, ok, err := r.store.LastUnnumbered()
	if err != nil {
		return fmt.Errorf("load numbering: %w", err)
	}
	if ok {
		n.nextOrd = last + 1
	}
	r.num = n
	r.metrics.unnumbered.Set(float64(n.queued))
	r.unnumbered.Store(int64(n.queued))
	if n.queued > 0 {
		// Likes queued before a restart: the writer asks for numbers as
		// soon as it runs, without waiting for a new like to do it.
		r.NumbersReady()
	}
	return nil
}

// NumbersReady wakes the writer to number queued likes: the sequencer
// calls it when numbers are usable again. It does not block.
func (r *Replica) NumbersReady() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// numberPending is one like waiting for a number in a commit.
type numberPending struct {
	like storage.CountedLike
	ord  uint64
	old  bool // from the queue (ord valid), else counted in this batch
}

// countLike notes a counted like of this batch for numbering.
func (t *txn) countLike(item, user string) {
	if t.r.num == nil {
		return
	}
	t.counted = append(t.counted, storage.CountedLike{Item: item, User: user, AtMs: t.nowMs})
}

// number assigns numbers to queued likes, then to this batch's counted
// likes, and queues what gets none. It writes into the batch; afterNumber
// updates the in-memory state once the batch is durable.
func (t *txn) number() error {
	n := t.r.num
	if n == nil || (len(t.counted) == 0 && n.queued == 0) {
		return nil
	}
	want := uint64(min(n.queued, drainBatch) + len(t.counted))
	start, end, ok := n.cfg.Seq.Take(want)
	if !ok {
		t.enqueue(t.counted)
		return nil
	}
	var todo []numberPending
	if n.queued > 0 {
		err := t.r.store.Unnumbered(func(ord uint64, l storage.CountedLike) bool {
			todo = append(todo, numberPending{like: l, ord: ord, old: true})
			return len(todo) < drainBatch
		})
		if err != nil {
			return err
		}
	}
	for _, l := range t.counted {
		todo = append(todo, numberPending{like: l})
	}
	i := 0
	for {
		for num := start; num < end && i < len(todo); num++ {
			p := todo[i]
			if p.old {
				t.b.DeleteUnnumbered(p.ord)
				t.drained++
			}
			t.b.PutNumbered(n.cfg.Sequence, num, p.like)
			t.numbered++
			i++
		}
		if i == len(todo) {
			break
		}
		if start, end, ok = n.cfg.Seq.Take(uint64(len(todo) - i)); !ok {
			break
		}
	}
	t.b.PutMeta(metaSeq(n.cfg.Sequence), n.cfg.Seq.Snapshot())
	t.tookNumbers = true
	// What got no number: queued likes stay queued; new ones join them.
	var rest []storage.CountedLike
	for _, p := range todo[i:] {
		if !p.old {
			rest = append(rest, p.like)
		}
	}
	t.enqueue(rest)
	return nil
}

func (t *txn) enqueue(likes []storage.CountedLike) {
	n := t.r.num
	for _, l := range likes {
		t.b.PutUnnumbered(n.nextOrd+uint64(t.enqueued), l)
		t.enqueued++
	}
}

// afterNumber runs once the batch is durable.
func (t *txn) afterNumber() {
	n := t.r.num
	if n == nil {
		return
	}
	if t.tookNumbers {
		n.cfg.Seq.Durable()
	}
	n.nextOrd += uint64(t.enqueued)
	n.queued += t.enqueued - t.drained
	t.r.metrics.numbered.Add(float64(t.numbered))
	t.r.metrics.unnumbered.Set(float64(n.queued))
	t.r.numbered.Add(uint64(t.numbered))
	t.r.unnumbered.Store(int64(n.queued))
	if t.claims > 0 && n.cfg.OnClaim != nil {
		n.cfg.OnClaim()
	}
	if t.drained > 0 && n.queued > 0 {
		t.r.NumbersReady() // more to drain
	}
}

// FinalBlock is a block of numbers whose ranks are known: number p,
// Start <= p < Used, is the (Base + p - Start + 1)th number used in the
// sequence (alloc.Closed).
type FinalBlock struct {
	Start, Used, Base uint64
}

// Finalize takes the ranks of blocks of numbers this replica used: a rank
// that is a milestone becomes a claim intent for the like that took its
// number, and the blocks' likes are forgotten, all in one durable batch.
// Taking the same block twice changes nothing more.
func (r *Replica) Finalize(ctx context.Context, blocks []FinalBlock) error {
	if r.num == nil || len(blocks) == 0 {
		return nil
	}
	return r.submit(ctx, &request{finals: blocks})
}

// finalize is Finalize's part of a group commit.
func (t *txn) finalize(blocks []FinalBlock) error {
	n := t.r.num
	for _, b := range blocks {
		if b.Used < b.Start {
			return fmt.Errorf("%w: final block used %d before start %d", ErrInvalid, b.Used, b.Start)
		}
		for p := b.Start; p < b.Used && n.cfg.Milestone != nil; p++ {
			rank := b.Base + p - b.Start + 1
			if !n.cfg.Milestone(rank) {
				continue
			}
			like, ok, err := t.r.store.Numbered(n.cfg.Sequence, p)
			if err != nil {
				return err
			}
			if !ok {
				// Forgotten already (the block was taken before), or lost
				// with the data directory (a wiped replica's old blocks).
				t.r.log.Warn("a milestone's like is not recorded here; if it was not taken before, it does not fire",
					"sequence", n.cfg.Sequence, "rank", rank, "number", p)
				continue
			}
			t.b.PutClaim(n.cfg.Sequence, rank, like)
			t.claims++
		}
		t.b.DeleteNumbered(n.cfg.Sequence, b.Start, b.Used)
	}
	return nil
}

// Unnumbered is how many counted likes wait for a number, as of the last
// commit.
func (r *Replica) Unnumbered() int { return int(r.unnumbered.Load()) }

// Numbered is how many counted likes this process has numbered.
func (r *Replica) Numbered() uint64 { return r.numbered.Load() }

// Claims calls fn for every milestone claim intent not yet settled, in
// number order.
func (r *Replica) Claims(fn func(n uint64, l storage.CountedLike) bool) error {
	if r.num == nil {
		return nil
	}
	return ClaimIntents{Store: r.store, Sequence: r.num.cfg.Sequence}.Claims(fn)
}

// SettleClaim removes a claim intent once its milestone is claimed and
// published, or lost to another replica.
func (r *Replica) SettleClaim(n uint64) error {
	if r.num == nil {
		return nil
	}
	return ClaimIntents{Store: r.store, Sequence: r.num.cfg.Sequence}.SettleClaim(n)
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

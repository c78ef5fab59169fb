package region

import (
	"context"
	"fmt"
	"slices"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Handing off budget rights: before a replica is retired for good, it
// gives every budget right it holds to a peer, so that none is stranded
// with it (a retired replica's rights are out of everyone's reach: no
// other replica may write its entries).
//
// A handoff is a mode, not one pass. While it is on, every commit that may
// have raised this replica's rights to a budget (a grant here, a refund, a
// merge of a transfer or of its own entries) moves them on to the target
// in the same commit, and this replica asks nobody for rights. So rights
// that were on their way when the handoff began, and grants that still
// reach this replica, end at the target too. The transfers are ordinary
// ones (crdt.Budget.Transfer): each writes only this replica's entries,
// and they travel by the fast path and anti-entropy like every other.
//
// The target is recorded in the store, in the commit that turns the mode
// on (and removed by the one that cancels it), so a replica restarted
// during a handoff goes on handing off: once its recovery ends and it
// accepts writes again, it turns the mode on and runs the pass again
// (resumeHandoffWhenReady). Not before: until then its own entries may be
// behind what it wrote, and a transfer written from them could give away
// rights it already spent.

// handoffPage bounds how many budgets one handoff commit moves.
const handoffPage = 256

// Handoff reports a handoff pass.
type Handoff struct {
	// To is the replica the rights go to ("" when no handoff is on).
	To string
	// Budgets is how many budgets this replica held rights to when the
	// pass scanned them (after the first commits of the handoff, which may
	// have moved some already); Moved is the rights moved since the
	// handoff began, by the pass and by the commits around it.
	Budgets int
	Moved   int64
	// Held is the rights this replica holds once the pass committed, in
	// all budgets: 0, unless rights arrived during the pass (the next
	// commit moves them) or an entry is at its cap.
	Held int64
}

// HandOffRights turns the handoff to replica to on (replacing any earlier
// target) and moves every right this replica holds to it now. to must be
// another replica's valid id; whether it is a live peer is the caller's
// check.
func (bg Budgets) HandOffRights(ctx context.Context, to string) (Handoff, error) {
	r := bg.r
	if !crdt.ValidID(to) || to == r.self {
		return Handoff{}, fmt.Errorf("%w: cannot hand budget rights off to %q", ErrInvalid, to)
	}
	if err := r.Err(); err != nil {
		return Handoff{}, err
	}
	r.handoffMu.Lock()
	defer r.handoffMu.Unlock()
	return r.handOffRights(ctx, to)
}

// handOffRights is HandOffRights with handoffMu held.
func (r *Replica) handOffRights(ctx context.Context, to string) (Handoff, error) {
	if !r.accepting.Load() {
		// Until recovery ends, this replica's own entries may be behind
		// what it wrote before: a transfer written from them now could
		// hand off rights it already spent.
		return Handoff{}, ErrNotReady
	}
	r.resumeHandoff.Store(nil) // this handoff replaces one found on open
	start := r.handedOff.Load()
	r.handoff.Store(&to)
	// A barrier, which also records the target: once it has committed,
	// every commit either moved its rights on (it saw the target) or is in
	// the store for the scan below.
	if err := r.submit(ctx, &request{setHandoff: &to}); err != nil {
		return Handoff{}, fmt.Errorf("hand off budget rights: %w", err)
	}
	keys, _, err := r.held()
	if err != nil {
		return Handoff{}, err
	}
	h := Handoff{To: to, Budgets: len(keys)}
	for len(keys) > 0 {
		page := keys[:min(len(keys), handoffPage)]
		keys = keys[len(page):]
		if err := r.submit(ctx, &request{handoff: page}); err != nil {
			return h, fmt.Errorf("hand off budget rights: %w", err)
		}
	}
	h.Moved = r.handedOff.Load() - start
	_, h.Held, err = r.held()
	return h, err
}

// HandOffShards moves this replica's rights to every budget on the given
// shards (shard of the budget's key) to the replica to(shard) names: a
// replica that stops serving shards in a move (package node) hands their
// rights to a holder, so none is stranded with it, which no longer takes
// the shards' spends. It is one pass (not a mode, as HandOffRights is);
// run it again before dropping the shards, for rights that arrived since.
// It returns the rights moved.
func (bg Budgets) HandOffShards(ctx context.Context, shards []int, to func(shard int) string) (int64, error) {
	r := bg.r
	if !r.accepting.Load() {
		return 0, ErrNotReady // as handOffRights: own entries may be behind
	}
	in := map[int]bool{}
	for _, s := range shards {
		in[s] = true
	}
	keys, _, err := r.held()
	if err != nil {
		return 0, err
	}
	var pairs []keyTo
	for _, k := range keys {
		s := storage.SegmentShard(storage.VectorSegment(k))
		if t := to(s); in[s] && t != "" && t != r.self {
			pairs = append(pairs, keyTo{key: k, to: t})
		}
	}
	start := r.handedOff.Load()
	for len(pairs) > 0 {
		page := pairs[:min(len(pairs), handoffPage)]
		pairs = pairs[len(page):]
		if err := r.submit(ctx, &request{handoffTo: page}); err != nil {
			return r.handedOff.Load() - start, fmt.Errorf("hand off budget rights of shards: %w", err)
		}
	}
	return r.handedOff.Load() - start, nil
}

// keyTo is a budget whose rights go to a replica (HandOffShards).
type keyTo struct{ key, to string }

// CancelHandoff turns the handoff off, and removes it from the store:
// rights are kept and asked for again. Rights already moved stay with the
// target, which holds them like any other.
func (bg Budgets) CancelHandoff(ctx context.Context) error {
	r := bg.r
	r.handoffMu.Lock()
	defer r.handoffMu.Unlock()
	r.resumeHandoff.Store(nil)
	r.handoff.Store(nil)
	none := ""
	if err := r.submit(ctx, &request{setHandoff: &none}); err != nil {
		return fmt.Errorf("cancel budget rights handoff: %w", err)
	}
	return nil
}

// loadHandoff takes the handoff to `to` found in the store on open: it is
// resumed once writes are accepted, unless Config.KeepHandoff refuses its
// target, when it is dropped from the store.
func (r *Replica) loadHandoff(to string) error {
	if r.cfg.KeepHandoff == nil || r.cfg.KeepHandoff(to) {
		r.resumeHandoff.Store(&to)
		return nil
	}
	b := r.store.NewBatch()
	defer b.Close()
	b.PutMeta(metaHandoff, nil)
	if err := b.Commit(); err != nil {
		return fmt.Errorf("drop the budget handoff to %s: %w", to, err)
	}
	r.log.Error("budget rights handoff found in the store dropped: its target is not a peer any more; hand off again to a peer", "to", to)
	return nil
}

// resumeHandoffWhenReady turns on again the handoff found in the store on
// open, once the replica accepts writes, unless an admin started or
// cancelled one meanwhile. It stops with the replica.
func (r *Replica) resumeHandoffWhenReady() {
	defer r.wg.Done()
	select {
	case <-r.stopped.Done():
		return
	case <-r.accepted:
	}
	r.handoffMu.Lock()
	defer r.handoffMu.Unlock()
	to := r.resumeHandoff.Load()
	if to == nil {
		return // an admin started or cancelled a handoff meanwhile
	}
	h, err := r.handOffRights(r.stopped, *to)
	if err != nil {
		if r.stopped.Err() == nil {
			r.log.Error("budget rights handoff found in the store not resumed: hand off again", "to", *to, "error", err)
		}
		return
	}
	r.log.Warn("budget rights handoff resumed after a restart", "to", h.To, "budgets", h.Budgets, "moved", h.Moved, "held", h.Held)
}

// HandoffStatus reports the handoff target ("" if none; the one found on
// open, until it is resumed) and the rights this replica holds now, in
// how many budgets.
func (bg Budgets) HandoffStatus() (Handoff, error) {
	r := bg.r
	h := Handoff{To: r.Budgets().HandoffTarget()}
	keys, held, err := r.held()
	h.Budgets, h.Held = len(keys), held
	return h, err
}

// HandoffTarget is the replica a handoff goes to: the one on now, or the
// one found in the store on open and not yet resumed ("" if neither).
func (bg Budgets) HandoffTarget() string {
	r := bg.r
	if to := r.handoff.Load(); to != nil {
		return *to
	}
	if to := r.resumeHandoff.Load(); to != nil {
		return *to
	}
	return ""
}

// handoffTo is the handoff target, or "".
func (r *Replica) handoffTo() string {
	if to := r.handoff.Load(); to != nil {
		return *to
	}
	return ""
}

// held lists, sorted, the budgets this replica holds rights to, and sums
// those rights, by a scan of every budget vector (handoffs are rare).
func (r *Replica) held() (keys []string, sum int64, err error) {
	rights, err := r.scanRights()
	if err != nil {
		return nil, 0, err
	}
	for k, n := range rights {
		if n > 0 {
			keys = append(keys, k)
			sum += n
		}
	}
	slices.Sort(keys)
	return keys, sum, nil
}

// scanRights reads this replica's rights to every budget it has written
// or received rights to, from the store (committed state).
func (r *Replica) scanRights() (map[string]int64, error) {
	keys := make(map[string]struct{})
	err := r.store.ScanVectors(storage.Budgets, func(item string, v crdt.Vector) bool {
		key, to, inbox, ok := crdt.SplitBudgetName(item)
		if ok && (inbox && to == r.self || !inbox && v.Get(r.self) != (crdt.PN{})) {
			keys[key] = struct{}{}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("scan budget rights: %w", err)
	}
	out := make(map[string]int64, len(keys))
	for key := range keys {
		main, inboxes, err := r.store.Budget(key) // one point in time, as Budgets.Get
		if err != nil {
			return nil, fmt.Errorf("scan budget rights: %w", err)
		}
		b := crdt.Budget{Main: main, Inbox: inboxes}
		out[key] = b.Rights(r.self)
	}
	return out, nil
}

// forwardLater marks a budget whose rights here may have grown in this
// commit, for forwardRights, while a handoff is on. A handoff that starts
// after this batch was applied needs no mark: HandOffRights's barrier
// waits for the batch's commit, and its scan then finds the rights.
func (t *txn) forwardLater(key string) {
	if t.r.handoff.Load() == nil {
		return
	}
	if t.forward == nil {
		t.forward = make(map[string]struct{})
	}
	t.forward[key] = struct{}{}
}

// forwardRights moves, before the commit, this replica's rights to every
// marked budget to the handoff target.
func (t *txn) forwardRights() {
	to := t.r.handoffTo()
	if to == "" || len(t.forward) == 0 || !t.r.accepting.Load() {
		return
	}
	keys := make([]string, 0, len(t.forward))
	for k := range t.forward {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic write order
	for _, k := range keys {
		t.handOff(k, to)
	}
}

// handOff moves all of this replica's rights to budget key to replica to,
// in the overlay.
func (t *txn) handOff(key, to string) {
	bs, err := t.budget(key)
	if err != nil {
		t.r.log.Warn("budget rights not handed off", "key", key, "to", to, "error", err)
		return
	}
	if _, err := t.inbox(bs, to); err != nil {
		t.r.log.Warn("budget rights not handed off", "key", key, "to", to, "error", err)
		return
	}
	b := bs.view()
	n := b.Rights(t.r.self)
	if n <= 0 || t.checkEntry(bs.inbox[to].cur.Get(t.r.self), n) != nil || t.checkEntry(bs.inbox[t.r.self].cur.Get(t.r.self), -n) != nil {
		return
	}
	if err := b.Transfer(t.r.self, to, n); err != nil {
		return
	}
	bs.put(b)
	t.logBudget(storage.EventTransfer, key, to, "", n)
	t.r.metrics.budgetHandedOff.Add(float64(n))
	t.r.handedOff.Add(n)
}

package region

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Uniques is the replica's face for unique counts: reads of keys' sketches,
// all-time or over a window.
type Uniques struct{ r *Replica }

// Uniques returns the replica's uniques face.
func (r *Replica) Uniques() Uniques { return Uniques{r} }

// Unique counts. Every key has a HyperLogLog sketch (crdt.HLL) per replica:
// a replica adds the ids it is given to its own sketch, and a read takes
// the register-wise max over every replica's sketch. Register-wise max is
// the same lattice as a vector's entries, so the per-replica sketches
// replicate, merge, converge and are repaired by anti-entropy exactly as
// own vector entries do, and the union of all replicas' sketches equals,
// register for register, the sketch one node would have built from every
// add: an id added in two regions counts once.
//
// A sketch is stored and replicated by pages of 256 registers, each a
// Pebble key whose value is the page's canonical encoding (sparse while
// few registers are set). An add rewrites only the pages whose registers
// rose, and the fast path carries only those pages, as absolute values.
//
// Every add is also booked, in the same batch, into the key's slot
// sketches (WindowConfig.Uniques: hourly and daily by default), so "unique
// viewers today" is one slot and "this week" the union of seven.

// MaxUniqueIDs bounds the ids of one OpUniques.
const MaxUniqueIDs = 10_000

// DefaultUniqueLevels are the slots of unique counts unless
// configured: 1 h slots kept 8 days (any day or week of hours), 1 d
// slots kept 400 days.
func DefaultUniqueLevels() []WindowLevel {
	return []WindowLevel{
		{Width: time.Hour, Keep: 8 * 24 * time.Hour},
		{Width: 24 * time.Hour, Keep: 400 * 24 * time.Hour},
	}
}

// SketchMerge carries one page of a replica's sketch to merge by
// register-wise max.
type SketchMerge struct {
	Kind    storage.Kind // Uniques or UniquesWindows
	Name    string
	Replica string
	Page    int
	Regs    crdt.HLLPage
}

// SketchChange is one page of this replica's own sketch, after a commit
// raised some of its registers.
type SketchChange struct {
	Kind storage.Kind
	Name string
	Page int
	Regs crdt.HLLPage
}

// MergeSketches folds remote sketch pages in. It is idempotent and
// order-insensitive.
func (r *Replica) MergeSketches(ctx context.Context, pages []SketchMerge) error {
	if len(pages) == 0 {
		return nil
	}
	return r.submit(ctx, &request{smerges: pages})
}

// pageTxn is the batch's overlay of sketch pages.
type pageTxn struct {
	noHooks
	pages   map[skey]*pageState
	porder  []skey // pages in first-touch order, for deterministic writes
	targets map[targetKey]*uniqueTarget
}

func (*pageTxn) write(t *txn, ch *Changes) error {
	t.writePages(ch)
	return nil
}

func (*pageTxn) publish(t *txn) { t.cachePages() }

// skey names one page of one replica's sketch.
type skey struct {
	kind    storage.Kind
	name    string
	replica string
	page    uint8
}

type pageState struct {
	orig, cur crdt.HLLPage
	origEnc   []byte // orig's stored bytes; nil if it is not stored
	curEnc    []byte // cur's bytes once written
}

// pageCache keeps the stored bytes of this replica's own sketch pages, so a
// hot key's adds neither read their pages back from Pebble every commit nor
// encode the old page again for the digest. Only the writer goroutine uses
// it; only the writer writes own pages. It is bounded by bytes: sparse
// pages (most pages of most keys) cost a few dozen, a dense one 257 plus
// the entry.
type pageCache struct {
	max, size int
	pages     map[skey][]byte
}

// pageEntryBytes estimates a cache entry's cost beside its page bytes:
// the map slot, the key's strings' headers and the slice header.
const pageEntryBytes = 96

func newPageCache(maxBytes int) *pageCache {
	return &pageCache{max: maxBytes, pages: make(map[skey][]byte)}
}

func (c *pageCache) put(k skey, enc []byte) {
	if c.max <= 0 {
		return
	}
	old, ok := c.pages[k]
	if ok {
		c.size -= len(old)
	} else {
		if c.size+pageEntryBytes+len(enc) > c.max {
			clear(c.pages) // simple and rare: a full cache starts over
			c.size = 0
		}
		c.size += pageEntryBytes
	}
	c.size += len(enc)
	c.pages[k] = enc
}

// clear empties the cache.
func (c *pageCache) clear() {
	clear(c.pages)
	c.size = 0
}

func (c *pageCache) drop(k skey) {
	if old, ok := c.pages[k]; ok {
		c.size -= pageEntryBytes + len(old)
		delete(c.pages, k)
	}
}

// page returns the overlay state of a sketch page, loading it on first
// touch.
func (t *txn) page(k skey) (*pageState, error) {
	if s, ok := t.pages[k]; ok {
		return s, nil
	}
	s := &pageState{}
	if enc, ok := t.r.ownPages.pages[k]; ok && k.replica == t.r.self {
		if enc != nil {
			if err := crdt.DecodeHLLPage(enc, &s.orig); err != nil {
				return nil, fmt.Errorf("cached sketch page %s/%s: %w", k.name, k.replica, err)
			}
		}
		s.origEnc = enc
	} else {
		enc, err := t.r.store.SketchPage(k.kind, k.name, k.replica, int(k.page), &s.orig)
		if err != nil {
			return nil, err
		}
		s.origEnc = enc
	}
	s.cur = s.orig
	if t.pages == nil {
		t.pages = make(map[skey]*pageState)
	}
	t.pages[k] = s
	t.porder = append(t.porder, k)
	return s, nil
}

// uniqueTarget is the sketches one add writes: the key's own all-time
// sketch and its own slot sketches of one second, with their pages as
// the ids reach them. A batch of single-id events of one key reuses it.
type uniqueTarget struct {
	names []skey
	pages [][crdt.HLLPages]*pageState
}

type targetKey struct {
	item string
	sec  int64
}

func (t *txn) uniqueTarget(item string, atMs int64) *uniqueTarget {
	tk := targetKey{item, atMs / 1000}
	if ut, ok := t.targets[tk]; ok {
		return ut
	}
	ut := &uniqueTarget{names: []skey{{kind: storage.Uniques, name: item, replica: t.r.self}}}
	for _, l := range t.r.uniqueLevels {
		bk := crdt.Slot{Key: item, Width: l.width, Start: crdt.SlotStart(atMs, l.width), Keep: l.keep}
		if !bk.Expired(t.nowMs) {
			ut.names = append(ut.names, skey{kind: storage.UniquesWindows, name: bk.Name(), replica: t.r.self})
		}
	}
	ut.pages = make([][crdt.HLLPages]*pageState, len(ut.names))
	if t.targets == nil {
		t.targets = make(map[targetKey]*uniqueTarget)
	}
	t.targets[tk] = ut
	return ut
}

// applyUniques adds op.IDs to the key's own sketch and to its own sketches
// of the slots of the event's time. A page that fails to load (a
// storage error) fails the op with some of its ids added: harmless, since
// adding is idempotent and a retry adds them all.
func (t *txn) applyUniques(op *Op) Result {
	ut := t.uniqueTarget(op.Item, t.atOr(op.At))
	raised := false
	for _, id := range op.IDs {
		idx, rho := crdt.HLLRegister(crdt.HashUnique(id))
		pg, off := idx/crdt.HLLPageSize, idx%crdt.HLLPageSize
		for i := range ut.names {
			ps := ut.pages[i][pg]
			if ps == nil {
				k := ut.names[i]
				k.page = uint8(pg)
				var err error
				if ps, err = t.page(k); err != nil {
					return Result{Err: err}
				}
				ut.pages[i][pg] = ps
			}
			if ps.cur[off] < rho {
				ps.cur[off] = rho
				raised = raised || i == 0
			}
		}
	}
	t.r.metrics.uniqueIDs.Add(float64(len(op.IDs)))
	return Result{Changed: raised}
}

// mergeSketch merges a remote page by register-wise max.
func (t *txn) mergeSketch(m *SketchMerge) error {
	if !storage.ValidSketch(m.Kind, m.Name) || !crdt.ValidID(m.Replica) || m.Page < 0 || m.Page >= crdt.HLLPages {
		return fmt.Errorf("%w: bad sketch merge %c/%q/%q page %d", ErrInvalid, m.Kind, m.Name, m.Replica, m.Page)
	}
	if m.Kind == storage.UniquesWindows {
		if bk, _ := crdt.ParseSlot(m.Name); bk.Expired(t.nowMs) {
			t.r.metrics.refusedSlot.Inc()
			return nil
		}
	}
	ps, err := t.page(skey{m.Kind, m.Name, m.Replica, uint8(m.Page)})
	if err != nil {
		return err
	}
	if t.chaosSkipSketchMerge(ps) { // never outside a chaos build
		return nil
	}
	if m.Replica == t.r.self && t.r.accepting.Load() {
		// As for vector entries: once writes are acknowledged this
		// replica is the only authority on its own sketch.
		probe := ps.cur
		if probe.Merge(&m.Regs) {
			t.r.metrics.refusedOwn.Inc()
			t.r.log.Warn("refused a peer's higher registers of our own sketch", "kind", m.Kind, "name", m.Name, "page", m.Page)
		}
		return nil
	}
	ps.cur.Merge(&m.Regs)
	return nil
}

// writePages adds the changed pages to the batch and the own ones to ch.
func (t *txn) writePages(ch *Changes) {
	indexed := map[string]bool{}
	for _, k := range t.porder {
		ps := t.pages[k]
		if ps.cur == ps.orig {
			continue
		}
		if k.kind == storage.UniquesWindows && ps.orig.IsZero() && !indexed[k.name] {
			indexed[k.name] = true
			t.b.IndexWindow(k.kind, k.name) // idempotent: it may be listed already
		}
		ps.curEnc = t.b.PutSketchPage(k.kind, k.name, k.replica, int(k.page), ps.origEnc, &ps.cur)
		if k.replica == t.r.self {
			ch.Sketches = append(ch.Sketches, SketchChange{Kind: k.kind, Name: k.name, Page: int(k.page), Regs: ps.cur})
		}
	}
}

// cachePages keeps the committed own pages for the next batches.
func (t *txn) cachePages() {
	for _, k := range t.porder {
		if ps := t.pages[k]; k.replica == t.r.self {
			if ps.cur == ps.orig {
				t.r.ownPages.put(k, ps.origEnc)
			} else {
				t.r.ownPages.put(k, ps.curEnc)
			}
		}
	}
}

// expireSketch deletes a unique-count slot past its retention.
func (t *txn) expireSketch(ref storage.WindowRef) error {
	for pg := range crdt.HLLPages {
		t.r.ownPages.drop(skey{ref.Kind, ref.Name, t.r.self, uint8(pg)})
	}
	return t.b.DeleteSketch(ref.Kind, ref.Name)
}

// UniqueRead is the answer to a unique-count read.
type UniqueRead struct {
	// Estimate is the number of distinct ids, within about
	// crdt.HLLStdError of the true count (one standard error).
	Estimate float64
	// Sketch is the union of every replica's sketch of every key read.
	Sketch *crdt.HLL
	// Replicas are the replicas whose sketches the read found, and
	// ByReplica each one's own sketch (of the keys read, unioned).
	Replicas  []string
	ByReplica map[string]*crdt.HLL
	// From, To and SlotWidth describe a windowed read (zero otherwise):
	// the union of the slots of width SlotWidth starting in [From, To).
	From, To  time.Time
	SlotWidth time.Duration
	// Closed: a windowed read ended more than WindowConfig.Past ago.
	Closed bool
}

// MaxUniqueKeys bounds the keys of one union read, and MaxUniqueSlots
// the slots it merges per key.
const (
	MaxUniqueKeys  = 100
	MaxUniqueSlots = 1_000
)

// Read reads the unique count of the union of keys (one or more).
func (u Uniques) Read(keys []string) (UniqueRead, error) {
	r := u.r
	if err := r.checkUniqueKeys(keys); err != nil {
		return UniqueRead{}, err
	}
	out := UniqueRead{Sketch: new(crdt.HLL), ByReplica: map[string]*crdt.HLL{}}
	for _, key := range keys {
		if err := r.store.Sketch(storage.Uniques, key, out.add); err != nil {
			return UniqueRead{}, err
		}
	}
	out.finish()
	out.Estimate = r.chaosEstimate(out.Estimate) // out.Estimate outside a chaos build
	return out, nil
}

func (r *Replica) checkUniqueKeys(keys []string) error {
	if err := r.Err(); err != nil {
		return err
	}
	if len(keys) == 0 || len(keys) > MaxUniqueKeys {
		return fmt.Errorf("%w: %d keys, want 1 to %d", ErrInvalid, len(keys), MaxUniqueKeys)
	}
	for _, k := range keys {
		if !crdt.ValidID(k) {
			return fmt.Errorf("%w: bad key %q", ErrInvalid, k)
		}
	}
	return nil
}

// Range turns "the last d" into aligned bounds for a unique-count
// read: the d/width latest slots of the finest level that covers d.
func (u Uniques) Range(last time.Duration) (fromMs, toMs int64, err error) {
	r := u.r
	nowMs := r.pclock.NowMs()
	l, err := r.pickUniqueLevel(nowMs-last.Milliseconds(), nowMs)
	if err != nil {
		return 0, 0, err
	}
	to := (crdt.SlotStart(nowMs, l.width) + l.width) * 1000
	n := (last.Milliseconds() + l.width*1000 - 1) / (l.width * 1000)
	return to - n*l.width*1000, to, nil
}

// pickUniqueLevel chooses the finest unique-count level that still holds
// fromMs and covers [fromMs, toMs) in at most MaxUniqueSlots slots.
func (r *Replica) pickUniqueLevel(fromMs, toMs int64) (level, error) {
	nowMs := r.pclock.NowMs()
	for _, l := range r.uniqueLevels {
		if l.keep != 0 && fromMs < nowMs-(l.keep+l.width)*1000 {
			continue
		}
		if (toMs-fromMs)/1000/l.width > MaxUniqueSlots {
			continue
		}
		return l, nil
	}
	if len(r.uniqueLevels) == 0 {
		return level{}, fmt.Errorf("%w: unique counts have no slots configured", ErrNoWindow)
	}
	return level{}, fmt.Errorf("%w: unique-count levels are %s", ErrNoWindow, describeLevels(r.uniqueLevels))
}

// Window reads the unique count of the union of keys over
// [fromMs, toMs), widened to whole slots of the finest level that
// covers it: the union of those slots' sketches.
func (u Uniques) Window(keys []string, fromMs, toMs int64) (UniqueRead, error) {
	r := u.r
	if err := r.checkUniqueKeys(keys); err != nil {
		return UniqueRead{}, err
	}
	if fromMs >= toMs {
		return UniqueRead{}, fmt.Errorf("%w: empty range", ErrInvalid)
	}
	l, err := r.pickUniqueLevel(fromMs, toMs)
	if err != nil {
		return UniqueRead{}, err
	}
	from := crdt.SlotStart(fromMs, l.width)
	to := crdt.SlotStart(toMs-1, l.width) + l.width
	nowMs := r.pclock.NowMs()
	out := UniqueRead{Sketch: new(crdt.HLL), From: time.Unix(from, 0), To: time.Unix(to, 0), SlotWidth: time.Duration(l.width) * time.Second,
		Closed: to*1000+r.cfg.Windows.Past.Milliseconds() < nowMs}
	out.ByReplica = map[string]*crdt.HLL{}
	for _, key := range keys {
		err := r.store.SketchSeries(storage.UniquesWindows, key, l.width, from, to, func(b crdt.Slot, replica string, page int, p *crdt.HLLPage) {
			if b.Keep != l.keep || b.Expired(nowMs) {
				return // another level's retention, or gone by rule
			}
			out.add(replica, page, p)
		})
		if err != nil {
			return UniqueRead{}, err
		}
	}
	out.finish()
	out.Estimate = r.chaosEstimate(out.Estimate) // out.Estimate outside a chaos build
	return out, nil
}

// add merges one stored page of replica's sketch into the read.
func (u *UniqueRead) add(replica string, page int, p *crdt.HLLPage) {
	u.Sketch.MergePage(page, p)
	h := u.ByReplica[replica]
	if h == nil {
		h = new(crdt.HLL)
		u.ByReplica[replica] = h
	}
	h.MergePage(page, p)
}

func (u *UniqueRead) finish() {
	for id := range u.ByReplica {
		u.Replicas = append(u.Replicas, id)
	}
	slices.Sort(u.Replicas)
	u.Estimate = u.Sketch.Estimate()
}

// ownPageCacheBytes bounds the writer's cache of its own sketch pages:
// 1,000 keys' sparse pages (three sketches each) fit in a fraction of it,
// dense ones about 150,000 pages.
const ownPageCacheBytes = 48 << 20

package region

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/storage"
)

// Windows is the replica's face for time windows: ranges, window and
// series reads (series.go), trending (trending.go) and slot expiry.
type Windows struct{ r *Replica }

// Windows returns the replica's windows face.
func (r *Replica) Windows() Windows { return Windows{r} }

// Time windows. Every change of a replica's own entry of a like count or a
// counter is also booked, in the same batch, into that replica's own entry
// of the key's slots (crdt.Slot), one per configured level: a 1 s
// slot, a 1 min slot and a 1 h slot by default. Each slot is an
// ordinary PN vector, so it replicates, merges, converges and is repaired
// exactly like the all-time count. Levels are booked side by side rather
// than rolled up from finer ones later: a rollup would have to write other
// replicas' entries, and every level is then exact on its own.
//
// An event is booked at its time: the client's (Op.At, within
// WindowConfig.Past and Future of the replica's clock) or the replica's
// clock. A reconciliation (a concurrent double like taken back by the
// record's winner) is booked at the time of the record's winning action
// (crdt.LikeRecord.BookedMs), so every slot, not only the total, ends as
// if the actions had happened one after the other.
//
// Every change is also booked into the family's total: the slots of the
// key "" (every like, every counter increment).

// WindowLevel is one granularity of slots and how long they are
// kept after they end (zero: forever).
type WindowLevel struct {
	Width time.Duration
	Keep  time.Duration
}

// WindowRule gives the levels of the keys of a family that start with
// Prefix. The rule with the longest matching prefix wins; an empty Levels
// turns windows off for those keys.
type WindowRule struct {
	// Kind is storage.Likes or storage.Counters; zero means both.
	Kind   storage.Kind
	Prefix string
	Levels []WindowLevel
}

// WindowConfig configures time windows and trending.
type WindowConfig struct {
	// Rules pick each key's levels. No rule matching a key: no slots.
	Rules []WindowRule
	// Past and Future bound a client-given event time (Op.At) around the
	// replica's clock. A slot is final only once Past has gone by after
	// its end. Defaults 5 min and 1 min.
	Past, Future time.Duration
	// TrendingCapacity is k, the counters per trending sketch: any key with
	// more than 1/k of a window's additions is a candidate. Default 128.
	TrendingCapacity int
	// Uniques are the slot levels of every key's unique count. Nil
	// means DefaultUniqueLevels; empty turns them off.
	Uniques []WindowLevel
}

// Defaults of WindowConfig.
const (
	DefaultEventPast        = 5 * time.Minute
	DefaultEventFuture      = time.Minute
	DefaultTrendingCapacity = 128
)

// DefaultWindowLevels are the levels every key gets unless configured: 1 s
// slots for 3 hours, 1 min slots for 15 days, 1 h slots for 3 years.
func DefaultWindowLevels() []WindowLevel {
	return []WindowLevel{
		{Width: time.Second, Keep: 3 * time.Hour},
		{Width: time.Minute, Keep: 15 * 24 * time.Hour},
		{Width: time.Hour, Keep: 3 * 365 * 24 * time.Hour},
	}
}

// DefaultWindows is the default WindowConfig: DefaultWindowLevels for every
// key of both families.
func DefaultWindows() *WindowConfig {
	return &WindowConfig{Rules: []WindowRule{{Levels: DefaultWindowLevels()}}}
}

// ErrBadTime: a client-given event time is outside the accepted skew.
var ErrBadTime = errors.New("region: event time out of range")

func (c *WindowConfig) ensureDefaults() {
	if c.Past == 0 {
		c.Past = DefaultEventPast
	}
	if c.Future == 0 {
		c.Future = DefaultEventFuture
	}
	if c.TrendingCapacity == 0 {
		c.TrendingCapacity = DefaultTrendingCapacity
	}
	if c.Uniques == nil {
		c.Uniques = DefaultUniqueLevels()
	}
}

// Validate reports every problem with c.
func (c *WindowConfig) Validate() error {
	var errs []error
	if c.Past < 0 || c.Future < 0 || c.TrendingCapacity < 0 {
		errs = append(errs, errors.New("region: windows: past, future and trending capacity must not be negative"))
	}
	for _, r := range c.Rules {
		if r.Kind != 0 && r.Kind != storage.Likes && r.Kind != storage.Counters {
			errs = append(errs, fmt.Errorf("region: windows: rule %q: kind %q", r.Prefix, r.Kind))
		}
		if r.Prefix != "" && !crdt.ValidID(r.Prefix) {
			errs = append(errs, fmt.Errorf("region: windows: bad prefix %q", r.Prefix))
		}
		errs = append(errs, c.checkLevels(fmt.Sprintf("rule %q", r.Prefix), r.Levels)...)
	}
	errs = append(errs, c.checkLevels("uniques", c.Uniques)...)
	return errors.Join(errs...)
}

func (c *WindowConfig) checkLevels(what string, levels []WindowLevel) []error {
	var errs []error
	seen := map[time.Duration]bool{}
	for _, l := range levels {
		w, k := l.Width, l.Keep
		switch {
		case w < time.Second || w%time.Second != 0 || w > crdt.MaxSlotWidth*time.Second:
			errs = append(errs, fmt.Errorf("region: windows: %s: width %v is not whole seconds in 1s..%v", what, w, crdt.MaxSlotWidth*time.Second))
		case k < 0 || k%time.Second != 0 || k > crdt.MaxSlotKeep*time.Second:
			errs = append(errs, fmt.Errorf("region: windows: %s: keep %v is not whole seconds", what, k))
		case k != 0 && k < c.Past:
			errs = append(errs, fmt.Errorf("region: windows: %s: keep %v is shorter than the accepted event past %v", what, k, c.Past))
		case seen[w]:
			errs = append(errs, fmt.Errorf("region: windows: %s: width %v twice", what, w))
		}
		seen[w] = true
	}
	return errs
}

// level is a WindowLevel in seconds.
type level struct{ width, keep int64 }

// windowRules answers which levels a key has, quickly: rules sorted by
// prefix length, longest first.
type windowRules struct {
	rules []compiledRule
}

type compiledRule struct {
	kind   storage.Kind
	prefix string
	levels []level // finest first
}

func compileLevels(ls []WindowLevel) []level {
	out := make([]level, 0, len(ls))
	for _, l := range ls {
		out = append(out, level{int64(l.Width / time.Second), int64(l.Keep / time.Second)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].width < out[j].width })
	return out
}

func compileWindows(c *WindowConfig) windowRules {
	var wr windowRules
	for _, r := range c.Rules {
		cr := compiledRule{kind: r.Kind, prefix: r.Prefix, levels: compileLevels(r.Levels)}
		wr.rules = append(wr.rules, cr)
	}
	sort.SliceStable(wr.rules, func(i, j int) bool { return len(wr.rules[i].prefix) > len(wr.rules[j].prefix) })
	return wr
}

// levels returns the levels of key in family kind (Likes or Counters).
func (w *windowRules) levels(kind storage.Kind, key string) []level {
	for i := range w.rules {
		r := &w.rules[i]
		if (r.kind == 0 || r.kind == kind) && strings.HasPrefix(key, r.prefix) {
			return r.levels
		}
	}
	return nil
}

// bookingTxn is the batch's bookings into slots: changes of own
// entries, folded per (family, key, second).
type bookingTxn struct {
	noHooks
	bookings    map[booking]*int64
	bookOrder   []booking
	lastBookKey booking
	lastBook    *int64
}

// settle books the folded changes into the slots' vectors.
func (*bookingTxn) settle(t *txn) error { return t.flushBookings() }

// booking is a change to book into slots at commit.
type booking struct {
	kind storage.Kind // Likes or Counters
	key  string
	sec  int64 // unix seconds of the event
}

// book records that the own entry of (kind, key) moved by delta because of
// an event at atMs. The txn folds bookings and writes the slots at commit.
func (t *txn) book(kind storage.Kind, key string, atMs, delta int64) {
	if delta == 0 || len(t.r.windows.rules) == 0 || kind == storage.Budgets {
		return
	}
	atMs = t.chaosBookingTime(kind, atMs)
	b := booking{kind, key, crdt.SlotStart(atMs, 1)}
	if t.lastBook != nil && t.lastBookKey == b {
		*t.lastBook += delta
		return
	}
	if t.bookings == nil {
		t.bookings = make(map[booking]*int64)
	}
	p, ok := t.bookings[b]
	if !ok {
		p = new(int64)
		t.bookings[b] = p
		t.bookOrder = append(t.bookOrder, b)
	}
	*p += delta
	t.lastBookKey, t.lastBook = b, p
}

// flushBookings applies the folded bookings to the slots' own entries.
// A family's total is booked once per (family, second), after the keys.
func (t *txn) flushBookings() error {
	var name []byte
	type totalKey struct {
		kind storage.Kind
		sec  int64
	}
	var totals map[totalKey]int64
	var totalOrder []totalKey
	bookKey := func(kind storage.Kind, key string, sec, d int64) error {
		for _, l := range t.r.windows.levels(kind, key) {
			bk := crdt.Slot{Key: key, Width: l.width, Start: crdt.SlotStart(sec*1000, l.width), Keep: l.keep}
			if bk.Expired(t.nowMs) {
				continue
			}
			name = bk.AppendName(name[:0])
			vs, err := t.vector(kind.Windows(), string(name))
			if err != nil {
				return err
			}
			vs.cur = vs.cur.Add(t.r.self, d)
			vs.deleted = false
			vs.slot, vs.parsed = bk, true
		}
		return nil
	}
	for _, b := range t.bookOrder {
		d := *t.bookings[b]
		if d == 0 {
			continue
		}
		if err := bookKey(b.kind, b.key, b.sec, d); err != nil {
			return err
		}
		tk := totalKey{b.kind, b.sec}
		if totals == nil {
			totals = make(map[totalKey]int64)
		}
		if _, ok := totals[tk]; !ok {
			totalOrder = append(totalOrder, tk)
		}
		totals[tk] += d
	}
	for _, tk := range totalOrder {
		if d := totals[tk]; d != 0 {
			if err := bookKey(tk.kind, "", tk.sec, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkAt checks a client-given event time against the replica's clock.
func (t *txn) checkAt(atMs int64, imported bool) error {
	if atMs == 0 {
		return nil
	}
	c := t.r.cfg.Windows
	if imported && atMs > 0 && atMs <= t.nowMs+c.Future.Milliseconds() {
		return nil // a backfill: any past (Op.Import)
	}
	if atMs < t.nowMs-c.Past.Milliseconds() || atMs > t.nowMs+c.Future.Milliseconds() {
		return fmt.Errorf("%w: %s is not within %v before and %v after this replica's clock (%s)", ErrBadTime,
			time.UnixMilli(atMs).UTC().Format(time.RFC3339Nano), c.Past, c.Future, time.UnixMilli(t.nowMs).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// atOr is the event's time: the client's, or the writer's clock.
func (t *txn) atOr(atMs int64) int64 {
	if atMs != 0 {
		return atMs
	}
	return t.nowMs
}

// SlotExpired reports whether a vector name is a slot past its
// retention by this replica's clock (false for any other name).
func (w Windows) SlotExpired(name string) bool {
	r := w.r
	b, ok := crdt.ParseSlot(name)
	return ok && b.Expired(r.pclock.NowMs())
}

// expireWindow deletes a slot the sweeper found expired, if it
// still is (a booking in the same batch cannot make an expired slot live
// again: flushBookings skips expired slots).
func (t *txn) expireWindow(ref storage.WindowRef) (bool, error) {
	b, ok := crdt.ParseSlot(ref.Name)
	if ok && ref.Kind == storage.UniquesWindows && b.Expired(t.nowMs) {
		return true, t.expireSketch(ref)
	}
	if !ok || !ref.Kind.IsWindows() || !b.Expired(t.nowMs) {
		return false, nil
	}
	vs, err := t.vector(ref.Kind, ref.Name)
	if err != nil {
		return false, err
	}
	vs.cur, vs.deleted = nil, true
	return true, nil
}

// sweepWindowsEvery is how often the sweeper deletes expired slots.
const sweepWindowsEvery = 10 * time.Second

// sweepWindows runs until Close, deleting expired slots and
// trending sketches past their keep.
func (r *Replica) sweepWindows() {
	r.sweepEvery(sweepWindowsEvery, "slots", func(ctx context.Context) (int, error) {
		r.trends.prune(r.pclock.NowMs())
		return r.Windows().Expire(ctx)
	})
}

// Expire deletes every slot past its retention and returns
// how many it deleted. The sweeper calls it; so can a test.
func (w Windows) Expire(ctx context.Context) (int, error) {
	r := w.r
	return r.sweep(ctx, r.metrics.slotsExpired, func() (*request, int, error) {
		refs, err := r.store.ExpiredWindows(r.pclock.NowMs(), sweepPage)
		return &request{expireWin: refs}, len(refs), err
	})
}

// Range turns "the last d" into aligned bounds: the d/width latest
// slots of the finest level that covers d, the current one included.
func (w Windows) Range(kind storage.Kind, key string, last time.Duration) (fromMs, toMs int64, err error) {
	r := w.r
	nowMs := r.pclock.NowMs()
	l, err := r.pickLevel(kind, key, nowMs-last.Milliseconds(), nowMs, 0)
	if err != nil {
		return 0, 0, err
	}
	to := (crdt.SlotStart(nowMs, l.width) + l.width) * 1000
	n := (last.Milliseconds() + l.width*1000 - 1) / (l.width * 1000)
	return to - n*l.width*1000, to, nil
}

// Of reads the net change of (kind, key) in [fromMs, toMs), widened
// to whole slots of the finest level that covers it. key "" is the
// family's total.
func (w Windows) Of(kind storage.Kind, key string, fromMs, toMs int64) (Window, error) {
	return w.r.series(kind, key, fromMs, toMs, 0)
}

// Series reads (kind, key) in [fromMs, toMs) as points of step (a multiple
// of a level's width).
func (w Windows) Series(kind storage.Kind, key string, fromMs, toMs int64, step time.Duration) (Window, error) {
	r := w.r
	if step < time.Second || step%time.Second != 0 {
		return Window{}, fmt.Errorf("%w: step %v is not whole seconds", ErrInvalid, step)
	}
	return r.series(kind, key, fromMs, toMs, int64(step/time.Second))
}

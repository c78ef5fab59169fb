package region

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
	"github.com/tally-dev/tally/storage"
)

// Trending: the top keys of a family by their net change over a window.
//
// Candidates come from Space-Saving sketches (Metwally et al.), one per
// (family, class, replica, minute or hour). Each sketch summarises the
// additions that replica's entries of the family's 1 min (or 1 h) slots
// received, as this replica has seen them: its own bookings and every
// merge that raised a peer's entry. A sketch keeps k counters, so any key
// with more than 1/k of the sketch's additions is in it. A key with more
// than 1/k of a window's additions over a set of replicas has more than 1/k
// of some (replica, interval)'s additions, so it is in that sketch: the
// union of the window's sketches never misses it. The candidates are then
// re-scored from the slots, so every reported count is exact.
//
// The sketches are local indexes, like the reconciliation markers: every
// replica builds its own from the same slots, and once they have
// converged every replica has fed the same additions. A restart rebuilds
// them from the stored slots.
//
// A counter's class is its key up to and including the first ':' ("views:"
// for "views:v1"), or "" if it has none: a sketch per class keeps a prefix's
// keys from being crowded out by another's.

// Sketch levels: which slot width feeds a level's sketches, the interval
// each sketch covers (its width), and how long sketches are kept after
// their interval ends (the longest trending window they serve). The day
// level is fed by the 1 h slots: one sketch per UTC day rather than 24
// hourly ones is what makes a week or a month of candidates cheap to keep
// (a sketch is k counters whatever its interval), and a window of whole
// days is still a partition of its days' sketches, so the guarantee holds.
// The day level is kept 31 days, not the 1 h slots' years: sketches are
// memory (per family, class and replica) and a restart rebuilds them by
// reading every slot they cover.
var trendLevels = [...]struct{ slot, width, keep int64 }{
	{60, 60, 2 * 3600},
	{3600, 3600, 49 * 3600},
	{3600, 86400, 31 * 86400},
}

// maxClasses bounds the classes per family and interval; further ones
// share the class "*".
const maxClasses = 64

type sketchKey struct {
	kind    storage.Kind // Likes or Counters
	class   string
	replica string
	width   int64
	start   int64
}

// trends holds the sketches. The writer feeds them after each commit;
// readers take candidates under mu.
type trends struct {
	k  int
	mu sync.Mutex
	m  map[sketchKey]*spaceSaving
	// classes counts the classes per (kind, width, start), for maxClasses.
	classes map[sketchKey]int
}

func newTrends(k int) *trends {
	return &trends{k: k, m: make(map[sketchKey]*spaceSaving), classes: make(map[sketchKey]int)}
}

// classOf is a counter's class; likes have one class.
func classOf(kind storage.Kind, key string) string {
	if kind == storage.Likes {
		return ""
	}
	if i := strings.IndexByte(key, ':'); i >= 0 {
		return key[:i+1]
	}
	return ""
}

// trendLevel reports whether slots of width feed any sketch level.
func trendLevel(width int64) bool {
	for _, l := range trendLevels {
		if l.slot == width {
			return true
		}
	}
	return false
}

// feed adds a raise of the P half of replica's entry of slot b (of base
// family kind) to the sketch of every level b feeds whose interval is
// still kept at nowMs (a backfill of an older time feeds none of them).
func (tr *trends) feed(kind storage.Kind, b crdt.Slot, replica string, dp uint64, nowMs int64) {
	if b.Key == "" || dp == 0 {
		return
	}
	for _, l := range trendLevels {
		if l.slot != b.Width {
			continue
		}
		start := crdt.SlotStart(b.Start*1000, l.width)
		if (start+l.width+l.keep)*1000 < nowMs {
			continue
		}
		tr.feedSketch(sketchKey{kind: kind, class: classOf(kind, b.Key), replica: replica, width: l.width, start: start}, b.Key, dp)
	}
}

func (tr *trends) feedSketch(sk sketchKey, key string, dp uint64) {
	s, ok := tr.m[sk]
	if !ok {
		ck := sketchKey{kind: sk.kind, replica: sk.replica, width: sk.width, start: sk.start}
		if tr.classes[ck] >= maxClasses {
			sk.class = "*"
			s, ok = tr.m[sk]
		}
		if !ok {
			s = newSpaceSaving(tr.k)
			tr.m[sk] = s
			tr.classes[ck]++
		}
	}
	s.add(key, dp)
}

// len is how many sketches tr holds.
func (tr *trends) len() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.m)
}

// maxSketches bounds the sketches of one family and one replica, however
// old or spread out the events fed: a sketch is made only for an
// interval its level still keeps (feed), and prune drops it once its keep
// has gone by, so a level holds at most its keep's intervals, the one
// running, one ending and one ahead (an event up to WindowConfig.Future
// ahead), each with at most maxClasses classes and "*". A backfill of
// years of history adds no sketch beyond it.
func maxSketches() int {
	n := 0
	for _, l := range trendLevels {
		n += (int(l.keep/l.width) + 3) * (maxClasses + 1)
	}
	return n
}

// prune drops sketches older than their level keeps.
func (tr *trends) prune(nowMs int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for k := range tr.m {
		for _, l := range trendLevels {
			if k.width == l.width && (k.start+k.width+l.keep)*1000 < nowMs {
				delete(tr.m, k)
				ck := k
				ck.class = ""
				if tr.classes[ck]--; tr.classes[ck] <= 0 {
					delete(tr.classes, ck)
				}
			}
		}
	}
}

// candidates is the union of the keys of the sketches of kind over
// [from, to) at width whose class may hold keys with prefix, of the
// replicas accepted.
func (tr *trends) candidates(kind storage.Kind, prefix string, width, from, to int64, replica func(string) bool) map[string]bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string]bool)
	for k, s := range tr.m {
		if k.kind != kind || k.width != width || k.start < from || k.start >= to || !replica(k.replica) {
			continue
		}
		if k.class != "*" && !strings.HasPrefix(prefix, k.class) && !strings.HasPrefix(k.class, prefix) && k.class != "" {
			continue
		}
		for _, e := range s.heap {
			if strings.HasPrefix(e.key, prefix) {
				out[e.key] = true
			}
		}
	}
	return out
}

// spaceSaving is the Space-Saving summary with k counters: when full, a
// new key replaces the key with the smallest count and inherits that count
// plus its own. The counters are a min-heap on count, so an eviction costs
// O(log k).
type spaceSaving struct {
	k    int
	pos  map[string]int // key -> index in heap
	heap []ssEntry
}

type ssEntry struct {
	key   string
	count uint64
}

func newSpaceSaving(k int) *spaceSaving {
	return &spaceSaving{k: k, pos: make(map[string]int, k), heap: make([]ssEntry, 0, k)}
}

func (s *spaceSaving) add(key string, n uint64) {
	if i, ok := s.pos[key]; ok {
		s.heap[i].count += n
		s.down(i)
		return
	}
	if len(s.heap) < s.k {
		s.heap = append(s.heap, ssEntry{key, n})
		s.pos[key] = len(s.heap) - 1
		s.up(len(s.heap) - 1)
		return
	}
	// Replace the minimum (the root): the newcomer inherits its count.
	delete(s.pos, s.heap[0].key)
	s.heap[0] = ssEntry{key, s.heap[0].count + n}
	s.pos[key] = 0
	s.down(0)
}

func (s *spaceSaving) less(i, j int) bool {
	a, b := s.heap[i], s.heap[j]
	return a.count < b.count || a.count == b.count && a.key < b.key
}

func (s *spaceSaving) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.pos[s.heap[i].key], s.pos[s.heap[j].key] = i, j
}

func (s *spaceSaving) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *spaceSaving) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(s.heap) {
			return
		}
		m := l
		if r := l + 1; r < len(s.heap) && s.less(r, l) {
			m = r
		}
		if !s.less(m, i) {
			return
		}
		s.swap(i, m)
		i = m
	}
}

// trendTxn feeds the trending sketches once a batch is durable: it has no
// overlay of its own and reads the slots' vectors.
type trendTxn struct{ noHooks }

func (*trendTxn) publish(t *txn) { t.feedTrends() }

// feedTrends feeds the sketches from a commit's slots: every raise
// of a P half of a 1 min or 1 h slot. Writer only.
func (t *txn) feedTrends() {
	tr := t.r.trends
	locked := false
	for _, k := range t.order {
		if !k.kind.IsWindows() {
			continue
		}
		vs := t.vecs[k]
		if vs.deleted {
			continue
		}
		if !vs.parsed {
			vs.slot, _ = crdt.ParseSlot(k.item)
			vs.parsed = true
		}
		b := vs.slot
		if b.Key == "" || !trendLevel(b.Width) {
			continue
		}
		for _, e := range vs.cur {
			dp := e.P - min(e.P, vs.orig.Get(e.Replica).P)
			if dp == 0 {
				continue
			}
			if !locked {
				tr.mu.Lock()
				locked = true
			}
			tr.feed(k.kind.Base(), b, e.Replica, dp, t.nowMs)
		}
	}
	if locked {
		tr.mu.Unlock()
	}
}

// rebuildTrends feeds the sketches from the stored slots of the last
// sketch retention, after a restart. It reads every 1 min slot of the
// last 2 h and 1 h slot of the last 32 days (the day level's 31 days
// and the day under way): at start, time in proportion to the keys
// written then.
func (r *Replica) rebuildTrends() error {
	nowMs := r.pclock.NowMs()
	seen := map[storage.WindowRef]bool{}
	var refs []storage.WindowRef
	for _, rule := range r.windows.rules {
		for _, l := range rule.levels {
			if !trendLevel(l.width) {
				continue
			}
			// The oldest interval a level fed by these slots still keeps.
			oldest := crdt.SlotStart(nowMs, l.width)
			for _, tl := range trendLevels {
				if tl.slot == l.width {
					oldest = min(oldest, crdt.SlotStart(nowMs-(tl.keep+tl.width)*1000, tl.width))
				}
			}
			// Slots of one (width, keep) expire in start order.
			from := crdt.Slot{Width: l.width, Keep: l.keep, Start: oldest - l.width}
			to := crdt.Slot{Width: l.width, Keep: l.keep, Start: crdt.SlotStart(nowMs, l.width) + 2*l.width}
			got, err := r.store.WindowsExpiringIn(storage.WindowIndexMs(from), storage.WindowIndexMs(to), func(ref storage.WindowRef) bool {
				b, ok := crdt.ParseSlot(ref.Name)
				return ok && b.Key != "" && b.Width == l.width && b.Keep == l.keep && !seen[ref]
			})
			if err != nil {
				return fmt.Errorf("rebuild trending: %w", err)
			}
			for _, ref := range got {
				seen[ref] = true
				refs = append(refs, ref)
			}
		}
	}
	r.trends.mu.Lock()
	defer r.trends.mu.Unlock()
	for _, ref := range refs {
		v, err := r.store.Vector(ref.Kind, ref.Name)
		if err != nil {
			return fmt.Errorf("rebuild trending: %w", err)
		}
		b, _ := crdt.ParseSlot(ref.Name)
		for _, e := range v {
			r.trends.feed(ref.Kind.Base(), b, e.Replica, e.P, nowMs)
		}
	}
	return nil
}

// Ranked is one key of a trending list with its exact net change.
type Ranked struct {
	Key   string
	Count int64
}

// Trending is the answer to a trending read.
type Trending struct {
	From, To time.Time
	Items    []Ranked
	// Candidates is how many keys the sketches offered and were scored.
	Candidates int
	// Capacity is k: a key with more than 1/k of the window's additions
	// (in the replicas asked about) is never missed.
	Capacity int
	// AllTime: the list was computed by scanning every all-time count.
	AllTime bool
	// Closed: the window ended more than WindowConfig.Past ago.
	Closed bool
	// PartsCut: Items holds the parts of only n of the split items
	// counted here (topN), so a reader's sum of a split item may be
	// short.
	PartsCut bool
}

// MaxTrendingN caps n.
const MaxTrendingN = 1000

// Trending lists the n keys of family kind (starting with prefix) with the
// largest net change over the last `last` (aligned to whole minutes up to
// 2 h, whole hours up to 49 h, whole UTC days up to 31 days, today
// included), counting only the entries of replicas that
// replica accepts (nil: all). last 0 ranks all-time counts.
func (w Windows) Trending(kind storage.Kind, prefix string, last time.Duration, n int, replica func(string) bool) (Trending, error) {
	r := w.r
	if err := r.Err(); err != nil {
		return Trending{}, err
	}
	if kind != storage.Likes && kind != storage.Counters || prefix != "" && !crdt.ValidID(prefix) {
		return Trending{}, fmt.Errorf("%w: bad trending family %c or prefix %q", ErrInvalid, kind, prefix)
	}
	if n < 1 || n > MaxTrendingN {
		return Trending{}, fmt.Errorf("%w: n %d outside 1..%d", ErrInvalid, n, MaxTrendingN)
	}
	if replica == nil {
		replica = func(string) bool { return true }
	}
	out := Trending{Capacity: r.trends.k}
	if last == 0 {
		return r.trendingAllTime(kind, prefix, n, replica)
	}
	var width, slot int64
	for _, l := range trendLevels {
		if last <= time.Duration(l.keep)*time.Second {
			width, slot = l.width, l.slot
			break
		}
	}
	if width == 0 || last < 0 {
		return Trending{}, fmt.Errorf("%w: trending window %v; at most %v, or all time", ErrNoWindow, last,
			time.Duration(trendLevels[len(trendLevels)-1].keep)*time.Second)
	}
	nowMs := r.pclock.NowMs()
	to := crdt.SlotStart(nowMs, width) + width
	from := to - (last.Milliseconds()+width*1000-1)/(width*1000)*width
	out.From, out.To = time.Unix(from, 0), time.Unix(to, 0)
	out.Closed = to*1000+r.cfg.Windows.Past.Milliseconds() <= nowMs
	cands := r.trends.candidates(kind, prefix, width, from, to, replica)
	out.Candidates = len(cands)
	for key := range cands {
		if !r.servesKey(key) {
			continue
		}
		var sum int64
		var vec crdt.Vector
		err := r.store.WindowSeries(kind.Windows(), key, slot, from, to, func(b crdt.Slot, v crdt.Vector) {
			if !b.Expired(nowMs) {
				vec = addVectors(vec, v)
			}
		})
		if err != nil {
			return Trending{}, fmt.Errorf("trending: %w", err)
		}
		for _, e := range vec {
			if replica(e.Replica) {
				sum += int64(e.P) - int64(e.N)
			}
		}
		if sum > 0 {
			out.Items = append(out.Items, Ranked{key, sum})
		}
	}
	out.Items, out.PartsCut = topN(out.Items, n)
	return out, nil
}

func (r *Replica) trendingAllTime(kind storage.Kind, prefix string, n int, replica func(string) bool) (Trending, error) {
	out := Trending{Capacity: r.trends.k, AllTime: true}
	err := r.store.ScanVectorsOf(kind, r.cfg.Holds, func(item string, v crdt.Vector) bool {
		if !strings.HasPrefix(item, prefix) || !r.servesKey(item) {
			return true
		}
		out.Candidates++
		var sum int64
		for _, e := range v {
			if replica(e.Replica) {
				sum += int64(e.P) - int64(e.N)
			}
		}
		if sum > 0 {
			out.Items = append(out.Items, Ranked{item, sum})
			if len(out.Items) > 4*n+1024 {
				var cut bool
				out.Items, cut = topN(out.Items, n)
				out.PartsCut = out.PartsCut || cut
			}
		}
		return true
	})
	if err != nil {
		return Trending{}, fmt.Errorf("trending: %w", err)
	}
	var cut bool
	out.Items, cut = topN(out.Items, n)
	out.PartsCut = out.PartsCut || cut
	return out, nil
}

// servesKey reports whether this replica holds key's shard (Config.Holds;
// every key in a region that is not sharded). Trending ranks only those:
// a replica keeps the data of a shard it left when it was down as the
// settled map was written (it never drops it), and that stale view,
// answered beside the holders', could outrank theirs in the gather.
func (r *Replica) servesKey(key string) bool {
	return r.cfg.Holds == nil || r.cfg.Holds(shard.Of(key))
}

// topN keeps the n keys of the largest counts (by count, then key)
// among the whole ones, and every part (crdt.PartName) of the n split
// items of the largest sums here. A split item's parts take no place of
// a whole key's: a replica holding some of the parts sees only part of
// the item's count, so the reader (httpapi) sums the parts across the
// replicas holding each, then ranks the item. cut reports that parts of
// more split items were dropped: a split item whose parts rank low on
// every replica holding them may then be summed short or missed.
func topN(items []Ranked, n int) (kept []Ranked, cut bool) {
	whole, parts := items[:0:0], items[:0:0]
	for _, it := range items {
		if strings.IndexByte(it.Key, crdt.PartSep) >= 0 {
			parts = append(parts, it)
		} else {
			whole = append(whole, it)
		}
	}
	if len(parts) == 0 {
		whole = items
	}
	sort.Slice(whole, func(i, j int) bool {
		if whole[i].Count != whole[j].Count {
			return whole[i].Count > whole[j].Count
		}
		return whole[i].Key < whole[j].Key
	})
	whole = whole[:min(n, len(whole))]
	if len(parts) == 0 {
		return whole, false
	}
	parts, cut = topNParts(parts, n)
	return append(whole, parts...), cut
}

// topNParts keeps every part of the n split items of the largest sums
// of the parts given, by sum then item; cut reports it dropped some.
func topNParts(parts []Ranked, n int) (kept []Ranked, cut bool) {
	total := make(map[string]int64, len(parts))
	for _, it := range parts {
		total[crdt.ItemOf(it.Key)] += it.Count
	}
	sort.Slice(parts, func(i, j int) bool {
		a, b := crdt.ItemOf(parts[i].Key), crdt.ItemOf(parts[j].Key)
		if total[a] != total[b] {
			return total[a] > total[b]
		}
		if a != b {
			return a < b
		}
		return parts[i].Key < parts[j].Key
	})
	groups := 0
	for i, it := range parts {
		if i == 0 || crdt.ItemOf(it.Key) != crdt.ItemOf(parts[i-1].Key) {
			if groups == n {
				return parts[:i], true
			}
			groups++
		}
	}
	return parts, false
}

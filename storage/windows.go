package storage

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// Slots (crdt.Slot) are vectors of the windows kinds, stored like
// every vector. One more key per slot lists it by expiry, so the sweeper
// reads only what is due:
//
//	u/<16 hex expiry ms>/<kind>/<slot name>  (empty)
const prefixWindowExpiry = 'u'

func appendWindowExpiryKey(dst []byte, ms int64, k Kind, name string) []byte {
	dst = append(dst, prefixWindowExpiry, '/')
	dst = appendHex16(dst, uint64(ms))
	dst = append(dst, '/', byte(k), '/')
	return append(dst, name...)
}

// foreverMs is where slots kept forever sit in the expiry index: past
// any clock, so the sweeper never reaches them, and still in start order
// for WindowsExpiringIn.
const foreverMs = int64(1) << 50

// WindowIndexMs is a slot's place in the expiry index: its expiry, or
// for a slot kept forever, foreverMs plus its end.
func WindowIndexMs(b crdt.Slot) int64 {
	if e := b.ExpiresMs(); e != 0 {
		return e
	}
	return foreverMs + (b.Start+b.Width)*1000
}

// IndexWindow lists a new slot in the expiry index. The writer
// calls it when it first stores a slot.
func (b *Batch) IndexWindow(k Kind, name string) {
	bk, ok := crdt.ParseSlot(name)
	if !ok {
		return
	}
	b.kbuf = appendWindowExpiryKey(b.kbuf[:0], WindowIndexMs(bk), k, name)
	_ = b.b.Set(b.kbuf, nil, nil)
}

// DeleteVector deletes every entry of a vector (old is its stored value),
// updating the digests, and a slot's expiry index entry.
func (b *Batch) DeleteVector(k Kind, item string, old crdt.Vector) {
	for _, e := range old {
		b.kbuf = appendVectorEntryKey(b.kbuf[:0], k, item, e.Replica)
		b.obuf = crdt.AppendPN(b.obuf[:0], e.PN)
		b.digest(b.kbuf, b.obuf, nil)
		_ = b.b.Delete(b.kbuf, nil)
	}
	if bk, ok := crdt.ParseSlot(item); ok && k.IsWindows() {
		b.kbuf = appendWindowExpiryKey(b.kbuf[:0], WindowIndexMs(bk), k, item)
		_ = b.b.Delete(b.kbuf, nil)
	}
}

// WindowRef names one stored slot.
type WindowRef struct {
	Kind Kind
	Name string
}

// ExpiredWindows lists up to limit slots whose expiry is at or
// before nowMs, oldest first (never one kept forever).
func (s *Store) ExpiredWindows(nowMs int64, limit int) ([]WindowRef, error) {
	return s.windowsByExpiry(0, nowMs+1, limit, nil)
}

// WindowsExpiringIn lists the slots whose WindowIndexMs is in
// [fromMs, toMs) and that fn accepts. A replica rebuilding what it keeps
// about recent slots uses it: the slots of one (width, keep) are
// listed in the order they start.
func (s *Store) WindowsExpiringIn(fromMs, toMs int64, fn func(WindowRef) bool) ([]WindowRef, error) {
	return s.windowsByExpiry(fromMs, toMs, 0, fn)
}

func (s *Store) windowsByExpiry(fromMs, toMs int64, limit int, keep func(WindowRef) bool) ([]WindowRef, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("list slots: %w", ErrClosed)
	}
	lower := appendWindowExpiryKey(nil, max(fromMs, 0), 0, "")[:18]
	upper := appendWindowExpiryKey(nil, max(toMs, 0), 0, "")[:18]
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("list slots: %w", err)
	}
	var out []WindowRef
	for it.First(); it.Valid() && (limit <= 0 || len(out) < limit); it.Next() {
		key := it.Key()
		if len(key) < 22 || key[18] != '/' || key[20] != '/' {
			_ = it.Close()
			return nil, fmt.Errorf("list slots: malformed index key %q", key)
		}
		ref := WindowRef{Kind: Kind(key[19]), Name: string(key[21:])}
		if keep == nil || keep(ref) {
			out = append(out, ref)
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("list slots: %w", err)
	}
	return out, nil
}

// WindowSeries calls fn, in start order, for every stored slot of
// kind k (a windows kind), key and width with a start in [from, to) (unix
// seconds), with its vector. Slots of one start but different keeps are
// separate vectors, each passed on its own.
func (s *Store) WindowSeries(k Kind, key string, width, from, to int64, fn func(b crdt.Slot, v crdt.Vector)) error {
	if s.closed.Load() {
		return fmt.Errorf("read series %s/%s: %w", k, key, ErrClosed)
	}
	if from >= to {
		return nil
	}
	series := crdt.SeriesPrefix(key, width)
	base := vectorPrefix(k, series) // "b<B>/v/<k>/<key>#<width>./": drop the '/'
	base = base[:len(base)-1]
	lower := append(append([]byte(nil), base...), crdt.StartName(max(from, 0))...)
	upper := append(append([]byte(nil), base...), crdt.StartName(max(to, 0))...)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("read series %s/%s: %w", k, key, err)
	}
	defer it.Close()
	prefixLen := len(base) - len(series)
	var cur []byte
	var vec crdt.Vector
	flush := func() error {
		if cur == nil {
			return nil
		}
		b, ok := crdt.ParseSlot(string(cur))
		if !ok {
			return fmt.Errorf("read series %s/%s: malformed slot %q", k, key, cur)
		}
		fn(b, vec)
		return nil
	}
	for it.First(); it.Valid(); it.Next() {
		rest := it.Key()[prefixLen:]
		i := bytes.LastIndexByte(rest, '/')
		if i < 0 {
			return fmt.Errorf("read series %s/%s: malformed key %q", k, key, it.Key())
		}
		name, replica := rest[:i], string(rest[i+1:])
		if !bytes.Equal(name, cur) {
			if err := flush(); err != nil {
				return err
			}
			cur, vec = append(cur[:0], name...), nil
		}
		e, err := crdt.DecodePN(it.Value())
		if err != nil {
			return fmt.Errorf("read series %s/%s entry %q: %w", k, key, it.Key(), err)
		}
		vec = vec.Set(replica, e)
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("read series %s/%s: %w", k, key, err)
	}
	return flush()
}

// ScanVectors calls fn for every all-time vector of kind k (Likes or
// Counters), segment by segment, until fn returns false. It reads the whole
// family: a full scan, for rare reads such as all-time leaderboards.
func (s *Store) ScanVectors(k Kind, fn func(item string, v crdt.Vector) bool) error {
	_, _, err := s.scanVectors(k, 0, "", Segments, nil, fn)
	return err
}

// ScanVectorsOf is ScanVectors over the shards in only (nil: every
// one): a replica of a sharded region reads the shards it holds,
// skipping the others' segments without a seek.
func (s *Store) ScanVectorsOf(k Kind, in func(shard int) bool, fn func(item string, v crdt.Vector) bool) error {
	var segs func(int) bool
	if in != nil {
		segs = func(seg int) bool { return in(seg / SegmentsPerShard) }
	}
	_, _, err := s.scanVectors(k, 0, "", Segments, segs, fn)
	return err
}

// ScanVectorsFrom is ScanVectors by pages: it starts in segment seg after
// item after ("": at the segment's start) and reads at most maxSegs
// segments, until fn returns false (the item it returned false on is
// taken). It returns where the next page starts: next == Segments once
// every segment was read. Items are in key order within a segment, so a
// page resumed after an item never visits it again.
func (s *Store) ScanVectorsFrom(k Kind, seg int, after string, maxSegs int, fn func(item string, v crdt.Vector) bool) (next int, nextAfter string, err error) {
	return s.scanVectors(k, seg, after, maxSegs, nil, fn)
}

// scanVectors is ScanVectorsFrom reading only the segments in says (nil:
// every one).
func (s *Store) scanVectors(k Kind, seg int, after string, maxSegs int, in func(seg int) bool, fn func(item string, v crdt.Vector) bool) (next int, nextAfter string, err error) {
	if s.closed.Load() {
		return seg, after, fmt.Errorf("scan %s: %w", k, ErrClosed)
	}
	// One iterator for every segment, sought to each in turn: a new
	// iterator per segment cost more than the items on a store of few
	// (BenchmarkScanVectors).
	it, err := s.db.NewIter(nil)
	if err != nil {
		return seg, after, fmt.Errorf("scan %s: %w", k, err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("scan %s: %w", k, cerr)
		}
	}()
	for end := min(seg+max(maxSegs, 1), Segments); seg < end; seg, after = seg+1, "" {
		if in != nil && !in(seg) {
			continue
		}
		prefix := append(segmentPrefix(seg), prefixVector, '/', byte(k), '/')
		from := prefix
		if after != "" {
			// Past every entry of after: its keys are after/<replica>.
			from = append(append(bytes.Clone(prefix), after...), '/', 0xff)
		}
		var cur string
		var vec crdt.Vector
		stop := false
		for valid := it.SeekGE(from); valid && !stop && bytes.HasPrefix(it.Key(), prefix); valid = it.Next() {
			rest := it.Key()[len(prefix):]
			i := bytes.LastIndexByte(rest, '/')
			if i < 0 {
				return seg, after, fmt.Errorf("scan %s: malformed key %q", k, it.Key())
			}
			if string(rest[:i]) != cur {
				if cur != "" {
					stop = !fn(cur, vec)
					after = cur
				}
				cur, vec = string(rest[:i]), nil
			}
			e, err := crdt.DecodePN(it.Value())
			if err != nil {
				return seg, after, fmt.Errorf("scan %s: %q: %w", k, it.Key(), err)
			}
			vec = vec.Set(string(rest[i+1:]), e)
		}
		if err := it.Error(); err != nil {
			return seg, after, fmt.Errorf("scan %s: %w", k, err)
		}
		if cur != "" && !stop {
			stop = !fn(cur, vec)
			after = cur
		}
		if stop {
			return seg, after, nil
		}
	}
	return seg, "", nil
}

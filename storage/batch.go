package storage

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// Batch is an atomic group of writes. It is not safe for concurrent use.
//
// Writes of replicated state take the value they replace, so the batch can
// carry the change to the segment digests along; the caller (one writer per
// store) knows it already, and a read here would cost a lookup per write.
type Batch struct {
	s    *Store
	b    *pebble.Batch
	buf  []byte       // value scratch (pebble copies keys and values in)
	kbuf []byte       // key scratch
	obuf []byte       // old value scratch
	dx   *digestDelta // digest changes, from the store's pool; nil until the first

	events []Event // logged by LogEvent, written by Commit

	flags map[string]crdt.Flag     // flags written (PutFlag), published by Commit
	types map[string]crdt.TypeMeta // types written (PutType), published by Commit
}

// digestDelta accumulates a batch's digest changes by segment. An array
// rather than a map: a batch of thousands of records touches most of the
// 4096 segments, and the map's growth was a tenth of the writer's
// allocations. Pooled per store, since 32 KiB per small batch is not.
type digestDelta struct {
	d       [Segments]uint64
	touched []uint16 // segments changed, possibly repeated
}

// NewBatch starts an empty batch.
func (s *Store) NewBatch() *Batch { return &Batch{s: s, b: s.db.NewBatch()} }

func (b *Batch) digest(key, old, val []byte) {
	seg, _ := segmentOfKey(key)
	if b.dx == nil {
		b.dx = b.s.dxPool.Get().(*digestDelta)
	}
	var d uint64
	if val != nil { // nil: the key is deleted
		d = entryHash(key, val)
	}
	if old != nil {
		d ^= entryHash(key, old)
	}
	if b.dx.d[seg] == 0 {
		b.dx.touched = append(b.dx.touched, uint16(seg))
	}
	b.dx.d[seg] ^= d
}

// PutVectorEntry writes replica's absolute entry of a vector, replacing old
// (the zero PN if there was none).
func (b *Batch) PutVectorEntry(k Kind, item, replica string, old, e crdt.PN) {
	if b.s.vfilter != nil {
		b.s.vfilter.addVector(k, item) // before the commit makes the entry visible
	}
	b.kbuf = appendVectorEntryKey(b.kbuf[:0], k, item, replica)
	var oldb []byte
	if old != (crdt.PN{}) {
		b.obuf = crdt.AppendPN(b.obuf[:0], old)
		oldb = b.obuf
	}
	b.buf = crdt.AppendPN(b.buf[:0], e)
	b.digest(b.kbuf, oldb, b.buf)
	_ = b.b.Set(b.kbuf, b.buf, nil)
}

// PutLikeRecord writes a user's record, replacing old (nil if none).
func (b *Batch) PutLikeRecord(item, user string, old, r *crdt.LikeRecord) {
	putRecord(b, appendRecordKey(b.kbuf[:0], item, user), item, user, old, r, crdt.AppendLikeRecord)
}

// putRecord writes a record of any kind, encoded by appendRec, under key
// (which may be b.kbuf) with names item and user, in the record filter
// first, and updates the segment digest.
func putRecord[R any](b *Batch, key []byte, item, user string, old, r *R, appendRec func([]byte, *R) []byte) {
	if b.s.filter != nil {
		b.s.filter.add(item, user) // before the commit makes the record visible
	}
	b.kbuf = key
	var oldb []byte
	if old != nil {
		b.obuf = appendRec(b.obuf[:0], old)
		oldb = b.obuf
	}
	b.buf = appendRec(b.buf[:0], r)
	b.digest(b.kbuf, oldb, b.buf)
	_ = b.b.Set(b.kbuf, b.buf, nil)
}

// SetMarker marks (on) or clears the unreconciled marker of a record: of
// kind k as Markers says it, a like record (Likes), keyed record
// (Counters) or spend (Budgets).
func (b *Batch) SetMarker(k Kind, item, user string, on bool) {
	var key []byte
	if k == Likes {
		key = markerKey(item, user)
	} else {
		key = markerKey(keyedName(k, item), user)
		key[0] = prefixKeyedMarker
	}
	if on {
		_ = b.b.Set(key, nil, nil)
	} else {
		_ = b.b.Delete(key, nil)
	}
}

// PutMeta writes a metadata value.
func (b *Batch) PutMeta(name string, v []byte) {
	_ = b.b.Set(metaKey(name), v, nil)
}

// Len is the number of writes in the batch, counting logged events.
func (b *Batch) Len() int { return int(b.b.Count()) + len(b.events) }

// Commit applies the batch atomically and, under DurabilitySync, returns
// only after the WAL holding it is fsynced.
func (b *Batch) Commit() error {
	if b.s.closed.Load() {
		return fmt.Errorf("commit batch of %d writes: %w", b.b.Count(), ErrClosed)
	}
	if err := b.s.Err(); err != nil {
		return fmt.Errorf("commit batch of %d writes: %w", b.b.Count(), err)
	}
	last := b.writeEvents()
	if err := b.s.commit(b.b); err != nil {
		return fmt.Errorf("commit batch of %d writes: %w", b.b.Count(), err)
	}
	if len(b.events) > 0 {
		b.s.logLast.Store(last)
		b.s.logIDNew.Store(false)
	}
	if b.dx != nil {
		b.s.dmu.Lock()
		for _, bk := range b.dx.touched {
			b.s.digests[bk] ^= b.dx.d[bk]
			b.dx.d[bk] = 0 // applied once, even if listed twice
		}
		b.s.dmu.Unlock()
		b.dx.touched = b.dx.touched[:0]
	}
	b.s.flags.publish(b.flags)
	b.s.types.publish(b.types)
	return nil
}

// commitLazy commits a batch of the store's own bookkeeping (no events,
// no replicated keys) without an fsync of its own; see Store.commitLazy.
func (b *Batch) commitLazy() error {
	if b.s.closed.Load() {
		return fmt.Errorf("commit batch of %d writes: %w", b.b.Count(), ErrClosed)
	}
	if err := b.s.Err(); err != nil {
		return fmt.Errorf("commit batch of %d writes: %w", b.b.Count(), err)
	}
	if len(b.events) > 0 || b.dx != nil && len(b.dx.touched) > 0 {
		return fmt.Errorf("commit batch of %d writes: events and replicated keys need Commit", b.b.Count())
	}
	if err := b.s.commitLazy(b.b); err != nil {
		return fmt.Errorf("commit batch of %d writes: %w", b.b.Count(), err)
	}
	return nil
}

// Close releases the batch. It must be called whether or not Commit was.
func (b *Batch) Close() {
	if b.dx != nil {
		for _, bk := range b.dx.touched { // a batch closed without committing
			b.dx.d[bk] = 0
		}
		b.dx.touched = b.dx.touched[:0]
		b.s.dxPool.Put(b.dx)
		b.dx = nil
	}
	_ = b.b.Close()
}

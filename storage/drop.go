package storage

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// DropSegment adds to b the deletion of every replicated entry of segment
// seg, as committed now, with the segment's digest, and of the local
// indexes that point at them: a like record's like-list entries and
// marker, a keyed record's or spend's expiry entry and marker, a slot's
// expiry entry. A replica that no longer keeps a shard drops its segments
// (SegmentShard), after its entries are known to be at the shard's
// holders. The caller commits b alone (no other write to the segment in
// it) and forgets what it caches of the segment's keys. It returns how
// many entries b deletes.
func (b *Batch) DropSegment(seg int) (int, error) {
	if seg < 0 || seg >= Segments {
		return 0, fmt.Errorf("drop segment %d: out of range", seg)
	}
	prefix := segmentPrefix(seg)
	it, err := b.s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("drop segment %d: %w", seg, err)
	}
	defer it.Close()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		key, val := slices.Clone(it.Key()), it.Value()
		b.digest(key, val, nil)
		_ = b.b.Delete(key, nil)
		n++
		if err := b.dropIndexes(key[len(prefix):], val); err != nil {
			return n, fmt.Errorf("drop segment %d key %q: %w", seg, key, err)
		}
	}
	if err := it.Error(); err != nil {
		return n, fmt.Errorf("drop segment %d: %w", seg, err)
	}
	return n, nil
}

// dropIndexes deletes the local index entries of one replicated entry
// (rest: its key after the segment prefix).
func (b *Batch) dropIndexes(rest, val []byte) error {
	if len(rest) < 2 || rest[1] != '/' {
		return fmt.Errorf("unknown replicated key")
	}
	switch rest[0] {
	case prefixRecord:
		item, user, ok := strings.Cut(string(rest[2:]), "/")
		if !ok {
			return fmt.Errorf("malformed record key")
		}
		b.SetLiked(item, user, false, 0)
		b.SetMarker(Likes, item, user, false)
	case prefixKeyed:
		name, idem, ok := strings.Cut(string(rest[2:]), "/")
		if !ok {
			return fmt.Errorf("malformed keyed record key")
		}
		k, key := keyedKind(name)
		var hlc crdt.HLC
		if k == Budgets {
			r, err := crdt.DecodeSpend(val)
			if err != nil {
				return err
			}
			hlc = r.HLC
		} else {
			r, err := crdt.DecodeKeyedRecord(val)
			if err != nil {
				return err
			}
			hlc = r.HLC
		}
		b.kbuf = appendExpiryKey(b.kbuf[:0], hlc.WallMs(), name, idem)
		_ = b.b.Delete(b.kbuf, nil)
		b.SetMarker(k, key, idem, false)
	case prefixVector:
		parts := strings.Split(string(rest[2:]), "/")
		if len(parts) != 3 || len(parts[0]) != 1 {
			return fmt.Errorf("malformed vector key")
		}
		k := Kind(parts[0][0])
		if slot, ok := crdt.ParseSlot(parts[1]); ok && k.IsWindows() {
			b.kbuf = appendWindowExpiryKey(b.kbuf[:0], WindowIndexMs(slot), k, parts[1])
			_ = b.b.Delete(b.kbuf, nil)
		}
	}
	return nil
}

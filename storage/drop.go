package storage

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// DropSegment adds to b the deletion of the replicated entries of segment
// seg, as committed now, that are other replicas' (the digest follows),
// and of the local indexes that point at them: a like record's like-list
// entries and marker, a keyed record's or spend's expiry entry and marker,
// a slot's expiry entry. Replica self's own entries stay: its vector
// entries and sketch pages, and every record it is the origin of or
// contributes to. A replica is the only authority on its own entries,
// which nobody else may give it back, so it keeps them for good; should
// the shard come back to it, it pulls the others' entries again from
// their owners. A replica that no longer keeps a shard drops its segments
// (SegmentShard) after its entries are known to be at the shard's
// holders. The caller commits b alone (no other write to the segment in
// it) and forgets what it caches of the segment's keys. It returns how
// many entries b deletes.
func (b *Batch) DropSegment(seg int, self string) (int, error) {
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
		own, err := b.dropIndexes(key[len(prefix):], val, self)
		if err != nil {
			return n, fmt.Errorf("drop segment %d key %q: %w", seg, key, err)
		}
		if own {
			continue
		}
		b.digest(key, val, nil)
		_ = b.b.Delete(key, nil)
		n++
	}
	if err := it.Error(); err != nil {
		return n, fmt.Errorf("drop segment %d: %w", seg, err)
	}
	return n, nil
}

// dropIndexes reports whether one replicated entry (rest: its key after
// the segment prefix) is self's own, to keep, and otherwise deletes the
// local index entries pointing at it.
func (b *Batch) dropIndexes(rest, val []byte, self string) (own bool, err error) {
	if len(rest) < 2 || rest[1] != '/' {
		return false, fmt.Errorf("unknown replicated key")
	}
	owns := func(r crdt.Record) bool {
		_, origin := r.Stamp()
		return origin == self || r.Contributions().Get(self) != (crdt.PN{})
	}
	switch rest[0] {
	case prefixRecord:
		item, user, ok := strings.Cut(string(rest[2:]), "/")
		if !ok {
			return false, fmt.Errorf("malformed record key")
		}
		r, err := crdt.DecodeLikeRecord(val)
		if err != nil {
			return false, err
		}
		if owns(r) {
			return true, nil
		}
		b.SetLiked(item, user, false, 0)
		b.SetMarker(Likes, item, user, false)
	case prefixKeyed:
		name, idem, ok := strings.Cut(string(rest[2:]), "/")
		if !ok {
			return false, fmt.Errorf("malformed keyed record key")
		}
		k, key := keyedKind(name)
		var r crdt.Record
		var hlc crdt.HLC
		if k == Budgets {
			s, err := crdt.DecodeSpend(val)
			if err != nil {
				return false, err
			}
			r, hlc = s, s.HLC
		} else {
			kr, err := crdt.DecodeKeyedRecord(val)
			if err != nil {
				return false, err
			}
			r, hlc = kr, kr.HLC
		}
		if owns(r) {
			return true, nil
		}
		b.kbuf = appendExpiryKey(b.kbuf[:0], hlc.WallMs(), name, idem)
		_ = b.b.Delete(b.kbuf, nil)
		b.SetMarker(k, key, idem, false)
	case prefixVector:
		parts := strings.Split(string(rest[2:]), "/")
		if len(parts) != 3 || len(parts[0]) != 1 {
			return false, fmt.Errorf("malformed vector key")
		}
		// A slot's expiry entry stays: the sweep deletes whatever is
		// left of the slot when it expires.
		return parts[2] == self, nil
	case prefixSketch:
		_, _, replica, _, ok := parseSketchKey(rest[2:])
		if !ok {
			return false, fmt.Errorf("malformed sketch key")
		}
		return replica == self, nil
	}
	return false, nil
}

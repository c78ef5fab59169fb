package storage

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
)

// Segments is how many anti-entropy segments the replicated key space is
// cut into (a segment is a hash group of keys with one digest, as the
// segments of Riak's active anti-entropy hash trees). Every replica uses the
// same function from key to segment, so two replicas compare state segment
// by segment and exchange only what differs.
//
// Segments nest in shards: shard s owns segments s*SegmentsPerShard up to
// (s+1)*SegmentsPerShard-1, so two replicas holding different shards
// compare exactly the segments of the shards both hold.
const Segments = 4096

// SegmentsPerShard is how many segments each shard (package shard) owns.
const SegmentsPerShard = Segments / shard.Count

// Segments must nest in shards exactly.
var _ = [1]struct{}{}[Segments%shard.Count]

// SegmentShard is the shard that owns segment seg.
func SegmentShard(seg int) int { return seg / SegmentsPerShard }

// VectorSegment is the segment of every entry of one vector. A time slot
// (crdt.Slot) hashes only its key, so it lives next to its key's all-time
// vector and a key's series is one contiguous key range.
func VectorSegment(item string) int {
	return shard.Of(item)*SegmentsPerShard + int(fnv32a(fnv32Offset, crdt.BaseKey(item))>>30)%SegmentsPerShard
}

// RecordSegment is the segment of one record of (a, b): a like record of
// (item, user), a keyed record of (counter key, idempotency key) or a spend
// of ("~"+budget key, idempotency key). It is on a's shard, so a record
// lives on the shard of the vector it counts in; within the shard FNV-1a of
// "<a>/<b>" spreads one item's records over the shard's segments.
func RecordSegment(a, b string) int {
	return shard.Of(a)*SegmentsPerShard + int(fnv32a(fnv32a(fnv32a(fnv32Offset, a), "/"), b)%SegmentsPerShard)
}

// FNV-1a, written out so that hashing a key allocates nothing (hash/fnv
// works through an interface). Every replica must segment and digest keys
// identically, so these must keep computing exactly FNV-1a.
const (
	fnv32Offset = 2166136261
	fnv32Prime  = 16777619
	fnv64Offset = 14695981039346656037
	fnv64Prime  = 1099511628211
)

func fnv32a[T string | []byte](h uint32, s T) uint32 {
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= fnv32Prime
	}
	return h
}

func fnv64a(h uint64, s []byte) uint64 {
	for _, c := range s {
		h ^= uint64(c)
		h *= fnv64Prime
	}
	return h
}

// entryHash is the digest contribution of one replicated key/value pair.
// A segment's digest is the XOR of its entries' hashes, so a write updates it
// in O(1): digest ^= hash(key, old) ^ hash(key, new).
func entryHash(key, value []byte) uint64 {
	h := fnv64a(fnv64Offset, key)
	h *= fnv64Prime // a zero byte between key and value: h ^= 0, then multiply
	return mix64(fnv64a(h, value))
}

// mix64 is the splitmix64 finalizer: FNV's low bits are weak, and XOR of
// weak hashes cancels too easily.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Digests returns a copy of every segment's digest.
func (s *Store) Digests() []uint64 {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	return append([]uint64(nil), s.digests[:]...)
}

// Root folds all segment digests into one value: equal roots mean (almost
// surely) equal replicated state.
func (s *Store) Root() uint64 {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	return rootOf(s.digests[:])
}

func rootOf(d []uint64) uint64 {
	var r uint64
	for i, x := range d {
		r ^= segmentRoot(i, x)
	}
	return r
}

// segmentRoot is segment i's part of a root: where a digest sits counts,
// so differences in two segments do not cancel.
func segmentRoot(i int, x uint64) uint64 { return mix64(x + uint64(i)*0x9e3779b97f4a7c15) }

// RootOfShards folds the digests d (as Digests returns them) of the
// segments of shards ss only, as Root folds all: two stores whose
// segments of ss agree have equal ones. Over every shard it is Root.
// Sharded replicas hold different shards, so their roots differ; this
// compares what two of them share.
func RootOfShards(d []uint64, ss *shard.Set) uint64 {
	var r uint64
	for s := range shard.Count {
		if !ss.Has(s) {
			continue
		}
		for i := s * SegmentsPerShard; i < (s+1)*SegmentsPerShard; i++ {
			r ^= segmentRoot(i, d[i])
		}
	}
	return r
}

// loadDigests computes every segment digest by scanning the replicated keys,
// and fills the record and vector filters on the way.
func (s *Store) loadDigests() error {
	prefix := []byte{prefixSegment}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("compute digests: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		key := it.Key()
		b, ok := segmentOfKey(key)
		if !ok {
			continue
		}
		s.digests[b] ^= entryHash(key, it.Value())
		// The record filter is built in the same pass: "b<B>/r/<item>/<user>"
		// and "b<B>/k/<key>/<idem>".
		if s.filter != nil && len(key) > 7 && (key[5] == prefixRecord || key[5] == prefixKeyed) && key[6] == '/' {
			if !s.filter.addKey(key[7:]) {
				err := fmt.Errorf("compute digests: malformed record key %q", key)
				return errors.Join(err, it.Close())
			}
		}
		// And the vector filter: "b<B>/v/<k>/<name>/<replica>".
		if s.vfilter != nil && len(key) > 7 && key[5] == prefixVector && key[6] == '/' {
			if !s.vfilter.addVectorKey(key[7:]) {
				err := fmt.Errorf("compute digests: malformed vector key %q", key)
				return errors.Join(err, it.Close())
			}
		}
		if len(key) > 7 && (key[5] == prefixFlag || key[5] == prefixType) && key[6] == '/' {
			load := s.flags.load
			if key[5] == prefixType {
				load = s.types.load
			}
			if err := load(key, it.Value()); err != nil {
				return errors.Join(fmt.Errorf("compute digests: %w", err), it.Close())
			}
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("compute digests: %w", err)
	}
	return nil
}

// SegmentVisitor receives the entries of a segment. Record receives records
// of every kind: a *crdt.LikeRecord of (item, user), a *crdt.KeyedRecord
// of (counter key, idempotency key) or a *crdt.Spend of (budget key,
// idempotency key).
type SegmentVisitor struct {
	Vector func(k Kind, item, replica string, e crdt.PN)
	Record func(item, user string, r crdt.Record)
	// Sketch receives one stored page of a replica's unique-count sketch;
	// p is only valid during the call.
	Sketch func(k Kind, name, replica string, page int, p *crdt.HLLPage)
	// Flag receives a user's block flag.
	Flag func(user string, f crdt.Flag)
	// Type receives an event type's metadata.
	Type func(name string, m crdt.TypeMeta)
	// Keep, if set, chooses the entries visited by their part of the
	// segment (SubSegmentOf) and entry hash; the others are skipped
	// and do not count toward the scan's byte bound.
	Keep func(sub int, hash uint64) bool
}

// SubSegments is how many parts a segment's keys are split into by a
// hash of the key alone (SubSegmentOf), so that two replicas whose
// segment differs compare the parts' digests and exchange the entries of
// the differing parts only. A part's digest is the XOR of its entries'
// hashes, as a segment's is; the parts' digests XOR to the segment's.
const SubSegments = 64

// SubSegmentOf is the part of its segment a stored key is in: the top bits
// of a mixed FNV-1a of the key. Every replica must compute it identically.
func SubSegmentOf(key []byte) int {
	return int(mix64(fnv64a(fnv64Offset, key)) >> (64 - 6))
}

// Every part number must fit SubSegmentOf's 6 bits exactly.
var _ = [1]struct{}{}[SubSegments^1<<6]

// SegmentHashes calls fn with every entry of a segment in key order: its
// stored key (valid during the call only), its part of the segment
// (SubSegmentOf) and its entry hash, the entry's share of the segment's
// digest. It reads keys and values but decodes nothing.
func (s *Store) SegmentHashes(segment int, fn func(key []byte, sub int, hash uint64)) error {
	return s.eachEntry(segment, func(key, val []byte) {
		fn(key, SubSegmentOf(key), entryHash(key, val))
	})
}

// SegmentEntries is SegmentHashes with each entry's stored value too
// (valid during the call only), for a caller that looks inside some.
func (s *Store) SegmentEntries(segment int, fn func(key, val []byte, sub int, hash uint64)) error {
	return s.eachEntry(segment, func(key, val []byte) {
		fn(key, val, SubSegmentOf(key), entryHash(key, val))
	})
}

// SegmentRecord decodes the record a stored replicated key and value hold
// (SegmentEntries): a like record, a keyed record or a spend. ok is false
// for every other entry, and for one that does not decode.
func SegmentRecord(key, val []byte) (rec crdt.Record, ok bool) {
	if _, ok := segmentOfKey(key); !ok {
		return nil, false
	}
	rest := key[5:] // past the segment prefix
	if len(rest) < 3 || (rest[0] != prefixRecord && rest[0] != prefixKeyed) || rest[1] != '/' {
		return nil, false
	}
	_, _, rec, err := decodeRecordEntry(rest, val)
	return rec, err == nil
}

// decodeRecordEntry decodes a record stored under rest (a replicated key
// past its segment prefix, of a like record or a keyed record) and val:
// its name (the item, or the counter's or budget's key) and sub (the user,
// or the idempotency key), as a page carries them.
func decodeRecordEntry(rest, val []byte) (name, sub string, r crdt.Record, err error) {
	name, sub, ok := strings.Cut(string(rest[2:]), "/")
	if rest[0] == prefixRecord {
		if !ok {
			return "", "", nil, fmt.Errorf("malformed record key")
		}
		r, err = crdt.DecodeLikeRecord(val)
		return name, sub, r, err
	}
	if !ok {
		return "", "", nil, fmt.Errorf("malformed keyed record key")
	}
	k, key := keyedKind(name)
	if k == Budgets {
		r, err = crdt.DecodeSpend(val)
	} else {
		r, err = crdt.DecodeKeyedRecord(val)
	}
	return key, sub, r, err
}

// eachEntry calls fn with every stored key and value of a segment, in key
// order, valid during the call only.
func (s *Store) eachEntry(segment int, fn func(key, val []byte)) error {
	if segment < 0 || segment >= Segments {
		return fmt.Errorf("hash segment %d: out of range", segment)
	}
	if s.closed.Load() {
		return ErrClosed
	}
	prefix := segmentPrefix(segment)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("hash segment %d: %w", segment, err)
	}
	for it.First(); it.Valid(); it.Next() {
		fn(it.Key(), it.Value())
	}
	if err := it.Error(); err != nil {
		return errors.Join(fmt.Errorf("hash segment %d: %w", segment, err), it.Close())
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("hash segment %d: %w", segment, err)
	}
	return nil
}

// ScanSegment visits a segment's entries in key order, starting after the key
// after (nil: from the start), until about maxBytes of keys and values were
// visited. It returns the cursor to resume from, or nil when the segment is
// done.
func (s *Store) ScanSegment(segment int, after []byte, maxBytes int, v SegmentVisitor) ([]byte, error) {
	if segment < 0 || segment >= Segments {
		return nil, fmt.Errorf("scan segment %d: out of range", segment)
	}
	if s.closed.Load() {
		return nil, ErrClosed
	}
	prefix := segmentPrefix(segment)
	lower := prefix
	if after != nil {
		if !bytes.HasPrefix(after, prefix) {
			return nil, fmt.Errorf("scan segment %d: cursor outside segment", segment)
		}
		lower = append(append([]byte(nil), after...), 0) // the next key after `after`
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("scan segment %d: %w", segment, err)
	}
	defer it.Close()
	size := 0
	for it.First(); it.Valid(); it.Next() {
		if size >= maxBytes {
			// Resume after the last key visited.
			it.Prev()
			return append([]byte(nil), it.Key()...), nil
		}
		key, val := it.Key(), it.Value()
		if v.Keep != nil && !v.Keep(SubSegmentOf(key), entryHash(key, val)) {
			continue
		}
		size += len(key) + len(val)
		if err := visit(key[len(prefix):], val, v); err != nil {
			return nil, fmt.Errorf("scan segment %d key %q: %w", segment, key, err)
		}
	}
	return nil, it.Error()
}

func visit(rest, val []byte, v SegmentVisitor) error {
	switch {
	case len(rest) > 2 && rest[0] == prefixVector && rest[1] == '/':
		// v/<kind>/<item>/<replica>
		parts := strings.Split(string(rest[2:]), "/")
		if len(parts) != 3 || len(parts[0]) != 1 {
			return fmt.Errorf("malformed vector key")
		}
		e, err := crdt.DecodePN(val)
		if err != nil {
			return err
		}
		if v.Vector != nil {
			v.Vector(Kind(parts[0][0]), parts[1], parts[2], e)
		}
	case len(rest) > 2 && (rest[0] == prefixRecord || rest[0] == prefixKeyed) && rest[1] == '/':
		name, sub, r, err := decodeRecordEntry(rest, val)
		if err != nil {
			return err
		}
		if v.Record != nil {
			v.Record(name, sub, r)
		}
	case len(rest) > 2 && rest[0] == prefixSketch && rest[1] == '/':
		k, name, replica, page, ok := parseSketchKey(rest[2:])
		if !ok {
			return fmt.Errorf("malformed sketch key")
		}
		var p crdt.HLLPage
		if err := crdt.DecodeHLLPage(val, &p); err != nil {
			return err
		}
		if v.Sketch != nil {
			v.Sketch(k, name, replica, page, &p)
		}
	case len(rest) > 2 && rest[0] == prefixFlag && rest[1] == '/':
		user := string(rest[2:])
		if !crdt.ValidID(user) {
			return fmt.Errorf("malformed flag key")
		}
		f, err := crdt.DecodeFlag(val)
		if err != nil {
			return err
		}
		if v.Flag != nil {
			v.Flag(user, f)
		}
	case len(rest) > 2 && rest[0] == prefixType && rest[1] == '/':
		name := string(rest[2:])
		if !crdt.ValidID(name) {
			return fmt.Errorf("malformed type key")
		}
		m, err := crdt.DecodeTypeMeta(val)
		if err != nil {
			return err
		}
		if v.Type != nil {
			v.Type(name, m)
		}
	default:
		return fmt.Errorf("unknown replicated key")
	}
	return nil
}

// The segment layout: stores written before segments nested in shards
// (layout 1, no metadata) put a key's segment by a hash of the whole key;
// Open moves every replicated key to its layout-2 segment once
// (migrateSegments) and records the layout.
const (
	metaSegmentLayout = "segment-layout"
	segmentLayout     = "2"
)

// migrateSegments moves every replicated key whose segment is not the
// current layout's to it, in batches, then records the layout. Each key
// moves in one batch (delete and set together), so a crash midway leaves
// every key in one place, and the next Open finishes the move.
func (s *Store) migrateSegments() error {
	v, ok, err := s.get(metaKey(metaSegmentLayout))
	if err != nil {
		return fmt.Errorf("migrate segments: %w", err)
	}
	if ok && string(v) == segmentLayout {
		return nil
	}
	prefix := []byte{prefixSegment}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("migrate segments: %w", err)
	}
	b := s.db.NewBatch()
	moved := 0
	for it.First(); it.Valid(); it.Next() {
		key := it.Key()
		seg, ok := segmentOfKey(key)
		if !ok {
			continue
		}
		want, err := segmentOfRest(key[5:])
		if err != nil {
			err = fmt.Errorf("migrate segments: key %q: %w", key, err)
			return errors.Join(err, it.Close(), b.Close())
		}
		if want == seg {
			continue
		}
		nk := appendSegmentPrefix(nil, want)
		nk = append(nk, key[5:]...)
		_ = b.Delete(key, nil)
		_ = b.Set(nk, it.Value(), nil)
		moved++
		if b.Len() >= 4<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				return errors.Join(fmt.Errorf("migrate segments: %w", err), it.Close(), b.Close())
			}
			b = s.db.NewBatch()
		}
	}
	if err := it.Close(); err != nil {
		return errors.Join(fmt.Errorf("migrate segments: %w", err), b.Close())
	}
	_ = b.Set(metaKey(metaSegmentLayout), []byte(segmentLayout), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return errors.Join(fmt.Errorf("migrate segments (%d keys moved): %w", moved, err), b.Close())
	}
	return b.Close()
}

// segmentOfRest is the segment a replicated key belongs in, from the key
// after its "b<B>/" prefix.
func segmentOfRest(rest []byte) (int, error) {
	if len(rest) < 3 || rest[1] != '/' {
		return 0, errors.New("unknown replicated key")
	}
	body := string(rest[2:])
	switch rest[0] {
	case prefixVector: // <k>/<item>/<replica>
		parts := strings.Split(body, "/")
		if len(parts) != 3 {
			return 0, errors.New("malformed vector key")
		}
		return VectorSegment(parts[1]), nil
	case prefixRecord, prefixKeyed: // <a>/<b>
		a, b, ok := strings.Cut(body, "/")
		if !ok {
			return 0, errors.New("malformed record key")
		}
		return RecordSegment(a, b), nil
	case prefixSketch:
		_, name, _, _, ok := parseSketchKey(rest[2:])
		if !ok {
			return 0, errors.New("malformed sketch key")
		}
		return VectorSegment(name), nil
	case prefixFlag, prefixType:
		return RegisterSegment(rest[0], body), nil
	}
	return 0, errors.New("unknown replicated key")
}

// EntryWriter is the replica whose entry a stored replicated key holds,
// for the keys that hold one writer's entry (a vector's or a sketch
// page's), as SegmentHashes passes them; ok is false for the others
// (records, which hold several writers' parts, flags and type metadata).
// The writer is a slice of key.
func EntryWriter(key []byte) (writer []byte, ok bool) {
	if _, ok := segmentOfKey(key); !ok {
		return nil, false
	}
	rest := key[5:] // past the segment prefix
	switch {
	case len(rest) > 2 && rest[0] == prefixVector && rest[1] == '/':
		// v/<kind>/<item>/<replica>
		i := bytes.LastIndexByte(rest, '/')
		if i <= 3 || i == len(rest)-1 {
			return nil, false
		}
		return rest[i+1:], true
	case len(rest) > 2 && rest[0] == prefixSketch && rest[1] == '/':
		// k/<kind>/<name>/<replica>/<page>
		if _, _, _, _, ok := parseSketchKey(rest[2:]); !ok {
			return nil, false
		}
		body := rest[:len(rest)-3]
		return body[bytes.LastIndexByte(body, '/')+1:], true
	}
	return nil, false
}

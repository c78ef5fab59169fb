package storage

import (
	"fmt"
	"sort"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/shard"
)

// Event types (crdt.TypeMeta): the metadata of a counter key or key
// prefix, one per name ever registered, under b<B>/t/<name> in the
// anti-entropy segment TypeSegment(name), so the digests and pages cover
// them like any replicated key. They are few (an admin registers them),
// so the store also keeps every committed one in memory: the writer looks
// a key's type up on every write.
const prefixType = 't'

// TypeSegment is the anti-entropy segment of a type's metadata: one of
// the global shard's, since every replica holds every type (its keys may
// be on any shard).
func TypeSegment(name string) int {
	return shard.Global*SegmentsPerShard + int(fnv32a(fnv32a(fnv32Offset, "t/"), name)%SegmentsPerShard)
}

func appendTypeKey(dst []byte, name string) []byte {
	dst = appendSegmentPrefix(dst, TypeSegment(name))
	dst = append(dst, prefixType, '/')
	return append(dst, name...)
}

// PutType writes a type's metadata, replacing old (the zero TypeMeta if
// none). The store's in-memory copy follows when the batch commits.
func (b *Batch) PutType(name string, old, m crdt.TypeMeta) {
	b.kbuf = appendTypeKey(b.kbuf[:0], name)
	var oldb []byte
	if !old.IsZero() {
		b.obuf = crdt.AppendTypeMeta(b.obuf[:0], old)
		oldb = b.obuf
	}
	b.buf = crdt.AppendTypeMeta(b.buf[:0], m)
	b.digest(b.kbuf, oldb, b.buf)
	_ = b.b.Set(b.kbuf, b.buf, nil)
	if b.types == nil {
		b.types = make(map[string]crdt.TypeMeta)
	}
	b.types[name] = m
}

// Type returns a type's committed metadata (ok false if it was never
// registered). It reads memory only.
func (s *Store) Type(name string) (crdt.TypeMeta, bool) {
	if s.ntypes.Load() == 0 { // the common case: no type registered
		return crdt.TypeMeta{}, false
	}
	s.tmu.RLock()
	defer s.tmu.RUnlock()
	m, ok := s.types[name]
	return m, ok
}

// HasTypes reports whether any type is registered.
func (s *Store) HasTypes() bool { return s.ntypes.Load() > 0 }

// Typed is one type's metadata, as Types lists it.
type Typed struct {
	Name string
	Meta crdt.TypeMeta
}

// Types lists up to limit committed types in name order, after the name
// after ("" from the first). more reports whether any follow.
func (s *Store) Types(after string, limit int) (out []Typed, more bool) {
	s.tmu.RLock()
	for n, m := range s.types {
		if n > after {
			out = append(out, Typed{n, m})
		}
	}
	s.tmu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// loadType takes a stored type into memory (the open-time scan).
func (s *Store) loadType(key, val []byte) error {
	m, err := crdt.DecodeTypeMeta(val)
	if err != nil {
		return fmt.Errorf("type %q: %w", key, err)
	}
	s.types[string(key[7:])] = m // "b<B>/t/<name>"
	s.ntypes.Store(int64(len(s.types)))
	return nil
}

// commitTypes publishes a committed batch's types to memory.
func (b *Batch) commitTypes() {
	if len(b.types) == 0 {
		return
	}
	b.s.tmu.Lock()
	for n, m := range b.types {
		b.s.types[n] = m
	}
	b.s.ntypes.Store(int64(len(b.s.types)))
	b.s.tmu.Unlock()
}

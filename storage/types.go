package storage

import "github.com/tally-dev/tally/crdt"

// Event types (crdt.TypeMeta): the metadata of a counter key or key
// prefix, one register per name ever registered (registers.go).

// TypeSegment is the anti-entropy segment of a type's metadata.
func TypeSegment(name string) int { return RegisterSegment(prefixType, name) }

// PutType writes a type's metadata, replacing old (the zero TypeMeta if
// none). The store's in-memory copy follows when the batch commits.
func (b *Batch) PutType(name string, old, m crdt.TypeMeta) {
	putRegister(b, b.s.types, &b.types, name, old, m)
}

// Type returns a type's committed metadata (ok false if it was never
// registered). It reads memory only.
func (s *Store) Type(name string) (crdt.TypeMeta, bool) { return s.types.get(name) }

// HasTypes reports whether any type is registered.
func (s *Store) HasTypes() bool { return s.types.n.Load() > 0 }

// Typed is one type's metadata, as Types lists it.
type Typed struct {
	Name string
	Meta crdt.TypeMeta
}

// Types lists up to limit committed types in name order, after the name
// after ("" from the first). more reports whether any follow.
func (s *Store) Types(after string, limit int) (out []Typed, more bool) {
	names, metas, more := s.types.list(after, limit, func(crdt.TypeMeta) bool { return true })
	for i, n := range names {
		out = append(out, Typed{n, metas[i]})
	}
	return out, more
}

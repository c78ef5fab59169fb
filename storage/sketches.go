package storage

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// Unique-count sketches (crdt.HLL) are stored per replica and per page:
//
//	b<segment>/h/<kind>/<name>/<replica>/<page, 2 hex digits>  canonical page bytes
//
// Each replica writes only its own sketch of a key (the ids it was given),
// exactly as it writes only its own entry of a vector; a read takes the
// register-wise max over every replica's sketch. A page holding no
// register is not stored. The page bytes are canonical (crdt.AppendHLLPage),
// so equal sketches give equal segment digests and anti-entropy can compare
// them like any other key. The segment is VectorSegment(name): a key's slots
// live next to its all-time sketch.
const prefixSketch = 'h'

const (
	// Uniques sketches count the distinct ids added to a key.
	Uniques Kind = 'u'
	// UniquesWindows sketches are the slots of unique counts, named
	// by crdt.Slot.
	UniquesWindows Kind = 'U'
)

// IsSketch reports whether k is a kind of unique-count sketches (rather
// than of PN vectors).
func (k Kind) IsSketch() bool { return k == Uniques || k == UniquesWindows }

// ValidSketch reports whether name is a well-formed sketch name of kind k:
// an id for Uniques, a slot name for UniquesWindows.
func ValidSketch(k Kind, name string) bool {
	switch k {
	case Uniques:
		return crdt.ValidID(name)
	case UniquesWindows:
		_, ok := crdt.ParseSlot(name)
		return ok
	}
	return false
}

func appendSketchPrefix(dst []byte, k Kind, name string) []byte {
	dst = appendSegmentPrefix(dst, VectorSegment(name))
	dst = append(dst, prefixSketch, '/', byte(k), '/')
	dst = append(dst, name...)
	return append(dst, '/')
}

func appendSketchPageKey(dst []byte, k Kind, name, replica string, page int) []byte {
	const hex = "0123456789abcdef"
	dst = appendSketchPrefix(dst, k, name)
	dst = append(dst, replica...)
	return append(dst, '/', hex[page>>4&0xf], hex[page&0xf])
}

// parseSketchKey splits "<kind>/<name>/<replica>/<pp>" (the part of a
// sketch key after "h/").
func parseSketchKey(rest []byte) (k Kind, name, replica string, page int, ok bool) {
	if len(rest) < 8 || rest[1] != '/' {
		return 0, "", "", 0, false
	}
	k = Kind(rest[0])
	rest = rest[2:]
	n := len(rest)
	if n < 3 || rest[n-3] != '/' {
		return 0, "", "", 0, false
	}
	page, ok = parseHex(rest[n-2:])
	if !ok || page >= crdt.HLLPages {
		return 0, "", "", 0, false
	}
	rest = rest[:n-3]
	i := bytes.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return 0, "", "", 0, false
	}
	return k, string(rest[:i]), string(rest[i+1:]), page, k.IsSketch()
}

// PutSketchPage writes replica's page of a sketch, replacing the page
// whose stored bytes are old (nil if there was none), and returns the new
// bytes (nil for a zero page, which deletes it). The caller keeps stored
// bytes around (a cache of own pages does) so that no page is encoded
// twice.
func (b *Batch) PutSketchPage(k Kind, name, replica string, page int, old []byte, p *crdt.HLLPage) []byte {
	b.kbuf = appendSketchPageKey(b.kbuf[:0], k, name, replica, page)
	if p.IsZero() {
		if old != nil {
			b.digest(b.kbuf, old, nil)
			_ = b.b.Delete(b.kbuf, nil)
		}
		return nil
	}
	enc := crdt.AppendHLLPage(nil, p)
	b.digest(b.kbuf, old, enc)
	_ = b.b.Set(b.kbuf, enc, nil)
	return enc
}

// DeleteSketch deletes every page of every replica's sketch of name (a
// slot past its retention), updating the digests, and its expiry
// index entry.
func (b *Batch) DeleteSketch(k Kind, name string) error {
	prefix := appendSketchPrefix(nil, k, name)
	it, err := b.s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("delete sketch %s/%s: %w", k, name, err)
	}
	for it.First(); it.Valid(); it.Next() {
		b.digest(it.Key(), it.Value(), nil)
		_ = b.b.Delete(it.Key(), nil)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("delete sketch %s/%s: %w", k, name, err)
	}
	if bk, ok := crdt.ParseSlot(name); ok && k == UniquesWindows {
		b.kbuf = appendWindowExpiryKey(b.kbuf[:0], WindowIndexMs(bk), k, name)
		_ = b.b.Delete(b.kbuf, nil)
	}
	return nil
}

// SketchPage reads one page of replica's sketch of name into p (zeroed if
// it is not stored) and returns its stored bytes (nil if none).
func (s *Store) SketchPage(k Kind, name, replica string, page int, p *crdt.HLLPage) ([]byte, error) {
	*p = crdt.HLLPage{}
	v, ok, err := s.get(appendSketchPageKey(nil, k, name, replica, page))
	if err != nil || !ok {
		return nil, wrapRead(err, "sketch page", string(k), name, replica)
	}
	if err := crdt.DecodeHLLPage(v, p); err != nil {
		return nil, wrapRead(err, "sketch page", string(k), name, replica)
	}
	return v, nil
}

// Sketch calls fn for every stored page of every replica's sketch of
// name, in replica then page order. p is only valid during the call.
func (s *Store) Sketch(k Kind, name string, fn func(replica string, page int, p *crdt.HLLPage)) error {
	if s.closed.Load() {
		return fmt.Errorf("read sketch %s/%s: %w", k, name, ErrClosed)
	}
	prefix := appendSketchPrefix(nil, k, name)
	return s.scanSketches(prefix, prefixEnd(prefix), len(prefix)-len(name)-3, func(_ string, replica string, page int, p *crdt.HLLPage) {
		fn(replica, page, p)
	})
}

// SketchSeries calls fn for every stored page of the slots of kind
// k (UniquesWindows), key and width with a start in [from, to) (unix
// seconds), in start order.
func (s *Store) SketchSeries(k Kind, key string, width, from, to int64, fn func(b crdt.Slot, replica string, page int, p *crdt.HLLPage)) error {
	if s.closed.Load() {
		return fmt.Errorf("read sketch series %s/%s: %w", k, key, ErrClosed)
	}
	if from >= to {
		return nil
	}
	series := crdt.SeriesPrefix(key, width)
	base := appendSketchPrefix(nil, k, series) // "b<B>/h/<k>/<key>#<width>./": drop the '/'
	base = base[:len(base)-1]
	lower := append(append([]byte(nil), base...), crdt.StartName(max(from, 0))...)
	upper := append(append([]byte(nil), base...), crdt.StartName(max(to, 0))...)
	var cur string
	var bk crdt.Slot
	var bad error
	err := s.scanSketches(lower, upper, len(base)-len(series)-2, func(name, replica string, page int, p *crdt.HLLPage) {
		if name != cur {
			var ok bool
			if bk, ok = crdt.ParseSlot(name); !ok {
				bad = fmt.Errorf("read sketch series %s/%s: malformed slot %q", k, key, name)
			}
			cur = name
		}
		if bad == nil {
			fn(bk, replica, page, p)
		}
	})
	if err != nil {
		return err
	}
	return bad
}

// scanSketches iterates sketch page keys in [lower, upper); kindAt is the
// offset of the kind byte in each key.
func (s *Store) scanSketches(lower, upper []byte, kindAt int, fn func(name, replica string, page int, p *crdt.HLLPage)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("read sketch: %w", err)
	}
	var p crdt.HLLPage
	for it.First(); it.Valid(); it.Next() {
		_, name, replica, page, ok := parseSketchKey(it.Key()[kindAt:])
		if !ok {
			_ = it.Close()
			return fmt.Errorf("read sketch: malformed key %q", it.Key())
		}
		if err := crdt.DecodeHLLPage(it.Value(), &p); err != nil {
			_ = it.Close()
			return fmt.Errorf("read sketch %q: %w", it.Key(), err)
		}
		fn(name, replica, page, &p)
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("read sketch: %w", err)
	}
	return nil
}

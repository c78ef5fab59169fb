package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// Local numbering state (see package alloc): counted likes waiting for a
// number, and milestone numbers waiting to be claimed. Neither is
// replicated; both live outside the anti-entropy buckets.
const (
	prefixUnnumbered = 'q' // q/<16 hex ordinal>: a counted like with no number yet
	prefixClaim      = 'n' // n/<sequence>/<16 hex number>: a milestone to claim
	prefixNumbered   = 'l' // l/<sequence>/<16 hex number>: the like that took a number, until its rank is known
)

// CountedLike is a counted like as the numbering keeps it.
type CountedLike struct {
	Item, User string
	AtMs       int64 // when it was counted, ms since the Unix epoch
}

// AppendCountedLike encodes l: uvarint ms, then "item/user".
func AppendCountedLike(dst []byte, l CountedLike) []byte {
	dst = binary.AppendUvarint(dst, uint64(max(l.AtMs, 0)))
	dst = append(dst, l.Item...)
	dst = append(dst, '/')
	return append(dst, l.User...)
}

// DecodeCountedLike parses AppendCountedLike's encoding strictly.
func DecodeCountedLike(b []byte) (CountedLike, error) {
	ms, n := binary.Uvarint(b)
	if n <= 0 || ms > 1<<53 {
		return CountedLike{}, errors.New("storage: bad counted like: time")
	}
	item, user, ok := strings.Cut(string(b[n:]), "/")
	if !ok || !crdt.ValidID(item) || !crdt.ValidID(user) {
		return CountedLike{}, errors.New("storage: bad counted like: ids")
	}
	if len(binary.AppendUvarint(nil, ms)) != n {
		return CountedLike{}, errors.New("storage: bad counted like: padded time")
	}
	return CountedLike{Item: item, User: user, AtMs: int64(ms)}, nil
}

func hex16(dst []byte, v uint64) []byte {
	const hex = "0123456789abcdef"
	for i := 60; i >= 0; i -= 4 {
		dst = append(dst, hex[v>>uint(i)&0xf])
	}
	return dst
}

func parseHex16(b []byte) (uint64, bool) {
	if len(b) != 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint64(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

func unnumberedKey(ord uint64) []byte { return hex16([]byte{prefixUnnumbered, '/'}, ord) }

func claimPrefix(seq string) []byte { return appendKey(nil, prefixClaim, seq, "") }

func claimKey(seq string, n uint64) []byte { return hex16(claimPrefix(seq), n) }

func numberedPrefix(seq string) []byte { return appendKey(nil, prefixNumbered, seq, "") }

func numberedKey(seq string, n uint64) []byte { return hex16(numberedPrefix(seq), n) }

// PutNumbered records that l took number n of seq. It is on the path of
// every counted like: key and value are built in the batch's scratch
// buffers (Pebble copies them in).
func (b *Batch) PutNumbered(seq string, n uint64, l CountedLike) {
	b.kbuf = hex16(appendKey(b.kbuf[:0], prefixNumbered, seq, ""), n)
	b.buf = AppendCountedLike(b.buf[:0], l)
	_ = b.b.Set(b.kbuf, b.buf, nil)
}

// DeleteNumbered forgets the likes that took numbers [start, end) of seq.
func (b *Batch) DeleteNumbered(seq string, start, end uint64) {
	if start < end {
		_ = b.b.DeleteRange(numberedKey(seq, start), numberedKey(seq, end), nil)
	}
}

// Numbered returns the like that took number n of seq, if it is recorded.
func (s *Store) Numbered(seq string, n uint64) (CountedLike, bool, error) {
	v, ok, err := s.get(numberedKey(seq, n))
	if err != nil || !ok {
		return CountedLike{}, false, err
	}
	l, err := DecodeCountedLike(v)
	if err != nil {
		return CountedLike{}, false, fmt.Errorf("numbered like %d of %s: %w", n, seq, err)
	}
	return l, true, nil
}

// PutUnnumbered queues a counted like under its ordinal.
func (b *Batch) PutUnnumbered(ord uint64, l CountedLike) {
	_ = b.b.Set(unnumberedKey(ord), AppendCountedLike(nil, l), nil)
}

// DeleteUnnumbered removes a queued like once it has its number.
func (b *Batch) DeleteUnnumbered(ord uint64) { _ = b.b.Delete(unnumberedKey(ord), nil) }

// PutClaim records the intent to claim milestone n of seq for l.
func (b *Batch) PutClaim(seq string, n uint64, l CountedLike) {
	_ = b.b.Set(claimKey(seq, n), AppendCountedLike(nil, l), nil)
}

// DeleteClaim removes a settled claim intent.
func (b *Batch) DeleteClaim(seq string, n uint64) { _ = b.b.Delete(claimKey(seq, n), nil) }

// Unnumbered calls fn for queued likes in ordinal order, from the first,
// until fn returns false.
func (s *Store) Unnumbered(fn func(ord uint64, l CountedLike) bool) error {
	prefix := []byte{prefixUnnumbered, '/'}
	return s.scan(prefix, "unnumbered likes", func(k, v []byte) (bool, error) {
		ord, ok := parseHex16(k[len(prefix):])
		if !ok {
			return false, fmt.Errorf("bad unnumbered key %q", k)
		}
		l, err := DecodeCountedLike(v)
		if err != nil {
			return false, fmt.Errorf("unnumbered %d: %w", ord, err)
		}
		return fn(ord, l), nil
	})
}

// Claims calls fn for seq's claim intents in number order until fn
// returns false.
func (s *Store) Claims(seq string, fn func(n uint64, l CountedLike) bool) error {
	prefix := claimPrefix(seq)
	return s.scan(prefix, "claims", func(k, v []byte) (bool, error) {
		n, ok := parseHex16(k[len(prefix):])
		if !ok {
			return false, fmt.Errorf("bad claim key %q", k)
		}
		l, err := DecodeCountedLike(v)
		if err != nil {
			return false, fmt.Errorf("claim %d: %w", n, err)
		}
		return fn(n, l), nil
	})
}

// LastUnnumbered returns the highest queued ordinal, if any.
func (s *Store) LastUnnumbered() (uint64, bool, error) {
	if s.closed.Load() {
		return 0, false, ErrClosed
	}
	prefix := []byte{prefixUnnumbered, '/'}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, false, fmt.Errorf("scan unnumbered likes: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		return 0, false, it.Error()
	}
	ord, ok := parseHex16(it.Key()[len(prefix):])
	if !ok {
		return 0, false, fmt.Errorf("bad unnumbered key %q", it.Key())
	}
	return ord, true, nil
}

// scan visits the keys under prefix in order.
func (s *Store) scan(prefix []byte, what string, fn func(k, v []byte) (bool, error)) error {
	if s.closed.Load() {
		return fmt.Errorf("scan %s: %w", what, ErrClosed)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("scan %s: %w", what, err)
	}
	for it.First(); it.Valid(); it.Next() {
		more, err := fn(it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("scan %s: %w", what, err)
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("scan %s: %w", what, err)
	}
	return nil
}

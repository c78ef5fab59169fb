package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// Local numbering state (see package alloc): counted events waiting for a
// number, the event that took each number until its rank is known, and
// milestone numbers waiting to be claimed. None is replicated; all live
// outside the anti-entropy segments.
const (
	prefixUnnumbered = 'q' // q/<sequence>/<16 hex ordinal>: a counted event with no number yet
	prefixClaim      = 'n' // n/<sequence>/<16 hex number>: a milestone to claim
	prefixNumbered   = 'l' // l/<sequence>/<16 hex number>: the event that took numbers from there on, until their ranks are known
)

// CountedLike is a counted event as the numbering keeps it: a user's like
// of an item, or an increment of a counter (User empty) that takes Units
// numbers, one per unit of its amount.
type CountedLike struct {
	Item, User string
	AtMs       int64  // when it was counted, ms since the Unix epoch
	Units      uint64 // numbers it takes; 0 and 1 both mean one
}

// N is how many numbers l takes.
func (l CountedLike) N() uint64 { return max(l.Units, 1) }

// AppendCountedLike encodes l: uvarint ms, then "item/user", then
// "/units" in decimal if it takes more than one number.
func AppendCountedLike(dst []byte, l CountedLike) []byte {
	dst = binary.AppendUvarint(dst, uint64(max(l.AtMs, 0)))
	dst = append(dst, l.Item...)
	dst = append(dst, '/')
	dst = append(dst, l.User...)
	if l.Units > 1 {
		dst = append(dst, '/')
		dst = strconv.AppendUint(dst, l.Units, 10)
	}
	return dst
}

// DecodeCountedLike parses AppendCountedLike's encoding strictly.
func DecodeCountedLike(b []byte) (CountedLike, error) {
	ms, n := binary.Uvarint(b)
	if n <= 0 || ms > 1<<53 {
		return CountedLike{}, errors.New("storage: bad counted like: time")
	}
	item, rest, ok := strings.Cut(string(b[n:]), "/")
	if !ok || !crdt.ValidID(item) {
		return CountedLike{}, errors.New("storage: bad counted like: ids")
	}
	user, units, multi := strings.Cut(rest, "/")
	if user != "" && !crdt.ValidID(user) {
		return CountedLike{}, errors.New("storage: bad counted like: ids")
	}
	l := CountedLike{Item: item, User: user, AtMs: int64(ms)}
	if multi {
		u, err := strconv.ParseUint(units, 10, 64)
		if err != nil || u < 2 || strconv.FormatUint(u, 10) != units {
			return CountedLike{}, errors.New("storage: bad counted like: units")
		}
		l.Units = u
	}
	if len(binary.AppendUvarint(nil, ms)) != n {
		return CountedLike{}, errors.New("storage: bad counted like: padded time")
	}
	return l, nil
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

func unnumberedPrefix(seq string) []byte { return appendKey(nil, prefixUnnumbered, seq, "") }

func unnumberedKey(seq string, ord uint64) []byte { return hex16(unnumberedPrefix(seq), ord) }

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

// Numbered returns the event whose numbers include n of seq (it took
// l.N() numbers from start), if it is recorded.
func (s *Store) Numbered(seq string, n uint64) (l CountedLike, start uint64, ok bool, err error) {
	if s.closed.Load() {
		return CountedLike{}, 0, false, ErrClosed
	}
	prefix := numberedPrefix(seq)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return CountedLike{}, 0, false, fmt.Errorf("numbered %d of %s: %w", n, seq, err)
	}
	defer it.Close()
	if n == 1<<64-1 {
		if !it.Last() {
			return CountedLike{}, 0, false, it.Error()
		}
	} else if !it.SeekLT(numberedKey(seq, n+1)) {
		return CountedLike{}, 0, false, it.Error()
	}
	start, okKey := parseHex16(it.Key()[len(prefix):])
	if !okKey {
		return CountedLike{}, 0, false, fmt.Errorf("bad numbered key %q", it.Key())
	}
	if l, err = DecodeCountedLike(it.Value()); err != nil {
		return CountedLike{}, 0, false, fmt.Errorf("numbered %d of %s: %w", start, seq, err)
	}
	if n-start >= l.N() {
		return CountedLike{}, 0, false, nil // a number nothing recorded took
	}
	return l, start, true, nil
}

// PutUnnumbered queues a counted event of seq under its ordinal.
func (b *Batch) PutUnnumbered(seq string, ord uint64, l CountedLike) {
	_ = b.b.Set(unnumberedKey(seq, ord), AppendCountedLike(nil, l), nil)
}

// DeleteUnnumbered removes a queued event once it has its numbers.
func (b *Batch) DeleteUnnumbered(seq string, ord uint64) {
	_ = b.b.Delete(unnumberedKey(seq, ord), nil)
}

// PutClaim records the intent to claim milestone n of seq for l.
func (b *Batch) PutClaim(seq string, n uint64, l CountedLike) {
	_ = b.b.Set(claimKey(seq, n), AppendCountedLike(nil, l), nil)
}

// DeleteClaim removes a settled claim intent.
func (b *Batch) DeleteClaim(seq string, n uint64) { _ = b.b.Delete(claimKey(seq, n), nil) }

// Unnumbered calls fn for seq's queued events in ordinal order, from the
// first, until fn returns false.
func (s *Store) Unnumbered(seq string, fn func(ord uint64, l CountedLike) bool) error {
	prefix := unnumberedPrefix(seq)
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

// LastUnnumbered returns seq's highest queued ordinal, if any.
func (s *Store) LastUnnumbered(seq string) (uint64, bool, error) {
	if s.closed.Load() {
		return 0, false, ErrClosed
	}
	prefix := unnumberedPrefix(seq)
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

// MigrateUnnumbered moves likes queued by a version that had one sequence
// (keys q/<16 hex ordinal>) into seq's queue, keeping their order. It
// reports how many it moved.
func (s *Store) MigrateUnnumbered(seq string) (int, error) {
	prefix := []byte{prefixUnnumbered, '/'}
	b := s.NewBatch()
	defer b.Close()
	moved := 0
	err := s.scan(prefix, "legacy unnumbered likes", func(k, v []byte) (bool, error) {
		if len(k) != len(prefix)+16 {
			return true, nil // a sequence's key
		}
		ord, ok := parseHex16(k[len(prefix):])
		if !ok {
			return true, nil
		}
		_ = b.b.Set(unnumberedKey(seq, ord), v, nil)
		_ = b.b.Delete(k, nil)
		moved++
		return true, nil
	})
	if err != nil || moved == 0 {
		return 0, err
	}
	if err := b.Commit(); err != nil {
		return 0, fmt.Errorf("migrate unnumbered likes: %w", err)
	}
	return moved, nil
}

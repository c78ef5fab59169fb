package storage

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// IdemValue is what an applied idempotent increment left behind: the
// counter's value right after it, when it was applied (Unix ms), and the
// amount it added, so a retry returns the same answer and a different
// request under the same key is told apart.
type IdemValue struct {
	Value int64
	AtMs  int64
	// By is the amount the increment added; HasBy is false for keys
	// written before it was stored (encoding version 1).
	By    int64
	HasBy bool
}

// DecodeIdemValue decodes an idempotency value as versions before keyed
// records stored it: version 2 | zigzag Value | zigzag AtMs | zigzag By,
// or version 1, which had no By.
func DecodeIdemValue(b []byte) (IdemValue, error) {
	if len(b) == 0 || (b[0] != 1 && b[0] != 2) {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad version", crdt.ErrCorrupt)
	}
	version := b[0]
	b = b[1:]
	var v IdemValue
	var n int
	if v.Value, n = varint(b); n <= 0 {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad value", crdt.ErrCorrupt)
	}
	b = b[n:]
	if v.AtMs, n = varint(b); n <= 0 {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad time", crdt.ErrCorrupt)
	}
	if version == 2 {
		b = b[n:]
		if v.By, n = varint(b); n <= 0 {
			return IdemValue{}, fmt.Errorf("decode idempotency value: %w: bad amount", crdt.ErrCorrupt)
		}
		v.HasBy = true
	}
	if n != len(b) {
		return IdemValue{}, fmt.Errorf("decode idempotency value: %w: trailing bytes", crdt.ErrCorrupt)
	}
	return v, nil
}

// varint is binary.Varint, but it also rejects a padded (non-minimal)
// encoding, whose last byte is 0x00: every value has exactly one encoding.
func varint(b []byte) (int64, int) {
	x, n := binary.Varint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, 0
	}
	return x, n
}

// IdemEntry is one stored idempotency key: the counter key, the client's
// idempotency key, and what applying it left behind.
type IdemEntry struct {
	Key, Idem string
	IdemValue
}

// ScanIdempotency visits up to limit stored idempotency keys in key order,
// starting after the cursor after (nil: from the first). It returns the
// cursor for the next call, nil once no key is left. A sweep that expires
// old keys calls it page by page, so no iterator stays open between pages.
func (s *Store) ScanIdempotency(after []byte, limit int, fn func(IdemEntry) error) (next []byte, err error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("scan idempotency keys: %w", ErrClosed)
	}
	prefix := []byte{prefixIdem, '/'}
	lower := prefix
	if after != nil {
		lower = append(append([]byte(nil), after...), 0) // the smallest key after it
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("scan idempotency keys: %w", err)
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			next, err = nil, fmt.Errorf("scan idempotency keys: %w", cerr)
		}
	}()
	var last []byte
	n := 0
	for it.First(); it.Valid(); it.Next() {
		if n == limit {
			return last, nil // more keys follow
		}
		key, idem, ok := strings.Cut(string(it.Key()[len(prefix):]), "/")
		if !ok {
			return nil, fmt.Errorf("scan idempotency keys: bad key %q: %w", it.Key(), crdt.ErrCorrupt)
		}
		v, err := DecodeIdemValue(it.Value())
		if err != nil {
			return nil, fmt.Errorf("scan idempotency keys: %s/%s: %w", key, idem, err)
		}
		if err := fn(IdemEntry{Key: key, Idem: idem, IdemValue: v}); err != nil {
			return nil, err
		}
		last = append(last[:0], it.Key()...)
		n++
	}
	return nil, it.Error()
}

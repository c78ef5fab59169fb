package storage

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// Keyed records: one per (counter key, idempotency key), replicated and
// merged like like records (crdt.LikeRecord with Keyed set). Each is also
// listed in an expiry index by its register's wall time, so the sweeper
// finds the expired ones with one range scan instead of reading them all.

const (
	prefixKeyed       = 'k' // b<B>/k/<key>/<idem>: a keyed record
	prefixKeyedMarker = 'w' // w/<key>/<idem>: a keyed record whose excess is not zero
	prefixExpiry      = 'e' // e/<16 hex wall ms>/<key>/<idem>: a keyed record by register time
)

func appendKeyedKey(dst []byte, key, idem string) []byte {
	return appendBucketedRecordKey(dst, prefixKeyed, key, idem)
}

func appendExpiryKey(dst []byte, ms int64, key, idem string) []byte {
	dst = append(dst, prefixExpiry, '/')
	dst = appendHex16(dst, uint64(ms))
	dst = append(dst, '/')
	dst = append(dst, key...)
	dst = append(dst, '/')
	return append(dst, idem...)
}

func appendHex16(dst []byte, x uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], x)
	const hex = "0123456789abcdef"
	for _, c := range b {
		dst = append(dst, hex[c>>4], hex[c&0xf])
	}
	return dst
}

// KeyedRecord reads the record of one idempotency key of a counter; ok is
// false if there is none.
func (s *Store) KeyedRecord(key, idem string) (r *crdt.LikeRecord, ok bool, err error) {
	if s.filter != nil && !s.filter.mayContain(key, idem) {
		if s.closed.Load() {
			return nil, false, wrapRead(ErrClosed, "keyed record", key, idem)
		}
		return nil, false, nil
	}
	b, ok, err := s.get(appendKeyedKey(nil, key, idem))
	if err != nil || !ok {
		return nil, false, wrapRead(err, "keyed record", key, idem)
	}
	if r, err = decodeKeyed(b); err != nil {
		return nil, false, wrapRead(err, "keyed record", key, idem)
	}
	return r, true, nil
}

func decodeKeyed(b []byte) (*crdt.LikeRecord, error) {
	r, err := crdt.DecodeLikeRecord(b)
	if err == nil && !r.Keyed {
		err = fmt.Errorf("%w: a like record stored as a keyed record", crdt.ErrCorrupt)
	}
	return r, err
}

// putKeyed writes a keyed record and moves its expiry entry when its
// register's wall time changed.
func (b *Batch) putKeyed(key, idem string, old, r *crdt.LikeRecord) {
	b.putRecord(appendKeyedKey(b.kbuf[:0], key, idem), key, idem, old, r)
	if old != nil && old.HLC.WallMs() == r.HLC.WallMs() {
		return
	}
	if old != nil {
		b.kbuf = appendExpiryKey(b.kbuf[:0], old.HLC.WallMs(), key, idem)
		_ = b.b.Delete(b.kbuf, nil)
	}
	b.kbuf = appendExpiryKey(b.kbuf[:0], r.HLC.WallMs(), key, idem)
	_ = b.b.Set(b.kbuf, nil, nil)
}

// DeleteKeyedRecord forgets an expired keyed record: the record (old is
// its stored state, for the digest), its expiry entry and its marker.
func (b *Batch) DeleteKeyedRecord(key, idem string, old *crdt.LikeRecord) {
	b.kbuf = appendKeyedKey(b.kbuf[:0], key, idem)
	b.obuf = crdt.AppendLikeRecord(b.obuf[:0], old)
	b.digest(b.kbuf, b.obuf, nil)
	_ = b.b.Delete(b.kbuf, nil)
	b.kbuf = appendExpiryKey(b.kbuf[:0], old.HLC.WallMs(), key, idem)
	_ = b.b.Delete(b.kbuf, nil)
	b.SetMarker(key, idem, true, false)
}

// Expiring calls fn, oldest first, for every keyed record whose register
// is stamped before beforeMs, until fn returns false.
func (s *Store) Expiring(beforeMs int64, fn func(key, idem string, ms int64) bool) error {
	if s.closed.Load() {
		return fmt.Errorf("scan expiry index: %w", ErrClosed)
	}
	lower := []byte{prefixExpiry, '/'}
	upper := appendHex16([]byte{prefixExpiry, '/'}, uint64(max(beforeMs, 0)))
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("scan expiry index: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[2:]
		parts := strings.SplitN(string(k), "/", 3)
		if len(parts) != 3 || len(parts[0]) != 16 {
			_ = it.Close()
			return fmt.Errorf("scan expiry index: bad key %q: %w", it.Key(), crdt.ErrCorrupt)
		}
		ms, err := strconv.ParseUint(parts[0], 16, 64)
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("scan expiry index: bad key %q: %w", it.Key(), crdt.ErrCorrupt)
		}
		if !fn(parts[1], parts[2], int64(ms)) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("scan expiry index: %w", err)
	}
	return nil
}

// ConvertIdempotency turns the per-replica idempotency keys of earlier
// versions (i/<key>/<idem>) into keyed records applied by self at the time
// they were stored, so they replicate and dedup across regions from now on.
// It runs at open and reports how many keys it converted.
func (s *Store) ConvertIdempotency(self string) (int, error) {
	n := 0
	for {
		var batch []IdemEntry
		if _, err := s.ScanIdempotency(nil, 1000, func(e IdemEntry) error {
			batch = append(batch, e)
			return nil
		}); err != nil {
			return n, fmt.Errorf("convert idempotency keys: %w", err)
		}
		if len(batch) == 0 {
			return n, nil
		}
		b := s.NewBatch()
		for _, e := range batch {
			_ = b.b.Delete(idemKey(e.Key, e.Idem), nil)
			if !crdt.ValidID(e.Key) || !crdt.ValidID(e.Idem) {
				continue
			}
			if _, ok, err := s.KeyedRecord(e.Key, e.Idem); err != nil || ok {
				if err != nil {
					b.Close()
					return n, fmt.Errorf("convert idempotency keys: %w", err)
				}
				continue
			}
			r := &crdt.LikeRecord{Keyed: true, Liked: true, HLC: crdt.MakeHLC(max(e.AtMs, 1), 0), Origin: self}
			if e.HasBy {
				r.Amount = e.By
				r.Contrib = r.Contrib.Add(self, e.By)
			}
			b.putKeyed(e.Key, e.Idem, nil, r)
			n++
		}
		err := b.Commit()
		b.Close()
		if err != nil {
			return n, fmt.Errorf("convert idempotency keys: %w", err)
		}
	}
}

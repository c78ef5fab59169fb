package storage

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/tally-dev/tally/crdt"
)

// Keyed records (crdt.KeyedRecord), one per (counter key, idempotency
// key), and spends (crdt.Spend), one per (budget key, idempotency key),
// replicated and merged like like records. A spend is stored as a keyed
// record whose counter key is its budget key's crdt.SpendName. Each is
// also listed in an expiry index by its register's wall time, so the
// sweeper finds the expired ones with one range scan instead of reading
// them all.

const (
	prefixKeyed       = 'k' // b<B>/k/<key>/<idem>: a keyed record or spend
	prefixKeyedMarker = 'w' // w/<key>/<idem>: a keyed record or spend whose excess is not zero
	prefixExpiry      = 'e' // e/<16 hex wall ms>/<key>/<idem>: a keyed record or spend by register time
)

// keyedName is the name a keyed record (Counters) or a spend (Budgets) of
// key is stored under, in the place of a counter key.
func keyedName(k Kind, key string) string {
	if k == Budgets {
		return crdt.SpendName(key)
	}
	return key
}

// keyedKind splits a stored keyed name into the kind of its record and
// its counter or budget key.
func keyedKind(name string) (Kind, string) {
	if key, ok := crdt.SpendKey(name); ok {
		return Budgets, key
	}
	return Counters, name
}

func appendKeyedKey(dst []byte, key, idem string) []byte {
	return appendSegmentRecordKey(dst, prefixKeyed, key, idem)
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
func (s *Store) KeyedRecord(key, idem string) (r *crdt.KeyedRecord, ok bool, err error) {
	return getKeyed(s, "keyed record", key, idem, crdt.DecodeKeyedRecord)
}

// Spend reads the record of one idempotency key of budget key's spends;
// ok is false if there is none.
func (s *Store) Spend(key, idem string) (r *crdt.Spend, ok bool, err error) {
	return getKeyed(s, "spend", crdt.SpendName(key), idem, crdt.DecodeSpend)
}

func getKeyed[R any](s *Store, what, name, idem string, decode func([]byte) (*R, error)) (*R, bool, error) {
	if s.filter != nil && !s.filter.mayContain(name, idem) {
		if s.closed.Load() {
			return nil, false, wrapRead(ErrClosed, what, name, idem)
		}
		return nil, false, nil
	}
	b, ok, err := s.get(appendKeyedKey(nil, name, idem))
	if err != nil || !ok {
		return nil, false, wrapRead(err, what, name, idem)
	}
	r, err := decode(b)
	if err != nil {
		return nil, false, wrapRead(err, what, name, idem)
	}
	return r, true, nil
}

// PutKeyedRecord writes the record of one idempotency key of a counter,
// replacing old (nil if none).
func (b *Batch) PutKeyedRecord(key, idem string, old, r *crdt.KeyedRecord) {
	var oldMs int64
	if old != nil {
		oldMs = old.HLC.WallMs()
	}
	putRecord(b, appendKeyedKey(b.kbuf[:0], key, idem), key, idem, old, r, crdt.AppendKeyedRecord)
	b.moveExpiry(key, idem, old != nil, oldMs, r.HLC.WallMs())
}

// PutSpend writes the record of one idempotency key of budget key's
// spends, replacing old (nil if none).
func (b *Batch) PutSpend(key, idem string, old, r *crdt.Spend) {
	name := crdt.SpendName(key)
	var oldMs int64
	if old != nil {
		oldMs = old.HLC.WallMs()
	}
	putRecord(b, appendKeyedKey(b.kbuf[:0], name, idem), name, idem, old, r, crdt.AppendSpend)
	b.moveExpiry(name, idem, old != nil, oldMs, r.HLC.WallMs())
}

// moveExpiry moves a keyed record's expiry entry when its register's wall
// time changed (from oldMs if it had one, hadOld).
func (b *Batch) moveExpiry(name, idem string, hadOld bool, oldMs, ms int64) {
	if hadOld && oldMs == ms {
		return
	}
	if hadOld {
		b.kbuf = appendExpiryKey(b.kbuf[:0], oldMs, name, idem)
		_ = b.b.Delete(b.kbuf, nil)
	}
	b.kbuf = appendExpiryKey(b.kbuf[:0], ms, name, idem)
	_ = b.b.Set(b.kbuf, nil, nil)
}

// DeleteKeyedRecord forgets an expired keyed record: the record (old is
// its stored state, for the digest), its expiry entry and its marker.
func (b *Batch) DeleteKeyedRecord(key, idem string, old *crdt.KeyedRecord) {
	b.obuf = crdt.AppendKeyedRecord(b.obuf[:0], old)
	b.deleteKeyed(Counters, key, idem, old.HLC.WallMs())
}

// DeleteSpend forgets an expired spend, as DeleteKeyedRecord.
func (b *Batch) DeleteSpend(key, idem string, old *crdt.Spend) {
	b.obuf = crdt.AppendSpend(b.obuf[:0], old)
	b.deleteKeyed(Budgets, key, idem, old.HLC.WallMs())
}

// deleteKeyed deletes a keyed record or spend whose stored value is in
// b.obuf, stamped at ms.
func (b *Batch) deleteKeyed(k Kind, key, idem string, ms int64) {
	name := keyedName(k, key)
	b.kbuf = appendKeyedKey(b.kbuf[:0], name, idem)
	b.digest(b.kbuf, b.obuf, nil)
	_ = b.b.Delete(b.kbuf, nil)
	b.kbuf = appendExpiryKey(b.kbuf[:0], ms, name, idem)
	_ = b.b.Delete(b.kbuf, nil)
	b.SetMarker(k, key, idem, false)
}

// Expiring calls fn, oldest first, for every keyed record (k Counters) and
// spend (k Budgets) whose register is stamped before beforeMs, until fn
// returns false.
func (s *Store) Expiring(beforeMs int64, fn func(k Kind, key, idem string, ms int64) bool) error {
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
		kind, key := keyedKind(parts[1])
		if !fn(kind, key, parts[2], int64(ms)) {
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
			r := &crdt.KeyedRecord{HLC: crdt.MakeHLC(max(e.AtMs, 1), 0), Origin: self}
			if e.HasBy {
				r.Amount = e.By
				r.Contrib = r.Contrib.Add(self, e.By)
			}
			b.PutKeyedRecord(e.Key, e.Idem, nil, r)
			n++
		}
		err := b.Commit()
		b.Close()
		if err != nil {
			return n, fmt.Errorf("convert idempotency keys: %w", err)
		}
	}
}

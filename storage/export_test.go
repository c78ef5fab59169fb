package storage

// What only the tests use: helpers that build or inspect a store in ways
// the replica never needs.

import (
	"encoding/binary"
)

// LogEvent appends e to the batch's events; Commit writes them with the
// next seqs. Only the replica's writer logs, one batch at a time.
func (b *Batch) LogEvent(e Event) {
	b.events = append(b.events, e)
}

// LogFirst is the seq of the oldest event still in the log (0: empty).
func (s *Store) LogFirst() (uint64, error) {
	var first uint64
	err := s.ScanLog(0, 1, func(e Event) bool { first = e.Seq; return false })
	return first, err
}

// PutIdempotency writes a per-replica idempotency key as versions before
// keyed records did; ConvertIdempotency turns it into a keyed record. Tests
// use it to build such a store.
func (b *Batch) PutIdempotency(key, idem string, v IdemValue) {
	b.buf = AppendIdemValue(b.buf[:0], v)
	_ = b.b.Set(idemKey(key, idem), b.buf, nil)
}

// FlaggedUsers reports how many users have a flag, blocked or not.
func (s *Store) FlaggedUsers() int {
	s.flags.mu.RLock()
	defer s.flags.mu.RUnlock()
	return len(s.flags.all)
}

// AppendIdemValue encodes v as DecodeIdemValue reads it, version 2.
func AppendIdemValue(dst []byte, v IdemValue) []byte {
	dst = append(dst, 2)
	dst = binary.AppendVarint(dst, v.Value)
	dst = binary.AppendVarint(dst, v.AtMs)
	return binary.AppendVarint(dst, v.By)
}

func vectorEntryKey(k Kind, item, replica string) []byte {
	return appendVectorEntryKey(make([]byte, 0, 10+len(item)+len(replica)), k, item, replica)
}

package storage

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Intents are the entry replica's journal of cross-shard operations in
// flight (package purchase): one value per operation, written durably
// before its first step and deleted once it has finished or been undone,
// so a replica that restarts finds what it must still drive to an end.
// They are this replica's own bookkeeping: not in any anti-entropy
// segment, never replicated.

const prefixIntent = 'c' // c/<id>: an operation in flight

func intentKey(id string) []byte { return appendKey(nil, prefixIntent, id) }

// PutIntent stores the intent id durably (whatever the store's
// durability, the journal is synced: a step must never run before its
// intent is on disk).
func (s *Store) PutIntent(id string, v []byte) error {
	if s.closed.Load() {
		return fmt.Errorf("put intent %q: %w", id, ErrClosed)
	}
	if err := s.db.Set(intentKey(id), v, pebble.Sync); err != nil {
		return fmt.Errorf("put intent %q: %w", id, err)
	}
	return nil
}

// Intent reads intent id.
func (s *Store) Intent(id string) ([]byte, bool, error) {
	b, ok, err := s.get(intentKey(id))
	return b, ok, wrapRead(err, "intent", id)
}

// DeleteIntent removes intent id (synced, like PutIntent).
func (s *Store) DeleteIntent(id string) error {
	if s.closed.Load() {
		return fmt.Errorf("delete intent %q: %w", id, ErrClosed)
	}
	if err := s.db.Delete(intentKey(id), pebble.Sync); err != nil {
		return fmt.Errorf("delete intent %q: %w", id, err)
	}
	return nil
}

// Intents calls fn for every intent in id order, until fn returns false.
func (s *Store) Intents(fn func(id string, v []byte) bool) error {
	if s.closed.Load() {
		return fmt.Errorf("scan intents: %w", ErrClosed)
	}
	prefix := []byte{prefixIntent, '/'}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("scan intents: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		if !fn(string(it.Key()[len(prefix):]), append([]byte(nil), it.Value()...)) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("scan intents: %w", err)
	}
	return nil
}

package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
)

// Backups: a checkpoint is a consistent copy of the whole store at one
// commit, taken while the store is in use (Pebble hard-links the
// immutable tables and copies the rest). A copy restored in place of a
// data directory is an old state of this replica, and the replica went on
// after it: it logged events under the copy's log id and seqs, and
// numbered likes from its leases. ForgetRun, in a batch on the copy,
// keeps the restored replica from doing those again.

// Checkpoint writes a consistent copy of the store into dir, which must
// not exist (its parent must). Writes go on meanwhile; the copy holds
// every commit acknowledged before Checkpoint was called, and no partial
// batch.
func (s *Store) Checkpoint(dir string) error {
	if s.closed.Load() {
		return fmt.Errorf("checkpoint: %w", ErrClosed)
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("checkpoint into %s: %w", dir, os.ErrExist)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checkpoint into %s: %w", dir, err)
	}
	if st, err := os.Stat(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("checkpoint into %s: %w", dir, err)
	} else if !st.IsDir() {
		return fmt.Errorf("checkpoint into %s: %s is not a directory", dir, filepath.Dir(dir))
	}
	// WithFlushedWAL: a commit acknowledged with DurabilityNone is in the
	// copy too.
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("checkpoint into %s: %w", dir, err)
	}
	return nil
}

// ForgetRun makes the batch's store, a copy about to be restored, forget
// what the replica went on to do after the copy was taken, so that the
// restored replica does not do it again:
//
//   - the event log gets a new log id at the next open (stream message
//     ids and consumers' (replica, log, seq) keys of the events the
//     replica logged after the copy must not be reused), and every event
//     in the copy counts as published (the replica published them after
//     the copy; its events go on from the copy's last seq, under the new
//     id);
//   - the numbering queues are dropped (q/, l/): the replica numbered the
//     queued events after the copy, and the events that took numbers of
//     its old leases are not told their ranks again (the restored
//     replica's lease holder gives those leases up as lost, like a
//     replica that lost its disk). Milestone claim intents (n/) stay:
//     a claim already made is not made twice.
//
// The caller drops the sequencer snapshots (region's metadata) too.
func (b *Batch) ForgetRun() {
	_ = b.b.Delete(metaKey(metaLogID), nil)
	b.PutMeta(metaLogPublished, binary.BigEndian.AppendUint64(nil, b.s.LogLast()))
	for _, p := range []byte{prefixUnnumbered, prefixNumbered} {
		_ = b.b.DeleteRange([]byte{p, '/'}, prefixEnd([]byte{p, '/'}), nil)
	}
}

// DeleteMeta deletes a metadata value.
func (b *Batch) DeleteMeta(name string) {
	_ = b.b.Delete(metaKey(name), nil)
}

// DeleteMetaPrefix deletes every metadata value whose name starts with
// prefix.
func (b *Batch) DeleteMetaPrefix(prefix string) {
	k := metaKey(prefix)
	_ = b.b.DeleteRange(k, prefixEnd(k), nil)
}

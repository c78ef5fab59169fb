package storage

import (
	"context"
	"fmt"
)

// Compact flushes the memtable and compacts the whole key space, so that
// every live key sits in one sorted run with obsolete versions and
// tombstones gone. It is for measuring space and for operators; a running
// replica never needs it (Pebble compacts in the background).
func (s *Store) Compact(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("compact store: %w", ErrClosed)
	}
	if err := s.db.Flush(); err != nil {
		return fmt.Errorf("compact store: flush: %w", err)
	}
	// Every key starts with a printable prefix byte; 0xff sorts after all.
	if err := s.db.Compact(ctx, []byte{0}, []byte{0xff}, true); err != nil {
		return fmt.Errorf("compact store: %w", err)
	}
	return nil
}

// TableBytes is the size of the store's live sstables: its state on disk,
// without the WAL (which holds only what has not been flushed yet).
func (s *Store) TableBytes() (int64, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("table bytes: %w", ErrClosed)
	}
	return s.db.Metrics().Total().TablesSize, nil
}

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

// MemoryUse is the memory the store holds by design, for watching that
// memory stays bounded under load.
type MemoryUse struct {
	// BlockCache is Pebble's block cache, outside the Go heap; it grows as
	// blocks are read, up to Config.CacheBytes.
	BlockCache int64
	// MemTables is Pebble's memtables, live and waiting to be flushed or
	// recycled, outside the Go heap.
	MemTables int64
	// RecordFilter is what of the record filter is allocated, on the Go
	// heap: the pages a key has set a bit in, and the page table.
	RecordFilter int64
	// VectorFilter is what of the vector filter is allocated, likewise.
	VectorFilter int64
	// Tables is the size of the live sstables on disk (TableBytes), for
	// relating memory to the amount of state.
	Tables int64
}

// MemoryUse reports the store's memory by part.
func (s *Store) MemoryUse() (MemoryUse, error) {
	if s.closed.Load() {
		return MemoryUse{}, fmt.Errorf("memory use: %w", ErrClosed)
	}
	m := s.db.Metrics()
	u := MemoryUse{
		BlockCache: m.BlockCache.Size,
		MemTables:  int64(m.MemTable.Size + m.MemTable.ZombieSize),
		Tables:     m.Total().TablesSize,
	}
	if s.filter != nil {
		u.RecordFilter = s.filter.bytes()
	}
	if s.vfilter != nil {
		u.VectorFilter = s.vfilter.bytes()
	}
	return u, nil
}

// WriteStats is what the store has written since it opened.
type WriteStats struct {
	// Commits counts committed batches: each is one WAL fsync under
	// DurabilitySync.
	Commits uint64
	// WALBytes is what Pebble wrote to the WAL (its WAL.BytesWritten).
	WALBytes uint64
}

// WriteStats reports the commits and WAL bytes written since open, for
// measuring what a workload costs the disk.
func (s *Store) WriteStats() (WriteStats, error) {
	if s.closed.Load() {
		return WriteStats{}, fmt.Errorf("write stats: %w", ErrClosed)
	}
	return WriteStats{Commits: s.commits.Load(), WALBytes: s.db.Metrics().WAL.BytesWritten}, nil
}

package storage

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// stalls counts Pebble's write stalls (commits held because memtables or
// level 0 filled faster than they were flushed or compacted) and their
// total duration. The event listener, built before the Store, updates it.
type stalls struct {
	mu    sync.Mutex
	count uint64
	total time.Duration
	since time.Time // zero: no stall in progress
}

func (s *stalls) begin(pebble.WriteStallBeginInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	s.since = time.Now()
}

func (s *stalls) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.since.IsZero() {
		s.total += time.Since(s.since)
		s.since = time.Time{}
	}
}

// read returns the stalls so far and their duration, a stall in progress
// counted up to now.
func (s *stalls) read() (uint64, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.total
	if !s.since.IsZero() {
		d += time.Since(s.since)
	}
	return s.count, d
}

func storageDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("tally_storage_"+name, help, nil, nil)
}

var (
	descDiskUsage = storageDesc("disk_usage_bytes",
		"Bytes the store takes on disk: live and obsolete sstables, the WAL, the manifest and compactions in progress.")
	descCompactionDebt = storageDesc("compaction_debt_bytes",
		"Pebble's estimate of the bytes compactions must rewrite to bring the LSM to its stable shape.")
	descCompactions = storageDesc("compactions_total", "Compactions finished since the store opened.")
	descL0Files     = storageDesc("l0_files", "sstables in level 0; Pebble stalls writes when level 0 grows too deep.")
	descL0Sublevels = storageDesc("l0_sublevels", "Sublevels of level 0: the read amplification of level 0.")
	descMemTable    = storageDesc("memtable_bytes", "Bytes held by memtables, the one filling and those waiting to be flushed.")
	descWALWritten  = storageDesc("wal_written_bytes_total", "Bytes written to the write-ahead log since the store opened.")
	descStalls      = storageDesc("write_stalls_total",
		"Write stalls since the store opened: commits held because memtables or level 0 filled faster than they were flushed or compacted.")
	descStallTime = storageDesc("write_stall_seconds_total", "Time commits spent held by write stalls since the store opened.")
	descFSAvail   = storageDesc("filesystem_avail_bytes",
		"Bytes free for an unprivileged user on the filesystem holding the data directory.")
	descFSSize = storageDesc("filesystem_size_bytes", "Size of the filesystem holding the data directory.")
)

// collector exports the store's Pebble metrics and its filesystem's space
// at scrape time. Registered by Open when Config.Registerer is set.
type collector struct{ s *Store }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDiskUsage, descCompactionDebt, descCompactions, descL0Files,
		descL0Sublevels, descMemTable, descWALWritten, descStalls, descStallTime, descFSAvail, descFSSize} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	// Pebble panics on a closed DB: Close waits for a scrape in progress.
	s.mmu.RLock()
	if s.closed.Load() {
		s.mmu.RUnlock()
		return
	}
	m := s.db.Metrics()
	s.mmu.RUnlock()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(descDiskUsage, float64(m.DiskSpaceUsage()))
	gauge(descCompactionDebt, float64(m.Compact.EstimatedDebt))
	counter(descCompactions, float64(m.Compact.Count))
	gauge(descL0Files, float64(m.Levels[0].TablesCount))
	gauge(descL0Sublevels, float64(m.Levels[0].Sublevels))
	gauge(descMemTable, float64(m.MemTable.Size))
	counter(descWALWritten, float64(m.WAL.BytesWritten))
	n, d := s.stalls.read()
	counter(descStalls, float64(n))
	counter(descStallTime, d.Seconds())
	if s.dir != "" {
		if avail, size, ok := filesystemSpace(s.dir); ok {
			gauge(descFSAvail, float64(avail))
			gauge(descFSSize, float64(size))
		}
	}
}

package storage

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// gatherStorage returns every tally_storage_* sample of reg by name.
func gatherStorage(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "tally_storage_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	}
	return -1
}

// A store opened with a Registerer exports Pebble's state and its
// filesystem's space with values that follow what was written, and takes
// its collector away when it closes.
func TestStoreMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Dir, cfg.Registerer = t.TempDir(), reg
	s := openTest(t, cfg)

	for i := range 100 {
		commit(t, s, func(b *Batch) { b.PutMeta(fmt.Sprintf("test/%d", i), bytes.Repeat([]byte{byte(i)}, 4096)) })
	}
	got := gatherStorage(t, reg)
	for _, name := range []string{"disk_usage_bytes", "compaction_debt_bytes", "compactions_total", "l0_files", "l0_sublevels",
		"memtable_bytes", "wal_written_bytes_total", "write_stalls_total", "write_stall_seconds_total",
		"filesystem_avail_bytes", "filesystem_size_bytes"} {
		if _, ok := got["tally_storage_"+name]; !ok {
			t.Errorf("tally_storage_%s not exported; got %v", name, got)
		}
	}
	if v := got["tally_storage_wal_written_bytes_total"]; v < 100*4096 {
		t.Errorf("wal_written_bytes_total %v after 400 KiB of values", v)
	}
	// Pebble measures the WAL's files behind the writes (their size at
	// the last rotation or sync it saw), so only a lower bound holds.
	if v := got["tally_storage_disk_usage_bytes"]; v < 4096 {
		t.Errorf("disk_usage_bytes %v with 400 KiB in the WAL", v)
	}
	if v := got["tally_storage_memtable_bytes"]; v < 100*4096 {
		t.Errorf("memtable_bytes %v with 400 KiB not flushed", v)
	}
	if size, avail := got["tally_storage_filesystem_size_bytes"], got["tally_storage_filesystem_avail_bytes"]; size <= 0 || avail <= 0 || avail > size {
		t.Errorf("filesystem size %v, avail %v", size, avail)
	}
	if v := got["tally_storage_write_stalls_total"]; v != 0 {
		t.Errorf("write_stalls_total %v without a stall", v)
	}

	// Compaction moves the memtable into one sstable below level 0.
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = gatherStorage(t, reg)
	if v := got["tally_storage_compactions_total"]; v < 1 {
		t.Errorf("compactions_total %v after a compaction", v)
	}
	if v := got["tally_storage_l0_files"]; v != 0 {
		t.Errorf("l0_files %v after a full compaction", v)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := gatherStorage(t, reg); len(got) != 0 {
		t.Errorf("a closed store still exports %v", got)
	}
	// The collector is gone: the directory opens again on the same registry.
	s = openTest(t, cfg)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// stallingFS holds the creation of every sstable until release is
// closed: memtables cannot be flushed, so commits stall once they fill.
type stallingFS struct {
	vfs.FS
	release chan struct{}
}

func (f stallingFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		<-f.release
	}
	return f.FS.Create(name, cat)
}

// A write stall is counted while it lasts, and its time once it ends.
func TestStoreMetricsWriteStall(t *testing.T) {
	reg := prometheus.NewRegistry()
	fs := stallingFS{FS: vfs.NewMem(), release: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Dir, cfg.FS, cfg.Registerer, cfg.MemTableBytes = "db", fs, reg, 1<<20
	s := openTest(t, cfg)
	defer func() { _ = s.Close() }()
	released := false
	defer func() {
		if !released {
			close(fs.release)
		}
	}()

	done := make(chan error, 1)
	go func() { // owned by this test: it ends once the stall is released
		val := bytes.Repeat([]byte{'x'}, 64<<10)
		for i := range 64 { // 4 MiB: more than the two memtables hold
			b := s.NewBatch()
			b.PutMeta(fmt.Sprintf("test/%d", i), val)
			err := b.Commit()
			b.Close()
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	testkit.WaitFor(t, 30*time.Second, func() error {
		if v := gatherStorage(t, reg)["tally_storage_write_stalls_total"]; v != 1 {
			return fmt.Errorf("write_stalls_total %v, want 1 while flushes are held", v)
		}
		return nil
	})
	if got, ok := gatherStorage(t, reg)["tally_storage_filesystem_size_bytes"]; ok {
		t.Errorf("filesystem space of an in-memory FS exported: %v", got)
	}
	before := gatherStorage(t, reg)["tally_storage_write_stall_seconds_total"]
	testkit.WaitFor(t, 10*time.Second, func() error {
		// The stall in progress counts up to now.
		if v := gatherStorage(t, reg)["tally_storage_write_stall_seconds_total"]; v <= before {
			return fmt.Errorf("write_stall_seconds_total %v, not past %v while stalled", v, before)
		}
		return nil
	})
	close(fs.release)
	released = true
	if err := <-done; err != nil {
		t.Fatalf("commit after the stall: %v", err)
	}
	got := gatherStorage(t, reg)
	if got["tally_storage_write_stalls_total"] < 1 || got["tally_storage_write_stall_seconds_total"] <= before {
		t.Errorf("after the stall: %v", got)
	}
}

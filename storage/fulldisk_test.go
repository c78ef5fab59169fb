package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// smallDisk is a filesystem of limited size, as a small tmpfs is: the
// write that crosses its quota of bytes (summed over every file, never
// given back) writes what fits and fails with ENOSPC, and every later write
// fails the same way, until Grow lifts the limit. The short write matters:
// it leaves a torn record at the end of the WAL, which is what a real full
// disk leaves, and what Pebble must replay on the next start. (errorfs
// cannot model it: its injectors refuse a whole operation and never see
// its size.)
//
// Files whose names start with one of exempt take no room: a test that
// must not end the process exempts what Pebble cannot fail to write
// without ending it (a MANIFEST write, in any goroutine; a WAL write, where
// a failure can panic Pebble's commit pipeline past recovery). The tests
// that fill a disk for real run in a child process and exempt nothing.
type smallDisk struct {
	vfs.FS
	exempt  []string
	only    vfs.DiskWriteCategory // if set, only files of this category take room
	written atomic.Int64
	quota   atomic.Int64
	refused atomic.Int64 // writes cut short or refused
	full    sync.Once
	onFull  func(name string) // if set, called once, at the first write cut short
}

func newSmallDisk(base vfs.FS, quota int64, exempt ...string) *smallDisk {
	d := &smallDisk{FS: base, exempt: exempt}
	d.quota.Store(quota)
	return d
}

// Grow gives the disk room again: what an operator does by freeing space.
func (d *smallDisk) Grow() { d.quota.Store(1 << 62) }

// room reserves up to n bytes and returns how many it got.
func (d *smallDisk) room(name string, n int) int {
	for _, e := range d.exempt {
		if strings.HasPrefix(filepath.Base(name), e) || strings.HasSuffix(name, e) {
			return n
		}
	}
	for {
		w, q := d.written.Load(), d.quota.Load()
		got := int64(n)
		if w+got > q {
			got = max(q-w, 0)
		}
		if d.written.CompareAndSwap(w, w+got) {
			if got < int64(n) {
				d.refused.Add(1)
				if d.onFull != nil {
					d.full.Do(func() { d.onFull(name) })
				}
			}
			return int(got)
		}
	}
}

func (d *smallDisk) wrap(name string, cat vfs.DiskWriteCategory, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	if d.only != "" && cat != d.only {
		return f, nil
	}
	return &smallFile{File: f, d: d, name: name}, nil
}

func (d *smallDisk) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := d.FS.Create(name, cat)
	return d.wrap(name, cat, f, err)
}

func (d *smallDisk) OpenReadWrite(name string, cat vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := d.FS.OpenReadWrite(name, cat, opts...)
	return d.wrap(name, cat, f, err)
}

func (d *smallDisk) ReuseForWrite(oldname, newname string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := d.FS.ReuseForWrite(oldname, newname, cat)
	return d.wrap(newname, cat, f, err)
}

type smallFile struct {
	vfs.File
	d    *smallDisk
	name string
}

func (f *smallFile) enospc() error {
	return &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
}

func (f *smallFile) Write(p []byte) (int, error) {
	n := f.d.room(f.name, len(p))
	if n < len(p) {
		w, _ := f.File.Write(p[:n])
		return w, f.enospc()
	}
	return f.File.Write(p)
}

func (f *smallFile) WriteAt(p []byte, off int64) (int, error) {
	n := f.d.room(f.name, len(p))
	if n < len(p) {
		w, _ := f.File.WriteAt(p[:n], off)
		return w, f.enospc()
	}
	return f.File.WriteAt(p, off)
}

// The child process of the full-disk tests: it fills the disk at
// fullDiskDirEnv (through a smallDisk of fullDiskQuotaEnv bytes when that
// is set, else the filesystem as it is), printing "ack <i>" after batch i
// is committed, "failed <error>" at the first failed commit and "acked
// after failure" if a later commit succeeds, then closes the store and
// exits. Pebble may end it instead, on a write it cannot fail (see
// smallDisk): a process that dies on a full disk is allowed, one that
// acknowledges what it did not write is not.
const (
	fullDiskDirEnv   = "TALLY_FULLDISK_CHILD_DIR"
	fullDiskQuotaEnv = "TALLY_FULLDISK_CHILD_QUOTA"
	fullDiskPer      = 20 // workload batches (4 keys each) per commit
)

func fullDiskID(i, j int) string { return fmt.Sprintf("b%d-%d-padding-padding-padding", i, j) }

func TestFullDiskChild(t *testing.T) {
	dir := os.Getenv(fullDiskDirEnv)
	if dir == "" {
		t.Skip("runs only as the child process of the full-disk tests")
	}
	cfg := Config{Dir: dir, MemTableBytes: 256 << 10, RecordFilterBytes: -1,
		Logger: hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Info})}
	if q := os.Getenv(fullDiskQuotaEnv); q != "" {
		quota, err := strconv.ParseInt(q, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		disk := newSmallDisk(vfs.Default, quota)
		// Pebble may end the process on a failed write with a message that
		// does not say why (a panic with an error value it cannot print,
		// then a fatal error), so the disk says when it filled.
		disk.onFull = func(name string) {
			fmt.Fprintf(os.Stderr, "child: the disk is full: a write to %s: no space left on device\n", filepath.Base(name))
		}
		cfg.FS = disk
	}
	s, err := Open(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child open: %v\n", err)
		os.Exit(2)
	}
	failed := false
	for i, after := 0, 0; i < 1_000_000 && after < 3; i++ {
		err, stalled := commitOrFail(s, func(b *Batch) {
			for j := range fullDiskPer {
				fillWorkload(b, fullDiskID(i, j), uint64(i*fullDiskPer+j))
			}
		})
		if stalled {
			// The store failed (a flush) while the commit waited inside
			// Pebble for room only a flush can make: it never returns, and
			// Close would wait for it. The operator stops the process.
			fmt.Printf("failed %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			fmt.Fprintln(os.Stderr, "child: a commit is stalled on the failed store; exiting without closing")
			os.Exit(0)
		}
		switch {
		case err == nil && failed:
			fmt.Printf("acked after failure %d\n", i)
		case err == nil:
			fmt.Printf("ack %d\n", i)
		case !failed:
			failed = true
			fmt.Printf("failed %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		}
		if failed {
			after++
		}
	}
	if !failed {
		fmt.Println("never filled")
	}
	// Stopped by an operator; the disk is still full, so the close may
	// fail. It must not hang.
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		fmt.Fprintf(os.Stderr, "child close after %s: %v\n", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		fmt.Println("close hung")
	}
	os.Exit(0)
}

// commitOrFail commits a batch filled by fill and returns its error; or,
// if the store fails while the commit has not returned (it is stalled in
// Pebble), the store's error and stalled.
func commitOrFail(s *Store, fill func(b *Batch)) (err error, stalled bool) {
	done := make(chan error, 1)
	go func() {
		b := s.NewBatch()
		defer b.Close()
		fill(b)
		done <- b.Commit()
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err, false
		case <-tick.C:
			if err := s.Err(); err != nil {
				select {
				case err := <-done:
					return err, false
				case <-time.After(time.Second):
					return err, true
				}
			}
		}
	}
}

// runFullDisk runs the child on dir (with a smallDisk of quota bytes if
// quota > 0) until it has filled the disk and stopped, checks that it
// acknowledged nothing after its first failed commit, and returns the
// batches it acknowledged.
func runFullDisk(t *testing.T, dir string, quota int64) (acked int) {
	t.Helper()
	// A child that hangs panics at its timeout with every goroutine's
	// stack, which the failure below shows.
	cmd := exec.Command(os.Args[0], "-test.run=^TestFullDiskChild$", "-test.count=1", "-test.timeout=30s")
	cmd.Env = append(os.Environ(), fullDiskDirEnv+"="+dir)
	if quota > 0 {
		cmd.Env = append(cmd.Env, fullDiskQuotaEnv+"="+strconv.FormatInt(quota, 10))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	werr := cmd.Run()
	var failure string
	next := 0
	for _, line := range strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "ack "):
			i, err := strconv.Atoi(strings.TrimPrefix(line, "ack "))
			if err != nil || i != next {
				t.Fatalf("child acked %q, want batch %d", line, next)
			}
			next++
		case strings.HasPrefix(line, "failed "):
			failure = line
		case line == "PASS" || line == "":
		default:
			t.Errorf("child: %s", line)
		}
	}
	t.Logf("child acked %d commits (%d batches) before the disk filled; %s; exit %v", next, next*fullDiskPer, failure, werr)
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(line, "child") {
			t.Log(line)
		}
	}
	if strings.Contains(stderr.String(), "panic: test timed out") {
		t.Fatalf("child hung; stderr:\n%s", stderr.String())
	}
	if failure == "" {
		// Pebble ended the process on a write it cannot fail: allowed,
		// as long as it was the full disk.
		if werr == nil || !strings.Contains(stderr.String(), "no space left on device") {
			t.Fatalf("child stopped without a failed commit (exit %v); stderr:\n%s", werr, stderr.String())
		}
	} else if !strings.Contains(failure, ErrFailed.Error()) || !strings.Contains(failure, "no space left on device") {
		t.Errorf("child's first failed commit: %q, want ErrFailed for a full disk", failure)
	}
	if next == 0 {
		t.Fatalf("child acknowledged nothing; stderr:\n%s", stderr.String())
	}
	return next
}

// restartAfterFull opens the store in dir as a restarted replica would,
// twice (the second time after a restart with nothing written, which
// leaves a WAL holding no batch), and checks each time that the store is
// healthy, holds every one of the acked commits whole and takes a new
// commit.
func restartAfterFull(t *testing.T, dir string, acked int) {
	t.Helper()
	for restart := 1; restart <= 3; restart++ {
		s, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatalf("restart %d after space was freed: %v", restart, err)
		}
		if err := s.Err(); err != nil {
			s.Close()
			t.Fatalf("restart %d after space was freed: the store failed at open: %v", restart, err)
		}
		for i := range acked {
			for j := range fullDiskPer {
				if k := workloadKeys(t, s, fullDiskID(i, j), uint64(i*fullDiskPer+j)); k != 4 {
					s.Close()
					t.Fatalf("restart %d: acknowledged batch %s has %d of 4 keys", restart, fullDiskID(i, j), k)
				}
			}
		}
		if restart == 2 {
			id := "after-restart"
			commit(t, s, func(b *Batch) { fillWorkload(b, id, 7) })
			if k := workloadKeys(t, s, id, 7); k != 4 || s.Err() != nil {
				t.Fatalf("a commit after the restart: %d of 4 keys, store %v", k, s.Err())
			}
		}
		if err := s.Close(); err != nil {
			t.Fatalf("restart %d: close: %v", restart, err)
		}
	}
}

// A disk fills up under a replica's store: commits are acknowledged until
// one cannot be made durable; that one and every later one fail with
// ErrFailed (or Pebble ends the process). Then space is freed, and
// restarting is enough: the store opens healthy with every acknowledged
// write, however many times it restarts. Before the flush listener let
// Pebble's empty flush through, the second restart failed, and every one
// after it.
//
// The disk is a smallDisk in the child process, so this test needs no
// mount; TestFullTmpfsRestart does the same on a real tmpfs.
func TestFullDiskFreeSpaceAndRestart(t *testing.T) {
	if os.Getenv(fullDiskDirEnv) != "" {
		t.Skip("in the child")
	}
	for _, quota := range []int64{256 << 10, 1 << 20} {
		t.Run(strconv.FormatInt(quota, 10), func(t *testing.T) {
			dir := t.TempDir()
			acked := runFullDisk(t, dir, quota)
			restartAfterFull(t, dir, acked)
		})
	}
}

// A restart with nothing written since the last one leaves a WAL holding
// no batch; replaying it at the next open makes Pebble flush nothing and
// report "pebble: empty table", which is not a failure. This also pins
// that text (see emptyFlush): if Pebble changes it, this test fails.
func TestRestartWithoutWrites(t *testing.T) {
	dir := t.TempDir()
	var flushes []pebble.FlushInfo
	for i := range 4 {
		s := openTest(t, Config{Dir: dir})
		if err := s.Err(); err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if i == 0 {
			commit(t, s, func(b *Batch) { fillWorkload(b, "x", 1) })
		}
		if k := workloadKeys(t, s, "x", 1); k != 4 {
			t.Fatalf("open %d: %d of 4 keys", i, k)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Pin Pebble's report of an empty flush.
	opts := &pebble.Options{FS: vfs.NewMem(), EventListener: &pebble.EventListener{FlushEnd: func(info pebble.FlushInfo) {
		flushes = append(flushes, info)
	}}}
	for range 3 {
		db, err := pebble.Open("/db", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	empty := 0
	for _, f := range flushes {
		if f.Err != nil && emptyFlush(f) {
			empty++
		} else if f.Err != nil {
			t.Errorf("flush at open: %v", f.Err)
		}
	}
	if empty == 0 {
		t.Errorf("no empty flush reported by Pebble in %d flushes at open: has its report changed? emptyFlush relies on it", len(flushes))
	}
}

// While a store cannot flush (the disk is full for sstables), Pebble
// retries the flush at once, forever, and reports each failure as a
// background error: hundreds a second. The store logs the first, then at
// most one line per backgroundErrorEvery, counting the rest.
func TestFullDiskLogsAtABoundedRate(t *testing.T) {
	var buf syncBuffer
	log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
	// Only sstables fill the disk: the WAL (recycled, as Pebble does, or
	// preallocated) and the MANIFEST still have room, so the process lives
	// on with a failed store, retrying its flush, as a real one can. And
	// only the flushes' sstables: when a compaction failed first, the
	// store failed with nothing left to flush (the writer stops at the
	// failure), no flush ran, and no retry was reported (1 run in 12).
	disk := newSmallDisk(vfs.NewMem(), 1<<20, "MANIFEST", ".log")
	disk.only = "pebble-memtable-flush"
	start := time.Now()
	s := openTest(t, Config{Dir: "/db", FS: disk, MemTableBytes: 256 << 10, RecordFilterBytes: -1, Logger: log})
	fillUntilFailed(t, s, disk)
	// Many failed retries (hundreds a second, tens under -race).
	testkit.WaitFor(t, 20*time.Second, func() error {
		if _, held := s.bgErrors.Counts(); held < 20 {
			return fmt.Errorf("%d background errors held back", held)
		}
		return nil
	})
	lines := 0
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "background error") {
			lines++
		}
	}
	logged, held := s.bgErrors.Counts()
	elapsed := time.Since(start)
	t.Logf("%d background errors in %s: %d logged, %d held back", logged+held, elapsed.Round(time.Millisecond), logged, held)
	// One line at the first error, then at most one per interval.
	if most := 1 + int64(elapsed/backgroundErrorEvery); lines < 1 || int64(lines) > most || int64(lines) != logged {
		t.Errorf("%d lines of background errors logged (limiter: %d) for %d errors in %s, want 1 to %d:\n%s",
			lines, logged, logged+held, elapsed, most, buf.String())
	}
}

// syncBuffer is a bytes.Buffer for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fillUntilFailed commits workload batches from a goroutine until the
// store fails, and waits for that. The last commit may be stalled inside
// Pebble, waiting for room that only a flush or compaction can make: at
// cleanup the disk gets room, the writer ends, and the store is closed
// (Pebble's Close, too, waits for the flush it retries forever).
func fillUntilFailed(t *testing.T, s *Store, disk *smallDisk) {
	t.Helper()
	stop := make(chan struct{})
	writer := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				writer <- nil
				return
			default:
			}
			b := s.NewBatch()
			for j := range fullDiskPer {
				fillWorkload(b, fullDiskID(i, j), uint64(i*fullDiskPer+j))
			}
			err := b.Commit()
			b.Close()
			if err != nil {
				if !errors.Is(err, ErrFailed) {
					err = fmt.Errorf("commit %d: %w", i, err)
				} else {
					<-stop
					err = nil
				}
				writer <- err
				return
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		disk.Grow()
		if err := <-writer; err != nil {
			t.Error(err)
		}
		s.Close()
	})
	testkit.WaitFor(t, 20*time.Second, func() error {
		if s.Err() == nil {
			return errors.New("the store has not failed")
		}
		return nil
	})
}

// A disk full for compactions alone (flushes of small memtables still
// fit): level 0 fills, and Pebble would stall every commit for good while
// the replica looked healthy. The store fails instead, so the replica
// answers storage_failed and /healthz fails.
func TestCompactionOnFullDiskFailsTheStore(t *testing.T) {
	disk := newSmallDisk(vfs.NewMem(), 0)
	disk.only = "pebble-compaction"
	s := openTest(t, Config{Dir: "/db", FS: disk, MemTableBytes: 256 << 10, RecordFilterBytes: -1})
	fillUntilFailed(t, s, disk)
	if err := s.Err(); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "compaction") {
		t.Fatalf("store error %v, want ErrFailed for a compaction on a full disk", err)
	}
}

package httpapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/storage"
)

// quotaFS is a small filesystem: writes past its quota of bytes, summed
// over every file, fail with ENOSPC, as a full disk's would.
//
// MANIFEST writes are exempt. Pebble takes a failed MANIFEST write as
// fatal wherever it happens; in a flush goroutine that ends the process
// (safe, see storage's pebbleLogger.Fatalf, but it ends the test binary
// too), and which write hits the quota first is down to timing. The test
// is about the commit path: WAL and sstable writes still fill the disk.
type quotaFS struct {
	vfs.FS
	left *atomic.Int64
}

func (q quotaFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(filepath.Base(name), "MANIFEST") {
		return f, nil
	}
	return quotaFile{File: f, left: q.left}, nil
}

func (q quotaFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := q.FS.Create(name, c)
	return q.wrap(name, f, err)
}

func (q quotaFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := q.FS.OpenReadWrite(name, c, opts...)
	return q.wrap(name, f, err)
}

func (q quotaFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := q.FS.ReuseForWrite(oldname, newname, c)
	return q.wrap(newname, f, err)
}

type quotaFile struct {
	vfs.File
	left *atomic.Int64
}

func (f quotaFile) take(n int) error {
	if f.left.Add(-int64(n)) < 0 {
		return &os.PathError{Op: "write", Path: "quota", Err: syscall.ENOSPC}
	}
	return nil
}

func (f quotaFile) Write(p []byte) (int, error) {
	if err := f.take(len(p)); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f quotaFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.take(len(p)); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

// A disk that fills up: the replica goes on until a write cannot be made
// durable, then stops (storage_failed, health 503) rather than stalling
// or acknowledging what it could not write; and every like it
// acknowledged is there when the data directory is opened again with room.
func TestFullSmallDiskStopsTheReplicaAndKeepsAcknowledgedWrites(t *testing.T) {
	var left atomic.Int64
	left.Store(6 << 20)
	dir := t.TempDir()
	rep, st, ts := serveOnFaultyDisk(t, storage.Config{Dir: dir, FS: quotaFS{FS: vfs.Default, left: &left}, MemTableBytes: 1 << 20})
	ctx := context.Background()
	var acked []string
	var stopped error
	for i := 0; i < 1000 && stopped == nil; i++ {
		ops := make([]region.Op, 200)
		for j := range ops {
			ops[j] = region.Op{Kind: region.OpLike, Item: "post1", User: fmt.Sprintf("user-%d-%d-padding-to-make-the-record-longer", i, j)}
		}
		res, err := rep.Do(ctx, ops)
		if err != nil {
			stopped = err
			break
		}
		for j, r := range res {
			if r.Err == nil {
				acked = append(acked, ops[j].User)
			} else if stopped == nil {
				stopped = r.Err
			}
		}
	}
	if !errors.Is(stopped, region.ErrFailed) || !errors.Is(rep.Err(), region.ErrFailed) {
		t.Fatalf("after filling the disk: %v (Err %v), want the replica failed", stopped, rep.Err())
	}
	if len(acked) == 0 {
		t.Fatal("nothing was acknowledged before the disk filled")
	}
	checkStopped(t, ts)
	ts.Close()
	_ = rep.Close()
	_ = st.Close() // may fail: the disk is full

	// The same directory, with room again.
	st2, err := storage.Open(storage.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	for _, u := range acked {
		rec, ok, err := st2.LikeRecord("post1", u)
		if err != nil || !ok || !rec.Liked {
			t.Fatalf("acknowledged like by %s lost after the disk filled: %v %v %v", u, rec, ok, err)
		}
	}
	v, err := st2.Vector(storage.Likes, "post1")
	if err != nil || v.Value() < int64(len(acked)) {
		t.Fatalf("count %d after reopening, %d likes were acknowledged (%v)", v.Value(), len(acked), err)
	}
	t.Logf("%d likes acknowledged before the 6 MiB disk filled", len(acked))
}

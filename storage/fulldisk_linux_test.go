//go:build linux

package storage

import (
	"os"
	"syscall"
	"testing"
)

// TestFullDiskFreeSpaceAndRestart on a real filesystem: a 1 MiB tmpfs,
// which the child fills (MANIFEST and WAL included, so Pebble may end it),
// then grown to 64 MiB, as an operator frees space, before the restarts.
// 1 MiB is past the child's first memtable flushes and compactions (its
// 256 KiB memtables), so the disk fills in a flush or compaction with
// tables already written, as at 2 MiB, with a third of the acknowledged
// batches to write and read back; at 512 KiB it fills in the first WAL.
// Mounting needs privileges (the CI runs tests as root); without them the
// test is skipped, and TestFullDiskFreeSpaceAndRestart still runs.
func TestFullTmpfsRestart(t *testing.T) {
	if os.Getenv(fullDiskDirEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tally-test", dir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): TestFullDiskFreeSpaceAndRestart covers the same with a simulated disk", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	acked := runFullDisk(t, dir, 0)
	if err := syscall.Mount("tally-test", dir, "tmpfs", syscall.MS_REMOUNT, "size=64m,mode=0700"); err != nil {
		t.Fatalf("growing the tmpfs: %v", err)
	}
	restartAfterFull(t, dir, acked)
}

package storage

import "syscall"

// filesystemSpace reports the bytes free for an unprivileged user and the
// size of the filesystem holding dir.
func filesystemSpace(dir string) (avail, size uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, false
	}
	bs := uint64(st.Bsize)
	return st.Bavail * bs, st.Blocks * bs, true
}

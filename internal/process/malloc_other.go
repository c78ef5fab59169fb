//go:build !linux || !cgo

package process

// MallocTuning: without cgo Pebble allocates on the Go heap, and there is
// no C allocator to tune.
func MallocTuning() (arenaMax, mmapThreshold int) { return 0, 0 }

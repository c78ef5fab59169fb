//go:build !linux || !cgo

package main

// mallocTuning: without cgo Pebble allocates on the Go heap, and there is
// no C allocator to tune.
func mallocTuning() (arenaMax, mmapThreshold int) { return 0, 0 }

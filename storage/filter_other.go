//go:build !linux

package storage

import "sync/atomic"

// adviseHugePages is a no-op outside Linux.
func adviseHugePages([]atomic.Uint64) {}

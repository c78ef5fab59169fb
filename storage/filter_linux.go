package storage

import (
	"sync/atomic"
	"syscall"
	"unsafe"
)

// adviseHugePages asks the kernel to back the filter's words with 2 MiB
// pages (transparent huge pages in their "madvise" mode, the common
// default). A filter lookup lands on a random word of tens of MiB: with 4
// KiB pages nearly every lookup also misses the TLB, and a fresh filter
// takes one page fault per 4 KiB it first touches (16,384 for 64 MiB,
// paid by the writer's first likes). Only the 2 MiB-aligned part of the
// words is advised; the advice is a hint, and its failure changes nothing
// but speed.
func adviseHugePages(words []atomic.Uint64) {
	const huge = 2 << 20
	if len(words)*8 < 2*huge {
		return
	}
	base := unsafe.Pointer(&words[0])
	start := uintptr(base)
	end := start + uintptr(len(words))*8
	from := (start + huge - 1) &^ (huge - 1)
	to := end &^ (huge - 1)
	mem := unsafe.Slice((*byte)(unsafe.Add(base, from-start)), to-from)
	_ = syscall.Madvise(mem, syscall.MADV_HUGEPAGE)
}

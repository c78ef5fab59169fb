//go:build linux && cgo

package process

/*
#include <stdlib.h>

#ifdef __GLIBC__
#include <malloc.h>

static int tally_arena_max = 0, tally_mmap_threshold = 0;

// tally_tune_malloc runs before the Go runtime starts any thread. Pebble
// allocates its block cache with C calloc when built with cgo; with glibc's
// defaults, blocks freed when compactions delete sstables stay in many
// per-thread arenas and RSS climbs under sustained writes. Two arenas and a
// fixed 64 KiB mmap threshold (cache blocks of 64 KiB and more mapped and
// unmapped on their own) kept RSS flat in the 5-minute benchmark. An
// operator's own MALLOC_* or GLIBC_TUNABLES settings win.
__attribute__((constructor)) static void tally_tune_malloc(void) {
	if (getenv("GLIBC_TUNABLES") != NULL) {
		return;
	}
	if (getenv("MALLOC_ARENA_MAX") == NULL && mallopt(M_ARENA_MAX, 2) == 1) {
		tally_arena_max = 2;
	}
	if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL && mallopt(M_MMAP_THRESHOLD, 65536) == 1) {
		tally_mmap_threshold = 65536;
	}
}

static int tally_malloc_arena_max(void) { return tally_arena_max; }
static int tally_malloc_mmap_threshold(void) { return tally_mmap_threshold; }
static int tally_glibc(void) { return 1; }
#else
static int tally_glibc(void) { return 0; }
static int tally_malloc_arena_max(void) { return 0; }
static int tally_malloc_mmap_threshold(void) { return 0; }
#endif
*/
import "C"

// MallocTuning says what the process start set in the C allocator (zero:
// left as it was, because the operator set it, or not glibc).
func MallocTuning() (arenaMax, mmapThreshold int) {
	return int(C.tally_malloc_arena_max()), int(C.tally_malloc_mmap_threshold())
}

// glibc reports whether the C library is glibc (the tuning applies there only).
func glibc() bool { return C.tally_glibc() == 1 }

//go:build linux && cgo

package process

import (
	"os"
	"testing"
)

// The constructor runs in this test binary too: with no MALLOC_* or
// GLIBC_TUNABLES in the environment it must have set both.
func TestMallocTuning(t *testing.T) {
	if !glibc() {
		t.Skip("not glibc: nothing is tuned")
	}
	a, m := MallocTuning()
	wantA, wantM := 2, 65536
	if os.Getenv("GLIBC_TUNABLES") != "" {
		wantA, wantM = 0, 0
	}
	if os.Getenv("MALLOC_ARENA_MAX") != "" {
		wantA = 0
	}
	if os.Getenv("MALLOC_MMAP_THRESHOLD_") != "" {
		wantM = 0
	}
	if a != wantA || m != wantM {
		t.Errorf("MallocTuning() = %d, %d; want %d, %d", a, m, wantA, wantM)
	}
}

package process

import (
	"runtime"

	"github.com/hashicorp/go-hclog"
)

// LogTuning logs how the process was tuned at start (see
// malloc_glibc.go), so an operator comparing RSS across hosts knows.
func LogTuning(log hclog.Logger) {
	if a, m := MallocTuning(); a > 0 || m > 0 {
		log.Info("C allocator tuned for Pebble's cache (MALLOC_ARENA_MAX or GLIBC_TUNABLES override it)",
			"arena_max", a, "mmap_threshold", m)
	}
}

// RaiseProcs raises GOMAXPROCS to min if it is lower, and says so. With
// one Go scheduler, which the runtime picks when the process may run
// on one CPU only (taskset, a cpuset, a one-CPU machine) and
// GOMAXPROCS=1 sets, every WAL fsync holds that scheduler for its whole
// length and requests that arrive meanwhile wait unread (see
// node.Config.MinProcs). min of 0 or 1 leaves GOMAXPROCS as it is.
func RaiseProcs(log hclog.Logger, min int) {
	if was := runtime.GOMAXPROCS(0); min > 1 && was < min {
		runtime.GOMAXPROCS(min)
		log.Info("GOMAXPROCS raised, so that a WAL fsync does not stall request handling (min_procs)",
			"from", was, "to", min)
	}
}

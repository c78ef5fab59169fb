//go:build chaos

package milestone

import (
	"os"
	"syscall"
)

// EnvCrashBeforeClaim, set to "1" in a chaos build, makes the process kill
// itself with SIGKILL just before it claims its first milestone: after the
// like that took the number was acknowledged, before the claim. Tests use
// it to prove the claim is finished on restart.
const EnvCrashBeforeClaim = "TALLY_CHAOS_CRASH_BEFORE_CLAIM"

func chaosBeforeClaim(uint64) {
	if os.Getenv(EnvCrashBeforeClaim) == "1" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}

package milestone

import (
	"os"

	"github.com/tally-dev/tally/internal/base/buildtags"
)

// EnvCrashBeforeClaim, set to "1" in a chaos build, makes the process kill
// itself with SIGKILL just before it claims its first milestone: after the
// like that took the number was acknowledged, before the claim. The chaos
// suite uses it to prove the claim is finished on restart. ChaosFromEnv
// reads it.
const EnvCrashBeforeClaim = "TALLY_CHAOS_CRASH_BEFORE_CLAIM"

// Chaos is what a chaos build may do to the claimer. Every field is
// honoured only in a chaos build; in any other the code that reads them
// compiles away. The zero Chaos changes nothing.
type Chaos struct {
	// CrashBeforeClaim kills the process (SIGKILL) just before its first
	// claim.
	CrashBeforeClaim bool
}

// ChaosFromEnv reads EnvCrashBeforeClaim through getenv (os.Getenv in
// tallyd). In a build without the chaos tag it returns the zero Chaos.
func ChaosFromEnv(getenv func(string) string) Chaos {
	if !buildtags.Chaos {
		return Chaos{}
	}
	return Chaos{CrashBeforeClaim: getenv(EnvCrashBeforeClaim) == "1"}
}

// chaosBeforeClaim is called just before a claim.
func (c *Claimer) chaosBeforeClaim() {
	if buildtags.Chaos && c.cfg.Chaos.CrashBeforeClaim {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Kill() // SIGKILL on Unix
		}
		select {} // the signal is on its way
	}
}

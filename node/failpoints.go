package node

import (
	"os"

	"github.com/tally-dev/tally/internal/base/buildtags"
	"github.com/tally-dev/tally/purchase"
)

// EnvFailpoint names a point at which a chaos build (`-tags chaos`) kills
// its own process, as kill -9 would, the first time a run reaches it:
// "cashback:<step>" is a cross-shard cashback about to take that step
// (purchase.Step: journaled, pool, merchant, fence, call_off, user, done).
// Tests use it to crash a deployment at each step and check that the
// restarted one finishes or undoes every purchase. Outside a chaos build
// it is not read.
const EnvFailpoint = "TALLY_FAILPOINT"

// failpoints is the purchase coordinator's AtStep for the failpoint
// getenv names; nil when there is none (always outside a chaos build).
func failpoints(getenv func(string) string) func(string, purchase.Step) error {
	if !buildtags.Chaos {
		return nil
	}
	want := getenv(EnvFailpoint)
	if want == "" {
		return nil
	}
	return func(_ string, s purchase.Step) error {
		if "cashback:"+s.String() == want {
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				_ = p.Kill() // SIGKILL: nothing after this runs
			}
			select {}
		}
		return nil
	}
}

package milestone

import (
	"testing"

	"github.com/tally-dev/tally/internal/base/buildtags"
)

// The crash hook is read from the environment only in a chaos build.
func TestChaosFromEnv(t *testing.T) {
	got := ChaosFromEnv(func(k string) string {
		if k == EnvCrashBeforeClaim {
			return "1"
		}
		return ""
	})
	if want := (Chaos{CrashBeforeClaim: buildtags.Chaos}); got != want {
		t.Fatalf("got %+v, want %+v (chaos build %t)", got, want, buildtags.Chaos)
	}
	if got := ChaosFromEnv(func(string) string { return "" }); got != (Chaos{}) {
		t.Fatalf("unset: got %+v", got)
	}
}

package testkit

import (
	"fmt"
	"os"
	"os/exec"
)

// BuildTallyd builds cmd/tallyd into out with the given further go build
// arguments (-tags, -ldflags) and the compile settings of every tallyd
// binary the tests build (cmd/tallyd's, the chaos suite's, and the image's in
// scripts/image-rootfs.sh): CGO_ENABLED=0 and -trimpath. Each set of
// compile settings is a full compile of the module and its dependencies
// (with cgo, C code too), so the tests' builds share one, and `make
// lint` compiles in it too (the Makefile's LINT_ENV): they differ only in
// build tags and link flags (-ldflags), and the go build cache gives
// every package not under a tag to the next build.
func BuildTallyd(out string, args ...string) error {
	argv := append([]string{"build", "-trimpath"}, args...)
	argv = append(argv, "-o", out, "github.com/tally-dev/tally/cmd/tallyd")
	cmd := exec.Command("go", argv...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", argv, err, b)
	}
	return nil
}

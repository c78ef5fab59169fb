//go:build !linux

package chaos

import (
	"errors"
	"os"
	"os/exec"
)

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: the harness still reaps every process it started on a normal exit.
func setParentDeathSignal(*exec.Cmd) {}

// pauseProcess is not supported here: the pause episode needs Linux.
func pauseProcess(*os.Process, bool) error {
	return errors.New("pausing a process (SIGSTOP) is supported on Linux only")
}

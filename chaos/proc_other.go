//go:build !linux

package chaos

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: the harness still reaps every process it started on a normal exit.
func setParentDeathSignal(*exec.Cmd) {}

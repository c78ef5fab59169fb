package chaos

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the child if this process dies
// (even by kill -9), so no region process outlives the harness.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

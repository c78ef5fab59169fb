package chaos

import (
	"os"
	"os/exec"
	"syscall"
)

// setParentDeathSignal has the kernel kill the child if this process dies
// (even by kill -9), so no region process outlives the harness.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pauseProcess stops a process (SIGSTOP) or lets it go on (SIGCONT).
func pauseProcess(p *os.Process, pause bool) error {
	if pause {
		return p.Signal(syscall.SIGSTOP)
	}
	return p.Signal(syscall.SIGCONT)
}

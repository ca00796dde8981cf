//go:build unix

package location

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel starts cmd in a process group of its own, which its context's
// cancellation kills whole.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

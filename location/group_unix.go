//go:build unix

package location

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel starts cmd in a process group of its own, which its context's
// cancellation kills whole. Where the kernel can (Linux), cmd is also killed when
// the host dies, by any signal: a go command left running for a host SIGKILLed
// mid-build would go on starting every compile and link step of the build.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithHost(cmd.SysProcAttr)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

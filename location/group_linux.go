package location

import "syscall"

// dieWithHost has the kernel kill the process when the host dies (its parent
// death signal). The signal follows the death of the thread that started the
// process, which the Go runtime ends only for a goroutine that locked it and
// returned without unlocking; no such goroutine starts processes here.
func dieWithHost(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

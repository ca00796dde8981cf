//go:build unix && !linux

package location

import "syscall"

// dieWithHost does nothing where the kernel has no parent death signal.
func dieWithHost(*syscall.SysProcAttr) {}

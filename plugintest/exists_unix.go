//go:build unix

package plugintest

import (
	"fmt"
	"syscall"
)

// exists reports a process with id pid, or one in the process group it led, as an
// error; nil means both are gone.
func exists(pid int) error {
	// EPERM would be a process of another user that reused the id: not ours.
	if err := syscall.Kill(pid, 0); err == nil {
		return fmt.Errorf("plugin process %d still exists", pid)
	}
	if err := syscall.Kill(-pid, 0); err == nil {
		return fmt.Errorf("a process in plugin process group %d still exists", pid)
	}
	return nil
}

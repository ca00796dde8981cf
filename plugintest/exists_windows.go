//go:build windows

package plugintest

import (
	"fmt"

	"golang.org/x/sys/windows"
)

// exists reports a running process with id pid as an error; nil means it is gone.
// (Its descendants are in its Job Object, which ends them with it.)
func exists(pid int) error {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return nil
	}
	defer windows.CloseHandle(h)
	if ev, err := windows.WaitForSingleObject(h, 0); err == nil && ev == uint32(windows.WAIT_TIMEOUT) {
		return fmt.Errorf("plugin process %d still exists", pid)
	}
	return nil
}

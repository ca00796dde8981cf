//go:build windows

package location

import "os/exec"

// killGroupOnCancel leaves cmd as it is: its context's cancellation kills the
// process (the go command's own children end with it).
func killGroupOnCancel(*exec.Cmd) {}

//go:build linux

package location_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
)

// ppid returns the parent of pid, or 0.
func ppid(pid int) int {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	n, _ := strconv.Atoi(f[1])
	return n
}

// TestHostKilledDuringABuildLeavesNoGoCommand: a host SIGKILLed while it builds a
// plugin (its go command held in a step that never ends, through -toolexec) takes
// its go command with it, which would otherwise run on, and start every compile
// and link step left, for a host that is gone.
func TestHostKilledDuringABuildLeavesNoGoCommand(t *testing.T) {
	marker := proctest.NewMarker()
	script := filepath.Join(t.TempDir(), "stall")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCATION_HELPER=build", "LOCATION_BUILD_CACHE="+t.TempDir(), "LOCATION_SOURCE="+echoSource,
		"GOFLAGS=-toolexec="+script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stalled := proctest.WaitMarked(t, marker, 1)
	defer func() {
		for _, pid := range proctest.Marked(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	goCmd := ppid(stalled[0])
	if ppid(goCmd) != cmd.Process.Pid {
		t.Fatalf("the stalled step %d is not the host's go command's (%d, whose parent is %d):\n%s", stalled[0], goCmd, ppid(goCmd), out.String())
	}
	cmd.Process.Kill()
	cmd.Wait()
	proctest.Until(t, func() bool { return !proctest.Running(goCmd) })
}

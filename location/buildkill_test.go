//go:build linux

package location_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
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
// and link step left, for a host that is gone; the next build in the cache
// removes the temporary directory it left.
func TestHostKilledDuringABuildLeavesNoGoCommand(t *testing.T) {
	marker := proctest.NewMarker()
	script := filepath.Join(t.TempDir(), "stall")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCATION_HELPER=build", "LOCATION_BUILD_CACHE="+cache, "LOCATION_SOURCE="+echoSource,
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

	// Its temporary directory is in the cache under the key of its GOFLAGS, which
	// no build here has: the next build of another key removes it.
	temps, _ := filepath.Glob(filepath.Join(cache, "*", ".*.build.tmp"))
	if len(temps) != 1 {
		t.Fatalf("the killed build left %v; want its temporary directory", temps)
	}
	if _, _, err := location.BuildPlugin(t.Context(), cache, "echo", echoSource); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "*", ".*.build.tmp")); len(left) != 0 {
		t.Errorf("after the next build the cache holds %v", left)
	}
}

// TestHostKilledDuringAModuleBuildLeavesNoScratch: a host SIGKILLed while it builds
// a module plugin (its go install held by a -toolexec step) leaves its scratch
// module in the build cache; the next build there removes it, and leaves none of
// its own.
func TestHostKilledDuringAModuleBuildLeavesNoScratch(t *testing.T) {
	_, goEnv := offlineProxy(t, "v1.0.0")
	dir := workspace(t, obj{"plugins": []obj{{"name": "greet", "module": greetPackage, "version": "v1", "allow": true}}})
	cfg, err := location.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	lock, _, err := location.LockModules(t.Context(), dir, cfg, location.LockOptions{Env: goEnv})
	if err != nil {
		t.Fatal(err)
	}
	lm, _ := json.Marshal(lock.Plugins["greet"])
	cache := t.TempDir()

	marker := proctest.NewMarker()
	script := filepath.Join(t.TempDir(), "stall")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(slices.Clone(goEnv), "LOCATION_HELPER=buildmodule", "LOCATION_BUILD_CACHE="+cache, "LOCATION_LOCKED="+string(lm),
		"GOFLAGS=-toolexec="+script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, pid := range proctest.Marked(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	proctest.WaitMarked(t, marker, 1)
	cmd.Process.Kill()
	cmd.Wait()
	scratch, _ := filepath.Glob(filepath.Join(cache, ".toolhost-module-*"))
	if len(scratch) == 0 {
		t.Fatalf("the killed build left no scratch module in %s; the test does not kill it mid-build:\n%s", cache, out.String())
	}
	t.Logf("the killed host left %v", scratch)

	if _, _, err := location.BuildModule(t.Context(), goEnv, cache, "greet", lock.Plugins["greet"]); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, ".toolhost-module-*")); len(left) != 0 {
		t.Errorf("after the next build the cache holds %v", left)
	}
}

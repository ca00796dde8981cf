//go:build unix

package cli_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/proctest"
)

// host is a toolhost command running in a process of its own.
type host struct {
	cmd    *exec.Cmd
	socket string
	stderr *bytes.Buffer
	done   chan struct{} // closed once cmd.Wait returned
	err    error         // cmd.Wait's, once done
}

// startHost runs `toolhost serve --socket S args...` in a process of its own and
// returns once it printed its serving line. The test's cleanup kills it if it is
// still running.
func startHost(t *testing.T, args ...string) *host {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	h := &host{socket: filepath.Join(sockDir, "s.sock"), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	h.cmd = exec.Command(os.Args[0], append([]string{"serve", "--socket", h.socket, "--verbose"}, args...)...)
	h.cmd.Env = append(os.Environ(), mainEnv+"=1")
	h.cmd.Stderr = h.stderr
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		h.err = h.cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		h.cmd.Process.Kill()
		<-h.done
	})
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "serving on ") {
		<-h.done
		t.Fatalf("serve said %q and exited: %v\n%s", line, h.err, h.stderr)
	}
	return h
}

// processesOf returns the live processes, anywhere on the machine, running
// binary (directly or under a sandbox launcher).
func processesOf(binary string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !proctest.Running(pid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(cmdline), "\x00")
		if argv[0] == binary || argv[0] == "toolhost-sandbox" && len(argv) > 1 && argv[1] == binary {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestServeShutdownWithAStuckPlugin: a serve whose plugin ignores SIGTERM and
// never ends its call stops on one SIGTERM, within its bound, with no plugin
// process left; a second SIGTERM during that shutdown ends it at once (by the
// signal), also with no plugin process left.
func TestServeShutdownWithAStuckPlugin(t *testing.T) {
	// Those of earlier tests end first, so that none is counted as this test's.
	proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
	for _, signals := range []int{1, 2} {
		t.Run(fmt.Sprintf("Signals%d", signals), func(t *testing.T) {
			dir := workspace(t, fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "trusted": true}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, pluginBin))
			h := startHost(t, "--location", dir)
			marker := filepath.Join(t.TempDir(), "stuck")
			called := make(chan result, 1)
			go func() {
				called <- runRemote(t, "call", "--socket", h.socket, "stuck", fmt.Sprintf(`{"marker": %q}`, marker))
			}()
			proctest.Until(t, func() bool { _, err := os.Stat(marker); return err == nil })

			start := time.Now()
			h.cmd.Process.Signal(syscall.SIGTERM)
			if signals == 2 {
				// The first signal is being handled once the socket is gone.
				proctest.Until(t, func() bool { _, err := os.Stat(h.socket); return errors.Is(err, os.ErrNotExist) })
				h.cmd.Process.Signal(syscall.SIGTERM)
			}
			<-h.done
			took := time.Since(start)
			<-called
			var exit *exec.ExitError
			if !errors.As(h.err, &exit) && h.err != nil {
				t.Fatal(h.err)
			}
			ws, _ := h.cmd.ProcessState.Sys().(syscall.WaitStatus)
			t.Logf("%d SIGTERM: serve ended in %v (%v)\n%s", signals, took, h.cmd.ProcessState, lastLines(h.stderr.String(), 6))
			if signals == 2 && !(ws.Signaled() && ws.Signal() == syscall.SIGTERM) {
				t.Errorf("after a second SIGTERM serve ended with %v, want killed by it", h.cmd.ProcessState)
			}
			proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
		})
	}
}

// TestServeReloadWithAStuckPlugin: a config edit that changes a plugin whose call
// is stuck (it ignores SIGTERM and its cancellation) is applied: the next
// generation serves, the stuck one is killed once its stop grace is out and its
// call ends, and serve still stops on one SIGTERM.
func TestServeReloadWithAStuckPlugin(t *testing.T) {
	config := func(env string) string {
		return fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "trusted": true, "env": {"GEN": %q}}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, pluginBin, env)
	}
	proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
	dir := workspace(t, config("1"))
	h := startHost(t, "--location", dir)
	marker := filepath.Join(t.TempDir(), "stuck")
	called := make(chan result, 1)
	go func() {
		called <- runRemote(t, "call", "--socket", h.socket, "stuck", fmt.Sprintf(`{"marker": %q}`, marker))
	}()
	proctest.Until(t, func() bool { _, err := os.Stat(marker); return err == nil })
	old := processesOf(pluginBin)

	file := filepath.Join(dir, ".toolhost", "config.json")
	if err := os.WriteFile(file+".tmp", []byte(config("2")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	proctest.Until(t, func() bool {
		now := processesOf(pluginBin)
		return len(now) > 0 && !slices.ContainsFunc(now, func(pid int) bool { return slices.Contains(old, pid) })
	})
	r := <-called
	t.Logf("the stuck call ended with %d: %s", r.code, strings.TrimSpace(r.stderr))
	if r := runRemote(t, "call", "--socket", h.socket, "echo", `{"text": "after"}`); r.code != 0 || r.stdout != "echo: after\n" {
		t.Errorf("echo after the reload: %d %q %s", r.code, r.stdout, r.stderr)
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	<-h.done
	if h.err != nil {
		t.Errorf("serve ended with %v\n%s", h.err, lastLines(h.stderr.String(), 10))
	}
	proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestServeShutdownWithAStuckManifestTool: a manifest tool's command that ignores
// SIGTERM and SIGINT and never ends does not hold serve's shutdown: one SIGTERM
// stops serve, and the command is gone.
func TestServeShutdownWithAStuckManifestTool(t *testing.T) {
	marker := proctest.NewMarker()
	dir := workspace(t, fmt.Sprintf(`{"tools": [{"name": "hang", "description": "Hangs.", "command": ["/bin/sh", "-c", "trap '' TERM INT; exec sleep %s"]}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, marker))
	h := startHost(t, "--location", dir)
	called := make(chan result, 1)
	go func() { called <- runRemote(t, "call", "--socket", h.socket, "hang") }()
	proctest.Until(t, func() bool { return len(proctest.Marked(marker)) > 0 })
	start := time.Now()
	h.cmd.Process.Signal(syscall.SIGTERM)
	<-h.done
	t.Logf("serve ended in %v (%v)", time.Since(start), h.cmd.ProcessState)
	<-called
	if h.err != nil {
		t.Errorf("serve ended with %v\n%s", h.err, lastLines(h.stderr.String(), 10))
	}
	proctest.Until(t, func() bool { return len(proctest.Marked(marker)) == 0 })
}

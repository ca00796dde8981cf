//go:build unix

package cli_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
)

// TestServeOutlivesItsReaders: `toolhost serve --verbose 2>&1 | head -1`: once the
// reader of its stdout and stderr has gone, serve keeps serving (its logs are
// dropped) rather than dying of SIGPIPE with its socket left behind, and still shuts
// down cleanly on SIGTERM, its plugin gone and its socket removed.
func TestServeOutlivesItsReaders(t *testing.T) {
	proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
	dir := workspace(t, fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "trusted": true}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, pluginBin))
	socket := filepath.Join(shortTempDir(t), "s.sock")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "serve", "--socket", socket, "--verbose", "--location", dir)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	cmd.Stdout, cmd.Stderr = w, w // 2>&1
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	// head -1 reads up to the serving line (the logs before it included) and goes.
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("serve exited before its serving line: %v", <-done)
		}
		if strings.HasPrefix(line, "serving on ") {
			break
		}
	}
	r.Close()

	// Each call logs (--verbose) to the gone reader; serve answers them all.
	for i := range 3 {
		if res := runRemote(t, "call", "--socket", socket, "echo", fmt.Sprintf(`{"text": "%d"}`, i)); res.code != 0 || res.stdout != fmt.Sprintf("echo: %d\n", i) {
			t.Fatalf("call %d after the reader went: %d %q %s", i, res.code, res.stdout, res.stderr)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-done; err != nil {
		t.Errorf("serve ended with %v, want status 0", err)
	}
	done <- nil // for the cleanup
	if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve left its socket behind: %v", err)
	}
	proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
}

// TestServeShutdownSignals: SIGINT, SIGTERM and SIGHUP each shut serve down
// cleanly (status 0, socket removed, plugin gone); SIGQUIT keeps Go's goroutine
// dump (status 2), and its plugin dies with it all the same.
func TestServeShutdownSignals(t *testing.T) {
	proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(strings.ToUpper(sig.String()[:1])+sig.String()[1:], func(t *testing.T) {
			dir := workspace(t, fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "trusted": true}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, pluginBin))
			h := startHost(t, "--location", dir)
			proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 1 })
			h.cmd.Process.Signal(sig)
			<-h.done
			if sig == syscall.SIGQUIT {
				if code := h.cmd.ProcessState.ExitCode(); code != 2 {
					t.Errorf("after SIGQUIT serve ended with %v, want Go's status 2", h.cmd.ProcessState)
				}
			} else {
				if h.err != nil {
					t.Errorf("after %v serve ended with %v, want status 0\n%s", sig, h.err, lastLines(h.stderr.String(), 6))
				}
				if _, err := os.Stat(h.socket); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("after %v serve left its socket behind: %v", sig, err)
				}
			}
			proctest.Until(t, func() bool { return len(processesOf(pluginBin)) == 0 })
		})
	}
}

// shortTempDir is a temporary directory whose path leaves room for a socket name
// (t.TempDir's can be longer than a unix socket path may be).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

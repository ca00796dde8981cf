package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/internal/proctest"
)

// serveInProcess runs `toolhost serve` on a fresh socket with args until the test
// ends, and returns the address from its first stdout line.
func serveInProcess(t *testing.T, args ...string) string {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(sockDir, "s.sock")
	ctx, cancel := context.WithCancel(context.Background())
	serving := make(chan string, 1)
	stdout := &lineWriter{prefix: "", line: serving}
	stderr := &watchWriter{}
	code := make(chan int, 1)
	go func() {
		code <- cli.Run(ctx, append([]string{"serve", "--socket", socket}, args...), strings.NewReader(""), stdout, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if got := <-code; got != cli.ExitOK {
			t.Errorf("serve exited with %d:\n%s", got, stderr.String())
		}
		os.RemoveAll(sockDir)
		if pids := proctest.Children(pluginBin); len(pids) != 0 {
			t.Errorf("plugin processes left: %v", pids)
		}
	})
	select {
	case first := <-serving:
		addr, ok := strings.CutPrefix(first, "serving on ")
		if !ok || addr != "unix://"+socket {
			t.Fatalf("first stdout line %q, want \"serving on unix://%s\"", first, socket)
		}
		return addr
	case c := <-code:
		t.Fatalf("serve exited with %d:\n%s", c, stderr.String())
	}
	return ""
}

// runRemote runs a command against a running server (no check for plugin
// processes: the server owns them).
func runRemote(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := cli.Run(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestRemote(t *testing.T) {
	addr := serveInProcess(t)
	socket := strings.TrimPrefix(addr, "unix://")
	dir := workspace(t, "")

	t.Run("NoLocationActive", func(t *testing.T) {
		r := runRemote(t, "tools", "--socket", socket)
		r.want(t, cli.ExitFailure)
		if !strings.Contains(r.stderr, "no Location is active") || !strings.Contains(r.stderr, "--location") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
	})
	t.Run("ToolsActivates", func(t *testing.T) {
		r := runRemote(t, "tools", "--socket", socket, "--location", dir)
		r.want(t, cli.ExitOK)
		for _, name := range allTools {
			if !strings.Contains(r.stdout, name) {
				t.Errorf("tools does not list %s:\n%s", name, r.stdout)
			}
		}
	})
	t.Run("ToolsJSONTitleAnnotations", func(t *testing.T) {
		r := runRemote(t, "tools", "--socket", socket, "--location", dir, "--json")
		r.want(t, cli.ExitOK)
		if !strings.Contains(r.stdout, `"title": "Echo"`) || !strings.Contains(r.stdout, `"readOnlyHint": true`) || !strings.Contains(r.stdout, `"openWorldHint": false`) {
			t.Errorf("tools --json over the socket drops echo's title or annotations:\n%s", r.stdout)
		}
	})
	t.Run("CallTheOnlyLocation", func(t *testing.T) {
		r := runRemote(t, "call", "--socket", socket, "echo", `{"text": "remote"}`)
		r.want(t, cli.ExitOK)
		if r.stdout != "echo: remote\n" {
			t.Errorf("stdout %q", r.stdout)
		}
	})
	t.Run("Progress", func(t *testing.T) {
		r := runRemote(t, "call", "--socket", addr, "--location", dir, "progress")
		r.want(t, cli.ExitOK)
		if !strings.Contains(r.stderr, "progress: 1/3") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
	})
	t.Run("ToolFailure", func(t *testing.T) {
		runRemote(t, "call", "--socket", socket, "--location", dir, "fail").want(t, cli.ExitToolError)
	})
	t.Run("AskWithNobodyToAnswer", func(t *testing.T) {
		asks := workspace(t, fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}, {"action": "echo", "resource": "*", "effect": "ask"}]}`, pluginBin))
		r := runRemote(t, "call", "--socket", socket, "--location", asks, "--json", "echo", `{"text": "x"}`)
		r.want(t, cli.ExitToolError)
		if !strings.Contains(r.stdout, "permission denied") || strings.Contains(r.stdout, "config") {
			t.Errorf("the model-visible deny:\n%s", r.stdout)
		}
		if !strings.Contains(r.stderr, "config.json") {
			t.Errorf("stderr does not say how to allow it:\n%s", r.stderr)
		}
		t.Run("TwoLocationsNeedAChoice", func(t *testing.T) {
			r := runRemote(t, "call", "--socket", socket, "echo")
			r.want(t, cli.ExitFailure)
			if !strings.Contains(r.stderr, "2 Locations are active") {
				t.Errorf("stderr:\n%s", r.stderr)
			}
		})
	})
	t.Run("ActivationFails", func(t *testing.T) {
		bad := workspace(t, `{"plugins": [{"name": "x"}]}`)
		r := runRemote(t, "tools", "--socket", socket, "--location", bad)
		r.want(t, cli.ExitFailure)
		if !strings.Contains(r.stderr, "/plugins/0") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
	})
	t.Run("NoServer", func(t *testing.T) {
		r := runRemote(t, "call", "--socket", filepath.Join(t.TempDir(), "none.sock"), "echo")
		r.want(t, cli.ExitFailure)
		if !strings.Contains(r.stderr, "no toolhost serve or dev answers") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
	})
	t.Run("Usage", func(t *testing.T) {
		r := runRemote(t, "call", "--token-file", "t", "--location", dir, "echo")
		r.want(t, cli.ExitUsage)
	})
}

//go:build unix

package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/server"
)

// degradedWorkspace is a Location with one healthy plugin, one healthy MCP server
// (the fixture from mcp/testdata/node), one MCP server that exits at start (a script
// the test can rewrite), one that never initializes, and one manifest tool whose
// command cannot be found (bare bash with no PATH).
func degradedWorkspace(t *testing.T) (dir, boomScript, fixture string) {
	t.Helper()
	node, err := exec.LookPath("node")
	nodeDir, _ := filepath.Abs("../mcp/testdata/node")
	if err != nil || !exists(filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol")) {
		if os.Getenv("CI") != "" {
			t.Fatal("node or mcp/testdata/node/node_modules missing (run make test-deps)")
		}
		t.Skip("node or mcp/testdata/node/node_modules missing; run make test-deps")
	}
	fixture = filepath.Join(nodeDir, "fixture.mjs")
	dir, err = location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	boomScript = filepath.Join(dir, "boom.sh")
	if err := os.WriteFile(boomScript, []byte("echo boom: missing API key >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Dir(node) + ":/usr/bin:/bin"
	cfg := map[string]any{
		"plugins": []any{map[string]any{"name": "test", "path": pluginBin, "stop_grace": "2s", "start_timeout": "10s"}},
		"mcp_servers": []any{
			map[string]any{"name": "fix", "command": "node", "args": []string{fixture}, "env": map[string]string{"PATH": path}},
			map[string]any{"name": "boom", "command": "sh", "args": []string{boomScript}, "env": map[string]string{"PATH": path}},
			map[string]any{"name": "mute", "command": "sleep", "args": []string{"600"}, "env": map[string]string{"PATH": path}, "start_timeout": "2s"},
		},
		"tools":      []any{map[string]any{"name": "shout", "description": "Shouts.", "command": []string{"bash", "-c", "tr a-z A-Z"}}},
		"permission": []any{map[string]any{"action": "*", "resource": "*", "effect": "allow"}},
	}
	data, _ := json.Marshal(cfg)
	if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, location.ConfigPath), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, boomScript, fixture
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func sourceByID(srcs []client.Source, id string) client.Source {
	for _, s := range srcs {
		if s.ID == id {
			return s
		}
	}
	return client.Source{}
}

func settleOK(t *testing.T, c *client.Client, reqID, callID, name, input string) *registry.Settlement {
	t.Helper()
	s, err := c.Settle(t.Context(), reqID, client.Call{Name: name, Input: json.RawMessage(input), Invocation: inv(t, callID)}, nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

func TestDegradedLocation(t *testing.T) {
	dir, boomScript, fixture := degradedWorkspace(t)
	f := start(t, nil)
	c := f.dial(t)

	begin := time.Now()
	loc, _, err := c.ActivateLocation(t.Context(), dir)
	if err != nil {
		t.Fatalf("activation failed; the Location must degrade: %v", err)
	}
	// Bounded by the slowest first attempt: mute's 2s start timeout.
	if took := time.Since(begin); took > 2*time.Second+10*time.Second {
		t.Errorf("activation took %s", took)
	}
	watch, err := c.WatchSources(t.Context(), loc.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	first, err := watch.Next()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("HealthyToolsServe", func(t *testing.T) {
		req, err := c.PrepareRequest(t.Context(), loc.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range req.Definitions {
			names = append(names, d.Name)
		}
		for _, want := range []string{"echo", "fix_echo", "read"} {
			if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
				t.Errorf("%s not advertised: %v", want, names)
			}
		}
		if strings.Contains(strings.Join(names, " "), "shout") {
			t.Errorf("the manifest tool with a missing command is advertised: %v", names)
		}
		if s := settleOK(t, c, req.ID, "c1", "echo", `{"text":"hi"}`); s.Text() != "hi" {
			t.Errorf("echo: %s %q", s.Outcome, s.Text())
		}
		if s := settleOK(t, c, req.ID, "c2", "fix_echo", `{"message":"hi"}`); s.Text() != "echo: hi" {
			t.Errorf("fix_echo: %s %q", s.Outcome, s.Text())
		}
	})

	t.Run("FailuresAreReportedWithTheirReasons", func(t *testing.T) {
		srcs := first
		for _, id := range []string{"builtin", "plugin:test", "mcp:fix"} {
			if s := sourceByID(srcs, id); s.State != "running" {
				t.Errorf("%s: %+v, want running", id, s)
			}
		}
		if s := sourceByID(srcs, "plugin:test"); s.PID == 0 || s.Generation != 1 || s.Containment == "" {
			t.Errorf("plugin:test: %+v, want a pid, generation 1 and its containment", s)
		}
		if s := sourceByID(srcs, "plugin:test"); !slices.Contains(s.Layers, "fds") || len(s.Layers) < 3 {
			t.Errorf("plugin:test: layers %q, want what holds its process (its descriptors, its CPU share, ...)", s.Layers)
		}
		boom := sourceByID(srcs, "mcp:boom")
		if boom.State != "restarting" && boom.State != "failed" || !strings.Contains(boom.StderrTail+boom.Error, "boom: missing API key") {
			t.Errorf("mcp:boom: %+v, want it retried with its stderr", boom)
		}
		mute := sourceByID(srcs, "mcp:mute")
		if mute.State != "restarting" || !strings.Contains(mute.Error, "start timeout (2s)") {
			t.Errorf("mcp:mute: %+v, want it retried after missing its start timeout", mute)
		}
		shout := sourceByID(srcs, "manifest:shout")
		if shout.State != "failed" || !strings.Contains(shout.Error, "no PATH") {
			t.Errorf("manifest:shout: %+v, want failed: bare bash without PATH", shout)
		}
	})

	t.Run("BudgetExhaustionIsVisible", func(t *testing.T) {
		for sourceByID(first, "mcp:boom").State != "failed" {
			srcs, err := watch.Next()
			if err != nil {
				t.Fatalf("mcp:boom never reported failed through WatchSources: %v", err)
			}
			if s := sourceByID(srcs, "mcp:boom"); s.ID != "" {
				first = []client.Source{s}
			}
		}
		if boom := sourceByID(first, "mcp:boom"); !strings.Contains(boom.Error, "not restarting") || boom.Restarts == 0 {
			t.Errorf("failed boom: %+v", boom)
		}
		var stdout, stderr bytes.Buffer
		code := cli.Run(t.Context(), []string{"status", "--socket", f.socket}, strings.NewReader(""), &stdout, &stderr)
		if code != cli.ExitPartial || !strings.Contains(stdout.String(), "mcp:boom") || !strings.Contains(stdout.String(), "failed") ||
			!strings.Contains(stdout.String(), "not restarting") {
			t.Errorf("toolhost status exited %d:\n%s%s", code, stdout.String(), stderr.String())
		}
		// The layers that hold each process, in the text and in --json.
		if !strings.Contains(stdout.String(), "plugin:test layers: ") || !strings.Contains(stdout.String(), "; fds;") {
			t.Errorf("toolhost status names no layers of plugin:test:\n%s", stdout.String())
		}
		stdout.Reset()
		cli.Run(t.Context(), []string{"status", "--socket", f.socket, "--json"}, strings.NewReader(""), &stdout, &stderr)
		var locs []struct{ Sources []client.Source }
		if err := json.Unmarshal(stdout.Bytes(), &locs); err != nil || len(locs) != 1 || !slices.Contains(sourceByID(locs[0].Sources, "plugin:test").Layers, "fds") {
			t.Errorf("toolhost status --json (%v) gives no layers of plugin:test:\n%s", err, stdout.String())
		}
	})

	t.Run("RestartAfterFixingBringsToolsBackWithoutDisturbingCallsInFlight", func(t *testing.T) {
		req, err := c.PrepareRequest(t.Context(), loc.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		inFlight := make(chan *registry.Settlement, 1)
		go func() {
			s, _ := c.Settle(t.Context(), req.ID, client.Call{Name: "nap", Input: json.RawMessage(`{"n":1500}`), Invocation: inv(t, "nap")}, nil)
			inFlight <- s
		}()
		script := fmt.Sprintf("exec node %q\n", fixture)
		if err := os.WriteFile(boomScript, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := cli.Run(t.Context(), []string{"restart", "--socket", f.socket, "--location", dir, "boom"}, strings.NewReader(""), &stdout, &stderr)
		if code != cli.ExitOK || !strings.Contains(stdout.String(), "running") {
			t.Fatalf("toolhost restart exited %d:\n%s%s", code, stdout.String(), stderr.String())
		}
		req2, err := c.PrepareRequest(t.Context(), loc.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if s := settleOK(t, c, req2.ID, "b1", "boom_echo", `{"message":"back"}`); s.Text() != "echo: back" {
			t.Errorf("boom_echo after the restart: %s %q", s.Outcome, s.Text())
		}
		if s := <-inFlight; s == nil || s.Text() != "rested" {
			t.Errorf("the call in flight on the plugin was disturbed: %+v", s)
		}
		if _, err := c.RestartSource(t.Context(), loc.ID, "nonesuch"); err == nil {
			t.Error("restarting an unknown source succeeded")
		}
	})

	t.Run("ACallDuringAPluginRestartWaitsAndSucceeds", func(t *testing.T) {
		req, err := c.PrepareRequest(t.Context(), loc.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Settle(t.Context(), req.ID, client.Call{Name: "crash", Input: json.RawMessage(`{}`), Invocation: inv(t, "crash")}, nil); err == nil {
			t.Fatal("the crashing call settled; want an operational error")
		}
		// The Request captured generation 1, which is gone: the call waits for
		// generation 2 (same contract) and runs there.
		s := settleOK(t, c, req.ID, "after", "echo", `{"text":"again"}`)
		if s.Text() != "again" {
			t.Fatalf("echo during the restart: %s %q", s.Outcome, s.Text())
		}
		// The call ran as soon as generation 2 registered its tools, which is
		// before its supervisor reports it: wait for the report.
		proctest.Until(t, func() bool {
			srcs, err := c.ListSources(t.Context(), loc.ID)
			if err != nil {
				t.Fatal(err)
			}
			p := sourceByID(srcs, "plugin:test")
			return p.Generation >= 2 && p.Restarts >= 1
		})
	})

	if err := c.DeactivateLocation(t.Context(), loc.ID); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := watch.Next(); err != nil {
			break // the watch ends with the Location
		}
	}
}

// TestConfigEventOverWatchSources: with the config watched, an invalid edit shows
// in WatchSources as the "config" entry, failed, naming the file and pointer, while
// the Location keeps serving; its fix removes the entry.
func TestConfigEventOverWatchSources(t *testing.T) {
	f := start(t, func(o *server.Options) { o.Location.WatchConfig = true })
	c := f.dial(t)
	dir, err := location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write := func(cfg string) {
		t.Helper()
		os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755)
		tmp := filepath.Join(dir, ".toolhost", ".tmp")
		if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, location.ConfigPath)); err != nil {
			t.Fatal(err)
		}
	}
	good := fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, pluginBin)
	write(good)
	loc, _, err := c.ActivateLocation(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := c.WatchSources(t.Context(), loc.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	if _, err := watch.Next(); err != nil {
		t.Fatal(err)
	}
	until := func(what string, cond func([]client.Source) bool) []client.Source {
		t.Helper()
		for {
			srcs, err := watch.Next()
			if err != nil {
				t.Fatalf("waiting until %s: %v", what, err)
			}
			if cond(srcs) {
				return srcs
			}
		}
	}
	write(`{"plugins": [{"name": "test", "path": 7}]}`)
	srcs := until("the config entry appears", func(s []client.Source) bool { return sourceByID(s, "config").ID != "" })
	cfgEntry := sourceByID(srcs, "config")
	if cfgEntry.Kind != "config" || cfgEntry.State != "failed" || !strings.Contains(cfgEntry.Error, filepath.Join(dir, location.ConfigPath)) || !strings.Contains(cfgEntry.Error, "/plugins/0/path") {
		t.Errorf("config entry %+v", cfgEntry)
	}
	if st := sourceByID(srcs, "plugin:test"); st.ID != "" {
		t.Errorf("an invalid edit changed the plugin: %+v", st)
	}
	write(good)
	until("the config entry is sent stopped", func(s []client.Source) bool { return sourceByID(s, "config").State == "stopped" })
}

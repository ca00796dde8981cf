package cli_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/registry"
)

// TestToolsListsWhatTheRulesLeaveVisible: `toolhost tools` lists what the
// Location's permission rules leave visible, a deny naming a source hiding that
// source's tools only; --all lists every tool; both locally and through serve.
func TestToolsListsWhatTheRulesLeaveVisible(t *testing.T) {
	dir := workspace(t, fmt.Sprintf(`{
		"plugins": [{"name": "test", "path": %q}],
		"tools": [{"name": "shout", "description": "Echoes stdin.", "input_schema": {"type": "object"},
			"command": ["cat"], "env": {"PATH": "/usr/bin:/bin"}}],
		"permission": [
			{"action": "*", "resource": "*", "effect": "allow"},
			{"action": "*", "resource": "*", "effect": "deny", "source": "plugin:test"}
		]}`, pluginBin))
	visible := []string{"glob", "grep", "list", "read", "shout"}
	every := append(slices.Clone(allTools), "shout")
	slices.Sort(every)
	listed := func(t *testing.T, r result) []string {
		t.Helper()
		r.want(t, cli.ExitOK)
		var got struct {
			Tools []registry.Definition `json:"tools"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("decode %s: %v", r.stdout, err)
		}
		var names []string
		for _, d := range got.Tools {
			names = append(names, d.Name)
		}
		return names
	}

	t.Run("Local", func(t *testing.T) {
		if got := listed(t, run(t, "", "tools", "--json", "--location", dir)); !slices.Equal(got, visible) {
			t.Errorf("tools lists %q, want %q: the plugin's tools are denied by a rule naming it", got, visible)
		}
		if got := listed(t, run(t, "", "tools", "--json", "--all", "--location", dir)); !slices.Equal(got, every) {
			t.Errorf("tools --all lists %q, want %q", got, every)
		}
		r := run(t, "", "tools", "--location", dir)
		r.want(t, cli.ExitOK)
		if strings.Contains(r.stdout, "echo") || !strings.Contains(r.stdout, "shout") {
			t.Errorf("the table lists a denied tool, or not the allowed one:\n%s", r.stdout)
		}
	})
	t.Run("CallOfAHiddenToolIsDeniedWithAHint", func(t *testing.T) {
		r := run(t, "", "call", "--location", dir, "echo", `{"text": "x"}`)
		r.want(t, cli.ExitToolError)
		if !strings.Contains(r.stdout+r.stderr, "permission denied") || !strings.Contains(r.stderr, "config.json") {
			t.Errorf("want the denial and how to allow it:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	})
	t.Run("Remote", func(t *testing.T) {
		socket := strings.TrimPrefix(serveInProcess(t), "unix://")
		if got := listed(t, runRemote(t, "tools", "--json", "--socket", socket, "--location", dir)); !slices.Equal(got, visible) {
			t.Errorf("tools --socket lists %q, want %q", got, visible)
		}
		if got := listed(t, runRemote(t, "tools", "--json", "--all", "--socket", socket, "--location", dir)); !slices.Equal(got, every) {
			t.Errorf("tools --all --socket lists %q, want %q", got, every)
		}
	})
}

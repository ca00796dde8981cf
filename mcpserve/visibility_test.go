package mcpserve_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/location"
)

// TestListOffersWhatTheRulesLeaveVisible: tools/list lists what the Location's
// permission rules leave visible; a deny naming a source hides that source's tools
// only, and calling a hidden tool is an unknown tool.
func TestListOffersWhatTheRulesLeaveVisible(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	tool := func(name string) string {
		return `{"name": "` + name + `", "description": "Echoes stdin.", "input_schema": {"type": "object"}, "command": ["cat"], "env": {"PATH": "/usr/bin:/bin"}}`
	}
	config := `{"tools": [` + tool("shout") + `, ` + tool("whisper") + `], "permission": [
		{"action": "*", "resource": "*", "effect": "allow"},
		{"action": "*", "resource": "*", "effect": "deny", "source": "manifest:shout"},
		{"action": "grep", "resource": "*", "effect": "deny", "source": "builtin"}
	]}`
	if err := os.WriteFile(filepath.Join(dir, location.ConfigPath), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	f := start(t, dir)
	cs := f.connect(t, nil)
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"glob", "list", "read", "whisper"}; !slices.Equal(names, want) {
		t.Fatalf("tools/list = %q, want %q", names, want)
	}
	if res := call(t, cs, "shout", map[string]string{"a": "b"}); !res.IsError || !strings.Contains(text(res), "unknown tool") {
		t.Errorf("calling the hidden shout: isError %v, %q; want an unknown tool", res.IsError, text(res))
	}
	if res := call(t, cs, "whisper", map[string]string{"a": "b"}); res.IsError || !strings.Contains(text(res), `"a":"b"`) {
		t.Errorf("whisper: isError %v, %q", res.IsError, text(res))
	}
}

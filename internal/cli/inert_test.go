package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
)

var (
	spenderOnce sync.Once
	spenderBin  string
	spenderErr  error
)

// spenderWorkspace is a Location with the spender plugin (plugins/testdata/spender),
// whose descriptions, outputs, failures and dying words carry control sequences.
func spenderWorkspace(t *testing.T) string {
	t.Helper()
	spenderOnce.Do(func() {
		src, _ := filepath.Abs(filepath.Join("..", "..", "plugins", "testdata", "spender"))
		spenderBin, _, spenderErr = location.BuildPlugin(context.Background(), filepath.Join(filepath.Dir(outputDir), "build"), "spender", src)
	})
	if spenderErr != nil {
		t.Fatal(spenderErr)
	}
	t.Cleanup(func() {
		if pids := proctest.Children(spenderBin); len(pids) != 0 {
			t.Errorf("spender processes left running: %v", pids)
		}
	})
	return workspace(t, fmt.Sprintf(`{"plugins": [{"name": "spender", "path": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, spenderBin))
}

// live reports the first character of s a terminal would act on, if any.
func live(s string) (rune, bool) {
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			return r, true
		}
	}
	return 0, false
}

func wantInert(t *testing.T, what, s string, visible ...string) {
	t.Helper()
	if r, ok := live(s); ok {
		t.Errorf("%s reaches the terminal with %U:\n%q", what, r, s)
	}
	for _, v := range visible {
		if !strings.Contains(s, v) {
			t.Errorf("%s does not show %q:\n%s", what, v, s)
		}
	}
}

// What a tool source says reaches the terminal inert: its control sequences are
// shown, not obeyed, by tools and call; --json stays exact.
func TestSourceTextIsInertOnATerminal(t *testing.T) {
	dir := spenderWorkspace(t)
	evil := `\x1b]52;c;ZXZpbA==\x07\x1b]0;owned\x07\x1b[2J\x1b[1;1H\u009b31m\u202eevil`
	t.Run("ToolsTable", func(t *testing.T) {
		r := run(t, "", "tools", "--location", dir)
		r.want(t, 0)
		wantInert(t, "tools", r.stdout, "says "+evil)
		wantInert(t, "tools' stderr", r.stderr)
	})
	t.Run("ToolsJSONIsExact", func(t *testing.T) {
		r := run(t, "", "tools", "--location", dir, "--json")
		r.want(t, 0)
		var out struct {
			Tools []struct{ Name, Description string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatal(err)
		}
		const raw = "says \x1b]52;c;ZXZpbA==\x07\x1b]0;owned\x07\x1b[2J\x1b[1;1H\u009b31m\u202eevil\nsecond line"
		for _, tool := range out.Tools {
			if tool.Name == "ansi" && tool.Description != raw {
				t.Errorf("--json description %q, want exactly %q", tool.Description, raw)
			}
		}
	})
	t.Run("CallOutputKeepsItsLayout", func(t *testing.T) {
		r := run(t, "", "call", "--location", dir, "ansi")
		r.want(t, 0)
		wantInert(t, "call's output", r.stdout, "output "+evil+"\n\tindented line")
	})
	t.Run("CallFailure", func(t *testing.T) {
		r := run(t, "", "call", "--location", dir, "fail")
		r.want(t, 1)
		wantInert(t, "call's failure", r.stdout, "failure "+evil)
	})
	t.Run("CrashedPluginsStderrTail", func(t *testing.T) {
		r := run(t, "", "call", "--location", dir, "crash")
		r.want(t, 2)
		wantInert(t, "the crash", r.stderr, "dying words "+evil)
	})
	t.Run("CaseVariantOfTheBuiltinRead", func(t *testing.T) {
		r := run(t, "", "call", "--location", dir, "names", `{"names":["Read","READ"]}`)
		r.want(t, 0)
		if !strings.Contains(r.stdout, `differs only by letter case from \"read\", which belongs to builtin`) && !strings.Contains(r.stdout, `differs only by letter case from "read", which belongs to builtin`) {
			t.Errorf("Read and READ beside the built-in read: %s", r.stdout)
		}
	})
}

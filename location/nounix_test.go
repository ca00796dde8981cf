//go:build linux

package location_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/registry"
)

// TestConfinedSourcesWorkWithoutAWorld: without a world a confined program's
// seccomp filter refuses connect(2) and every socket but an AF_UNIX stream one.
// What confined sources need still works there: an untrusted plugin's calls, a
// trusted plugin confined by a sandbox block reading through the FileSystem
// service (its broker multiplexed over the host's one connection), and the pinned
// npm MCP server (node talks over pipes).
func TestConfinedSourcesWorkWithoutAWorld(t *testing.T) {
	t.Setenv(sandbox.OffEnv, "world")
	if !sandbox.RefusesConnect(sandbox.Spec{Contain: true, Confine: &sandbox.Confinement{}}) {
		t.Skip("no seccomp filter here")
	}
	bin := buildHostile(t)
	script, path := everythingServer(t)
	nodeDir, _ := filepath.Abs("../mcp/testdata/node")
	nodeDir, _ = filepath.EvalSymlinks(nodeDir)
	e := newEnv(t)
	e.opts.SocketDir = shortDir(t)
	dir := workspace(t, obj{
		"plugins": []obj{{"name": "hostile", "path": bin, "trusted": true, "sandbox": obj{}}, echoPlugin("echo")},
		"mcp_servers": []obj{{"name": "everything", "command": "sh", "args": []string{"-c", "exec node " + script},
			"env": obj{"PATH": path}, "sandbox": obj{"read": []string{nodeDir}}}},
		"permission": allowAll,
	})
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("secret of the Location"), 0o600)
	l := e.activate(t, dir)
	for _, p := range l.Plugins() {
		if mode, confined := p.Current().Containment(); !confined {
			t.Fatalf("plugin %s is not confined (%s)", p.Name(), mode)
		}
	}
	if mode, confined := l.MCPServers()[0].Current().Containment(); !confined {
		t.Fatalf("the MCP server is not confined (%s)", mode)
	}

	r := probe(t, l)
	if !r.ServicesGiven || r.ReadInside != "secret of the Location" {
		t.Errorf("the confined trusted plugin: services %v, read %q", r.ServicesGiven, r.ReadInside)
	}
	if out := callEcho(t, l, "still here"); out.Text != "still here" {
		t.Errorf("the untrusted plugin: %+v", out)
	}
	for _, c := range []struct{ name, input, want string }{
		{"everything_echo", `{"message":"hi"}`, "hi"},
		{"everything_get-sum", `{"a":2,"b":3}`, "5"},
	} {
		s, err := settleIn(t, l, c.name, c.input)
		if err != nil || s.Outcome != registry.Completed || !strings.Contains(s.Text()+string(s.Structured), c.want) {
			t.Errorf("the confined MCP server's %s: %v, %v", c.name, s, err)
		}
	}
}

package location_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/toolhost/toolhost/registry"
)

// TestHostileMCPServerIsHeldToItsAnswers: an MCP server that speaks before it is
// initialized (a log message, a response to no request, a list_changed, a request
// of its own), answers initialize with ids huge and made up and twice, lists tools
// twice for one request, and answers each call twice. The host takes only the first
// answer to each request it made: it lists the first tools, each call settles with
// its own first answer, never the second answer to an earlier call, and a
// well-behaved plugin keeps working beside it.
func TestHostileMCPServerIsHeldToItsAnswers(t *testing.T) {
	_, path := everythingServer(t)
	script, _ := filepath.Abs(filepath.Join("testdata", "mcp", "hostile.js"))
	e := newEnv(t)
	cfg := pluginsConfig(echoPlugin("echo"))
	cfg["mcp_servers"] = []obj{{"name": "hostile", "command": "node", "args": []string{script}, "env": obj{"PATH": path}}}
	l := e.activate(t, workspace(t, cfg))
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	var tools []string
	for _, d := range q.Definitions() {
		tools = append(tools, d.Name)
	}
	t.Log(tools)
	if !slices.Contains(tools, "hostile_ok") || slices.Contains(tools, "hostile_evil") {
		t.Errorf("tools %v: want the first listing's hostile_ok, not the second's hostile_evil", tools)
	}
	for i := range 3 {
		s, err := settleIn(t, l, "hostile_ok", `{}`)
		if err != nil || s.Outcome != registry.Completed || s.Text() != "done" {
			t.Errorf("call %d: %v, %v; want its first answer, done\n%s", i, s, err, e.logs)
		}
	}
	if out := callEcho(t, l, "still here"); out.Text != "still here" {
		t.Errorf("the well-behaved plugin: %+v", out)
	}
}

package location_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
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

// TestMCPServerAskLimitsComeFromTheConfig: a server entry's ask_burst and
// asks_per_minute hold for the running server: it asks six questions in a row,
// the person answers the burst's two, and the server hears why the rest were
// refused, naming the configured rate.
func TestMCPServerAskLimitsComeFromTheConfig(t *testing.T) {
	_, path := everythingServer(t)
	script, _ := filepath.Abs(filepath.Join("testdata", "mcp", "hostile.js"))
	e := newEnv(t)
	l := e.activate(t, workspace(t, obj{
		"mcp_servers": []obj{{"name": "hostile", "command": "node", "args": []string{script}, "env": obj{"PATH": path},
			"ask_burst": 2, "asks_per_minute": 1}},
		"permission": []obj{{"action": "*", "resource": "*", "effect": "allow", "source": "mcp:hostile"}},
	}))
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	p := &answerer{}
	start := time.Now()
	s, err := q.Settle(sdk.WithInteractor(t.Context(), p), registry.Call{Name: "hostile_ask", Input: json.RawMessage(`{"n":6}`),
		Invocation: sdk.Invocation{SessionID: "ses", ToolCallID: "call"}})
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("ask: %v %v\n%s", s, err, e.logs)
	}
	var r struct {
		Answered int
		Refused  []struct {
			Code    int
			Message string
		}
	}
	if err := json.Unmarshal([]byte(s.Text()), &r); err != nil {
		t.Fatalf("ask: %q: %v", s.Text(), err)
	}
	t.Logf("%+v", r)
	most := 2 + int(time.Since(start).Minutes()) // one token a minute
	if r.Answered < 2 || r.Answered > most || p.asked() != r.Answered || len(r.Refused) != 6-r.Answered {
		t.Errorf("%d answered (the person asked %d), %d refused; want the burst, 2, answered and the rest refused", r.Answered, p.asked(), len(r.Refused))
	}
	for _, e := range r.Refused {
		if e.Code != -32000 || !strings.Contains(e.Message, "ask_burst 2, asks_per_minute 1") {
			t.Errorf("refusal %+v: want code -32000 naming the configured limits", e)
		}
	}
}

// answerer answers every question with a name.
type answerer struct {
	mu sync.Mutex
	n  int
}

func (a *answerer) Ask(context.Context, sdk.Question) (sdk.Answer, error) {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	return sdk.Answer{Action: sdk.Accepted, Content: []byte(`{"name":"Ada"}`)}, nil
}

func (a *answerer) Sample(context.Context, sdk.SampleRequest) (sdk.SampleResult, error) {
	return sdk.SampleResult{}, &sdk.UnansweredError{Op: "sample", Reason: "this test answers questions only"}
}

func (a *answerer) asked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

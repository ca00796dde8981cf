package mcpserve_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/mcpserve"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// buildCache is shared by every test, so the probe plugin is built once.
var buildCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcpserve-build-")
	if err != nil {
		panic(err)
	}
	buildCache = dir
	code := func() int {
		defer os.RemoveAll(dir)
		return runWithLeakCheck(m)
	}()
	os.Exit(code)
}

func runWithLeakCheck(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			return 1
		}
	}
	return code
}

// fixture is a Server over activated Locations, with a captured log.
type fixture struct {
	srv  *mcpserve.Server
	reg  *registry.Registry
	locs []*location.Location
	logs *logCapture
}

// logCapture collects the Locations' log messages.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCapture) Accept(name string, level hclog.Level, msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
}

func (l *logCapture) has(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.msgs, msg)
}

// start serves the Locations at dirs: under testdata, or absolute paths.
func start(t testing.TB, dirs ...string) *fixture {
	t.Helper()
	return startWith(t, mcpserve.Options{}, dirs...)
}

// startWith is start with the Server's Options (its Registry, Logger and
// ChangeDelay are the fixture's).
func startWith(t testing.TB, opts mcpserve.Options, dirs ...string) *fixture {
	t.Helper()
	reg := hosttest.Registry(t, registry.Options{})
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "test", Output: io.Discard, Level: hclog.Debug})
	opts.Registry, opts.Logger, opts.ChangeDelay = reg, logger, 20*time.Millisecond
	srv, err := mcpserve.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, reg: reg, logs: &logCapture{}}
	logger.RegisterSink(srv.LogSink())
	logger.RegisterSink(f.logs)
	root := hosttest.Scope(t)
	t.Cleanup(func() { srv.Close() }) // before the root scope closes
	for _, dir := range dirs {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("testdata", dir)
		}
		loc, err := location.Activate(t.Context(), root, dir, location.Options{
			Registry: reg, Logger: logger, Asker: srv, BuildCache: buildCache, StateDir: t.TempDir(),
		})
		if err != nil {
			t.Fatal(err)
		}
		srv.Add(loc)
		f.locs = append(f.locs, loc)
	}
	return f
}

// connect connects a Go SDK client to the Server over an in-process stdio pair.
func (f *fixture) connect(t testing.TB, opts *gomcp.ClientOptions) *gomcp.ClientSession {
	t.Helper()
	return f.connectClient(t, gomcp.NewClient(&gomcp.Implementation{Name: "go-test", Version: "1"}, opts))
}

// connectClient connects client to the Server over an in-process stdio pair.
func (f *fixture) connectClient(t testing.TB, client *gomcp.Client) *gomcp.ClientSession {
	t.Helper()
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- f.srv.ServeStdio(context.Background(), c2sR, s2cW)
		s2cW.Close()
	}()
	cs, err := client.Connect(t.Context(), &gomcp.IOTransport{Reader: s2cR, Writer: c2sW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		c2sW.Close()
		if err := <-served; err != nil { // ServeStdio returns once the client closed
			t.Errorf("ServeStdio: %v", err)
		}
	})
	return cs
}

func text(res *gomcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*gomcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func call(t testing.TB, cs *gomcp.ClientSession, name string, args any) *gomcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return res
}

func TestListAndCall(t *testing.T) {
	f := start(t, "ws")
	cs := f.connect(t, nil)
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*gomcp.Tool{}
	for _, tool := range list.Tools {
		tools[tool.Name] = tool
	}
	for _, name := range []string{"echo", "wait", "stats", "media", "fail", "guarded", "read"} {
		if tools[name] == nil {
			t.Fatalf("tools/list lacks %q; got %v", name, slices.Collect(mapKeys(tools)))
		}
	}
	t.Run("TitleAndAnnotations", func(t *testing.T) {
		echo := tools["echo"]
		if echo.Title != "Echo" || echo.Annotations == nil || !echo.Annotations.ReadOnlyHint || !echo.Annotations.IdempotentHint ||
			echo.Annotations.OpenWorldHint == nil || *echo.Annotations.OpenWorldHint {
			t.Errorf("echo: title %q, annotations %+v", echo.Title, echo.Annotations)
		}
	})
	t.Run("OnlyObjectOutputSchemas", func(t *testing.T) {
		if tools["echo"].OutputSchema != nil {
			t.Errorf("echo (string output) advertised outputSchema %v", tools["echo"].OutputSchema)
		}
		if tools["stats"].OutputSchema == nil {
			t.Error("stats (object output) has no outputSchema")
		}
	})
	t.Run("Completed", func(t *testing.T) {
		res := call(t, cs, "echo", map[string]string{"text": "hi"})
		if res.IsError || text(res) != "hi" || res.StructuredContent != nil {
			t.Errorf("echo: %+v", res)
		}
	})
	t.Run("Structured", func(t *testing.T) {
		res := call(t, cs, "stats", map[string]string{"text": "abc"})
		data, _ := json.Marshal(res.StructuredContent)
		if res.IsError || string(data) != `{"length":3,"upper":"\"abc\""}` || !strings.Contains(text(res), `"length":3`) {
			t.Errorf("stats: structured %s, text %q", data, text(res))
		}
	})
	t.Run("Media", func(t *testing.T) {
		res := call(t, cs, "media", map[string]string{"text": "x"})
		var kinds []string
		for _, c := range res.Content {
			switch c := c.(type) {
			case *gomcp.TextContent:
				kinds = append(kinds, "text")
			case *gomcp.ImageContent:
				kinds = append(kinds, "image:"+c.MIMEType)
			case *gomcp.AudioContent:
				kinds = append(kinds, "audio:"+c.MIMEType)
			case *gomcp.EmbeddedResource:
				kinds = append(kinds, "resource:"+c.Resource.MIMEType)
			}
		}
		if want := []string{"text", "image:image/png", "audio:audio/wav", "resource:application/pdf"}; !slices.Equal(kinds, want) {
			t.Errorf("media content %v, want %v", kinds, want)
		}
	})
	for _, tc := range []struct{ name, tool, args, want string }{
		{"ToolFailure", "fail", `{"text":"boom"}`, "failed on purpose: boom"},
		{"InvalidInput", "echo", `{"text":3}`, "invalid input"},
		{"Unknown", "nope", `{}`, "unknown tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, tc.tool, json.RawMessage(tc.args))
			if !res.IsError || !strings.Contains(text(res), tc.want) {
				t.Errorf("%s: isError %v, text %q; want an error containing %q", tc.tool, res.IsError, text(res), tc.want)
			}
		})
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestProgressCancelAndLogs(t *testing.T) {
	f := start(t, "ws")
	progress := make(chan *gomcp.ProgressNotificationParams, 100)
	logs := make(chan string, 100)
	cs := f.connect(t, &gomcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *gomcp.ProgressNotificationClientRequest) { progress <- r.Params },
		LoggingMessageHandler: func(_ context.Context, r *gomcp.LoggingMessageRequest) {
			if m, ok := r.Params.Data.(map[string]any); ok {
				logs <- m["message"].(string)
			}
		},
	})
	if err := cs.SetLoggingLevel(t.Context(), &gomcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}

	t.Run("Progress", func(t *testing.T) {
		params := &gomcp.CallToolParams{Name: "wait", Arguments: map[string]int{"steps": 3, "step_ms": 10}}
		params.SetProgressToken("tok")
		res, err := cs.CallTool(t.Context(), params)
		if err != nil || res.IsError {
			t.Fatalf("wait: %v %+v", err, res)
		}
		got := 0
		for len(progress) > 0 {
			p := <-progress
			if p.ProgressToken != "tok" || p.Total != 3 {
				t.Errorf("progress %+v", p)
			}
			got++
		}
		// A plugin's last progress event may reach the host after its result (they
		// travel apart), and is then dropped: not every event is guaranteed.
		if got < 1 || got > 3 {
			t.Errorf("%d progress notifications before the result, want 1 to 3", got)
		}
	})

	t.Run("CancelStopsTheWork", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		params := &gomcp.CallToolParams{Name: "wait", Arguments: map[string]int{"steps": 1000, "step_ms": 20}}
		params.SetProgressToken("long")
		done := make(chan error, 1)
		go func() {
			_, err := cs.CallTool(ctx, params)
			done <- err
		}()
		// Under way: a progress event of this call (the previous call's last one
		// may still arrive late, and would say nothing about this one).
		for p := range progress {
			if p.ProgressToken == "long" {
				break
			}
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("cancelled call returned no error")
		}
		defer func() {
			if t.Failed() {
				t.Log("logs:\n" + f.logs.String())
			}
		}()
		proctest.Until(t, func() bool { return f.logs.has("probe: work stopped") }) // the plugin logs that its work stopped
		for m := range logs {
			if m == "probe: work stopped" {
				return // and the client saw the log as notifications/message
			}
		}
		t.Fatal("no notifications/message saying the work stopped")
	})
}

func (l *logCapture) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "\n")
}

func TestPermissionAsks(t *testing.T) {
	f := start(t, "ws")
	answer := func(content map[string]any) *gomcp.ClientOptions {
		return &gomcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *gomcp.ElicitRequest) (*gomcp.ElicitResult, error) {
			if !strings.Contains(r.Params.Message, `"guarded"`) {
				t.Errorf("elicitation message %q does not name the tool", r.Params.Message)
			}
			return &gomcp.ElicitResult{Action: "accept", Content: content}, nil
		}}
	}
	t.Run("Once", func(t *testing.T) {
		cs := f.connect(t, answer(map[string]any{"decision": "once"}))
		if res := call(t, cs, "guarded", map[string]string{"text": "go"}); res.IsError || text(res) != "approved: go" {
			t.Errorf("guarded: %+v", text(res))
		}
	})
	t.Run("RejectWithMessage", func(t *testing.T) {
		cs := f.connect(t, answer(map[string]any{"decision": "reject", "message": "not today"}))
		if res := call(t, cs, "guarded", map[string]string{"text": "go"}); !res.IsError || !strings.Contains(text(res), "not today") {
			t.Errorf("guarded: %+v", text(res))
		}
	})
	t.Run("NoElicitationDenies", func(t *testing.T) {
		cs := f.connect(t, nil)
		res := call(t, cs, "guarded", map[string]string{"text": "go"})
		if !res.IsError || !strings.Contains(text(res), "cannot be asked") || strings.Contains(text(res), "rule") {
			t.Errorf("guarded without elicitation: %q", text(res))
		}
	})
}

func TestListChanged(t *testing.T) {
	f := start(t, "ws")
	changed := make(chan struct{}, 100)
	cs := f.connect(t, &gomcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *gomcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	tool := sdk.NewTool("Added at run time.", func(context.Context, sdk.Invocation, struct{}) (string, error) { return "new", nil })
	var releases []func()
	for _, name := range []string{"late_a", "late_b", "late_c"} {
		release, err := f.reg.Register(registry.Batch{Location: f.locs[0].ID(), Source: registry.Source{Kind: "application"}, Tools: map[string]sdk.Tool{name: tool}})
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	<-changed // notifications/tools/list_changed
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range list.Tools {
		names[tool.Name] = true
	}
	if !names["late_a"] || !names["late_b"] || !names["late_c"] {
		t.Fatalf("after list_changed, tools/list lacks the new tools")
	}
	if res := call(t, cs, "late_b", struct{}{}); text(res) != "new" {
		t.Errorf("late_b: %q", text(res))
	}
	for _, r := range releases {
		r()
	}
	<-changed // notifications/tools/list_changed after the release
	// The session still holds the list it captured: the released tool is unavailable.
	if res := call(t, cs, "late_b", struct{}{}); !res.IsError || !strings.Contains(text(res), "unavailable") && !strings.Contains(text(res), "no longer") {
		t.Errorf("late_b after release: isError %v %q", res.IsError, text(res))
	}
}

func TestSeveralLocationsArePrefixed(t *testing.T) {
	f := start(t, "ws", "ws2")
	cs := f.connect(t, nil)
	list, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"probe-ws_echo", "ws2_echo", "probe-ws_read", "ws2_read"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %q: %v", want, names)
		}
	}
	if res := call(t, cs, "ws2_echo", map[string]string{"a": "b"}); res.IsError || !strings.Contains(text(res), `"a"`) {
		t.Errorf("ws2_echo: %q", text(res))
	}
	if res := call(t, cs, "probe-ws_echo", map[string]string{"text": "p"}); res.IsError || text(res) != "p" {
		t.Errorf("probe-ws_echo: %q", text(res))
	}
}

func TestLabel(t *testing.T) {
	for in, want := range map[string]string{"probe-ws": "probe-ws", "my_ws.v2": "my-ws-v2", "2024": "L2024", "": "L"} {
		if got := mcpserve.Label(in); got != want {
			t.Errorf("Label(%q) = %q, want %q", in, got, want)
		}
	}
}

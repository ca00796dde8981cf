//go:build unix

package plugintest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/plugintest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

// probeEnv makes this test binary serve the probe plugin instead of running tests,
// so the tests can see what a plugin receives (a self-exec fake plugin).
const probeEnv = "PLUGINTEST_PROBE"

func TestMain(m *testing.M) {
	switch os.Getenv(probeEnv) {
	case "":
	case "serve":
		sdk.Serve(sdk.ActivateFunc(activateProbe))
		return
	case "refuse":
		sdk.Serve(sdk.ActivateFunc(func(context.Context, sdk.Location, sdk.Tools) error {
			return errors.New("probe: the API_KEY option is missing")
		}))
		return
	default:
		fmt.Fprintln(os.Stderr, "probe: refusing to start: no handshake today")
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// ProbeOutput is what the probe tool reports about its process and activation.
type ProbeOutput struct {
	PID       int             `json:"pid"`
	PIDNS     string          `json:"pid_ns,omitempty"`
	Cwd       string          `json:"cwd"`
	Directory string          `json:"directory"`
	Options   json.RawMessage `json:"options,omitempty"`
	Env       []string        `json:"env"`
}

func activateProbe(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
	probe := sdk.NewTool("Reports the plugin's process and activation.",
		func(ctx context.Context, _ sdk.Invocation, _ struct{}) (ProbeOutput, error) {
			cwd, err := os.Getwd()
			ns, _ := os.Readlink("/proc/self/ns/pid")
			return ProbeOutput{PID: hostPID(), PIDNS: ns, Cwd: cwd, Directory: loc.Directory, Options: loc.Options, Env: os.Environ()}, err
		})
	probe.OutputSchema = nil // options may be anything
	crash := sdk.NewTool("Exits the plugin process.",
		func(context.Context, sdk.Invocation, struct{}) (string, error) {
			os.Exit(3)
			return "", nil
		})
	interact := sdk.NewTool("Asks the model for a title, then the person to confirm it.",
		func(ctx context.Context, _ sdk.Invocation, _ struct{}) (InteractOutput, error) {
			var out InteractOutput
			res, err := sdk.Sample(ctx, sdk.SampleRequest{Messages: []sdk.SampleMessage{{Role: "user", Content: sdk.Text("a title, please")}}, MaxTokens: 10})
			if err != nil {
				out.SampleError = err.Error()
			} else {
				out.Completion = res.Message.Content.Text
			}
			a, err := sdk.Ask(ctx, sdk.Question{Message: "Use " + out.Completion + "?", Schema: confirmSchema})
			if err != nil {
				out.AskError = err.Error()
			} else {
				out.Action, out.Content = string(a.Action), a.Content
			}
			return out, nil
		})
	interact.OutputSchema = nil
	block := sdk.NewTool("Blocks until its call ends.",
		func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
			<-ctx.Done()
			return "", context.Cause(ctx)
		})
	_, err := tools.Register(ctx, map[string]sdk.Tool{"probe": probe, "crash": crash, "interact": interact, "block": block})
	return err
}

// confirmSchema is the question the interact tool asks.
var confirmSchema = json.RawMessage(`{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}`)

// InteractOutput is what the interact tool got from sdk.Sample and sdk.Ask.
type InteractOutput struct {
	Completion  string          `json:"completion,omitempty"`
	SampleError string          `json:"sample_error,omitempty"`
	Action      string          `json:"action,omitempty"`
	Content     json.RawMessage `json:"content,omitempty"`
	AskError    string          `json:"ask_error,omitempty"`
}

// hostPID is this process's pid as the host sees it: /proc is the host's, so
// /proc/self names it even inside the sandbox's PID namespace, where os.Getpid is
// the namespace's own number.
func hostPID() int {
	link, _ := os.Readlink("/proc/self")
	pid, _ := strconv.Atoi(link)
	return pid
}

func startProbe(t *testing.T, opts plugintest.Options) *plugintest.Host {
	t.Helper()
	if opts.Env == nil {
		opts.Env = map[string]string{}
	}
	opts.Env[probeEnv] = "serve"
	opts.Env["GORACE"] = "atexit_sleep_ms=0" // a -race binary otherwise lingers 1s on exit
	return plugintest.Start(t, os.Args[0], opts)
}

func probe(t *testing.T, h *plugintest.Host) ProbeOutput {
	t.Helper()
	s, err := h.Call(t.Context(), "probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.Completed {
		t.Fatalf("probe: %s %q", s.Outcome, s.Text())
	}
	var out ProbeOutput
	if err := json.Unmarshal(s.Structured, &out); err != nil {
		t.Fatal(err)
	}
	if out.PID == 1 && out.PIDNS != "" {
		out.PID = proctest.InitOf(out.PIDNS)
	}
	return out
}

// TestWithTheExampleTextPlugin builds the example text plugin once and runs the
// harness's call paths against one host.
func TestWithTheExampleTextPlugin(t *testing.T) {
	h := plugintest.Start(t, plugintest.Build(t, "../examples/plugins/text"), plugintest.Options{})
	t.Run("StartServesThePlugin", func(t *testing.T) { testStartServesThePlugin(t, h) })
	t.Run("CallEncodesInput", func(t *testing.T) { testCallEncodesInput(t, h) })
	t.Run("SettleKeepsTheInvocation", func(t *testing.T) { testSettleKeepsTheInvocation(t, h) })
	t.Run("CallsMayRunConcurrently", func(t *testing.T) { testCallsMayRunConcurrently(t, h) })
}

func testStartServesThePlugin(t *testing.T, h *plugintest.Host) {
	defs := h.Definitions()
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	if want := []string{"find", "title", "upper", "word_count"}; !slices.Equal(names, want) {
		t.Fatalf("definitions %v, want %v", names, want)
	}
	defs[0].Name = "changed" // the caller's copy
	if h.Definitions()[0].Name != "find" {
		t.Error("Definitions returned the registry's shared slice")
	}

	s, err := h.Call(t.Context(), "word_count", map[string]string{"text": "a b\nc"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.Completed || s.Text() != "2 lines, 3 words, 5 bytes" {
		t.Errorf("word_count: %s %q", s.Outcome, s.Text())
	}
	if s.Name != "word_count" || !strings.HasPrefix(s.ToolCallID, "plugintest-call-") {
		t.Errorf("settlement names %q, call id %q", s.Name, s.ToolCallID)
	}
}

func testCallEncodesInput(t *testing.T, h *plugintest.Host) {
	for _, tc := range []struct {
		name  string
		input any
		want  registry.Outcome
	}{
		{"StructIsMarshalled", struct {
			Text string `json:"text"`
		}{"hi"}, registry.Completed},
		{"MapIsMarshalled", map[string]any{"text": "hi"}, registry.Completed},
		{"RawMessagePassesAsIs", json.RawMessage(`{"text":"hi"}`), registry.Completed},
		{"BytesPassAsIs", []byte(`{"text":"hi"}`), registry.Completed},
		{"NilIsAnEmptyObject", nil, registry.InvalidInput},
		{"StringIsAJSONString", `{"text":"hi"}`, registry.InvalidInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := h.Call(t.Context(), "upper", tc.input)
			if err != nil {
				t.Fatal(err)
			}
			if s.Outcome != tc.want {
				t.Fatalf("outcome %s %q, want %s", s.Outcome, s.Text(), tc.want)
			}
			if tc.want == registry.Completed && s.Text() != "HI" {
				t.Errorf("upper = %q", s.Text())
			}
		})
	}
	t.Run("UnencodableInputIsAnError", func(t *testing.T) {
		if _, err := h.Call(t.Context(), "upper", make(chan int)); err == nil {
			t.Error("want an encoding error")
		}
	})
}

func testSettleKeepsTheInvocation(t *testing.T, h *plugintest.Host) {
	call := registry.Call{
		Name:       "upper",
		Input:      json.RawMessage(`{"text":"x"}`),
		Invocation: sdk.Invocation{SessionID: "s", Agent: "a", AssistantMessageID: "m", ToolCallID: "my-call"},
	}
	s, err := h.Settle(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	if s.ToolCallID != "my-call" || s.Text() != "X" {
		t.Errorf("settlement %+v", s)
	}
}

func testCallsMayRunConcurrently(t *testing.T, h *plugintest.Host) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			text := fmt.Sprintf("call %d", i)
			s, err := h.Call(t.Context(), "upper", map[string]string{"text": text})
			switch {
			case err != nil:
				errs <- err
			case s.Text() != strings.ToUpper(text):
				errs <- fmt.Errorf("upper(%q) = %q", text, s.Text())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestStartPassesOptionsEnvAndDirectory(t *testing.T) {
	t.Setenv("PLUGINTEST_HOST_ONLY", "1") // must not reach the plugin
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(real)
	if err != nil {
		t.Fatal(err)
	}
	h := startProbe(t, plugintest.Options{
		Options:   json.RawMessage(`{"greeting":"hello"}`),
		Env:       map[string]string{"PROBE_COLOUR": "blue", "GOGC": "50"},
		Directory: link,
	})
	if h.Location() != want {
		t.Errorf("Location() = %q, want the canonical %q", h.Location(), want)
	}
	got := probe(t, h)
	if got.Directory != want || got.Cwd != want {
		t.Errorf("plugin directory %q, working directory %q, want %q", got.Directory, got.Cwd, want)
	}
	if string(got.Options) != `{"greeting":"hello"}` {
		t.Errorf("options %s", got.Options)
	}
	if !slices.Contains(got.Env, "PROBE_COLOUR=blue") {
		t.Errorf("env %v lacks PROBE_COLOUR=blue", got.Env)
	}
	// The runtime settings the host chooses (GOMAXPROCS: a quarter of its own, at
	// least 1), unless the config's env sets them.
	for _, kv := range []string{"GOGC=50", "GOMAXPROCS=" + strconv.Itoa(max(1, runtime.GOMAXPROCS(0)/4))} {
		if !slices.Contains(got.Env, kv) {
			t.Errorf("env %v lacks %s", got.Env, kv)
		}
	}
	for _, kv := range got.Env {
		if strings.HasPrefix(kv, "PLUGINTEST_HOST_ONLY=") {
			t.Errorf("the test process's environment reached the plugin: %s", kv)
		}
	}
}

func TestDefaultDirectoryIsATemporaryLocation(t *testing.T) {
	h := startProbe(t, plugintest.Options{})
	if fi, err := os.Stat(h.Location()); err != nil || !fi.IsDir() || !filepath.IsAbs(h.Location()) {
		t.Fatalf("Location() = %q: %v", h.Location(), err)
	}
	if got := probe(t, h); got.Cwd != h.Location() || got.Options != nil {
		t.Errorf("probe %+v", got)
	}
}

func TestCleanupStopsThePlugin(t *testing.T) {
	var pid int
	t.Run("Start", func(t *testing.T) {
		pid = probe(t, startProbe(t, plugintest.Options{})).PID
	})
	if pid == 0 {
		t.Fatal("no plugin process was seen")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("plugin process %d after cleanup: kill 0 = %v, want ESRCH", pid, err)
	}
}

func TestCleanupStopsARestartedPlugin(t *testing.T) {
	var pids []int
	t.Run("Crash", func(t *testing.T) {
		h := startProbe(t, plugintest.Options{})
		pids = append(pids, probe(t, h).PID)
		_, err := h.Call(t.Context(), "crash", nil)
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("crash: %v, want an operational error naming the exit status", err)
		}
		// The supervisor restarts the plugin; until its new process has registered,
		// calls fail (the old generation's tools are being removed) or are unknown.
		proctest.Until(t, func() bool {
			s, err := h.Call(t.Context(), "probe", nil)
			var got ProbeOutput
			if err == nil && s.Outcome == registry.Completed && json.Unmarshal(s.Structured, &got) == nil {
				if got.PID == 1 && got.PIDNS != "" {
					got.PID = proctest.InitOf(got.PIDNS)
				}
			}
			if err == nil && s.Outcome == registry.Completed && got.PID != 0 && got.PID != pids[0] {
				pids = append(pids, got.PID)
				return true
			}
			return false
		})
	})
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("plugin process %d after cleanup: kill 0 = %v, want ESRCH", pid, err)
		}
	}
}

// fatalTB records a Fatalf instead of failing the test, so the tests can check what
// the harness reports. Everything else goes to the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs fn on a fatalTB in its own goroutine, as Fatalf stops the goroutine,
// and returns the Fatalf message ("" if none).
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestBuildFailureShowsTheCompilerOutput(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":  "module broken\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() { undefinedThing() }\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	msg := fatalOf(t, func(tb testing.TB) { plugintest.Build(tb, dir) })
	if !strings.Contains(msg, "build plugin") || !strings.Contains(msg, "undefined: undefinedThing") {
		t.Errorf("Build failure message %q should quote the compiler", msg)
	}
}

func TestStartFailureShowsThePluginStderr(t *testing.T) {
	msg := fatalOf(t, func(tb testing.TB) {
		plugintest.Start(tb, os.Args[0], plugintest.Options{Env: map[string]string{probeEnv: "broken"}})
	})
	if !strings.Contains(msg, "no handshake today") {
		t.Errorf("Start failure message %q should quote the plugin's stderr", msg)
	}
}

func TestBuildIsSharedBetweenTests(t *testing.T) {
	var first string
	t.Run("First", func(t *testing.T) { first = plugintest.Build(t, "../examples/plugins/text") })
	t.Run("Second", func(t *testing.T) {
		fi, err := os.Stat(first)
		if err != nil {
			t.Fatalf("the first test's binary is gone after it ended: %v", err)
		}
		if again := plugintest.Build(t, "../examples/plugins/text"); again != first {
			t.Fatalf("second Build = %s, want the cached %s", again, first)
		}
		if fi2, _ := os.Stat(first); !fi2.ModTime().Equal(fi.ModTime()) {
			t.Fatalf("unchanged sources were built again")
		}
	})
	if path, err := plugintest.BuildOnce("../examples/plugins/text"); err != nil || path != first {
		t.Fatalf("BuildOnce = %s, %v; want %s", path, err, first)
	}
}

func TestTryStartReturnsTheActivationFailure(t *testing.T) {
	h, err := plugintest.TryStart(t, os.Args[0], plugintest.Options{Env: map[string]string{probeEnv: "refuse", "GORACE": "atexit_sleep_ms=0"}})
	var start *plugins.StartError
	if h != nil || !errors.As(err, &start) || !strings.Contains(err.Error(), "the API_KEY option is missing") {
		t.Fatalf("TryStart = %v, %v; want a *plugins.StartError quoting the activation's error", h, err)
	}
}

func TestStartRefusesInvalidOptions(t *testing.T) {
	msg := fatalOf(t, func(tb testing.TB) {
		plugintest.Start(tb, os.Args[0], plugintest.Options{Options: json.RawMessage(`{`)})
	})
	if !strings.Contains(msg, "not valid JSON") {
		t.Errorf("message %q", msg)
	}
}

func TestExampleWorkspaceConfigIsValid(t *testing.T) {
	dir, err := location.Canonicalize("../examples/workspace")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, filepath.FromSlash(location.ConfigPath))
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := location.ParseConfig(dir, file, data)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.WorkspaceID == "" || cfg.ToolOutput.MaxLines == 0 || cfg.ToolOutput.MaxBytes == 0 {
		t.Errorf("the example should show a workspace_id and tool_output limits: %+v", cfg)
	}
	var names []string
	for _, p := range cfg.Plugins {
		names = append(names, p.Name)
		if _, err := os.Stat(filepath.Join(p.Source, "main.go")); err != nil {
			t.Errorf("plugin %q: source %q: %v", p.Name, p.Source, err)
		}
	}
	if want := []string{"text", "slow", "runtime", "todos"}; !slices.Equal(names, want) {
		t.Errorf("plugins %v, want %v", names, want)
	}
}

// TestExampleWorkspaceActivates activates the example workspace as toolhost would:
// the Location builds the example plugins from source and starts them.
func TestExampleWorkspaceActivates(t *testing.T) {
	reg := hosttest.Registry(t, registry.Options{})
	root := scope.New(context.Background())
	var pids []int
	defer func() {
		if err := root.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("plugin process %d after close: kill 0 = %v, want ESRCH", pid, err)
			}
		}
	}()
	loc, err := location.Activate(t.Context(), root, "../examples/workspace", location.Options{
		Registry:   reg,
		BuildCache: t.TempDir(),
		Env:        []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sup := range loc.Plugins() {
		pids = append(pids, sup.Current().PID())
	}
	q, err := loc.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range q.Definitions() {
		names = append(names, d.Name)
	}
	want := []string{"clock_now", "countdown", "feature_toggle", "find", "glob", "grep", "list", "read", "title", "todo_scan", "upper", "word_count"}
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, want %v", names, want)
	}
	// The trusted todos plugin reads the workspace through the Location's services.
	scan, err := q.Settle(t.Context(), registry.Call{Name: "todo_scan"})
	if err != nil || !strings.Contains(scan.Text(), "notes.md:3: - TODO: pin the text plugin") {
		t.Errorf("todo_scan: %v %v", scan, err)
	}
	poem, err := os.ReadFile("../examples/workspace/poem.txt")
	if err != nil {
		t.Fatal(err)
	}
	input, _ := json.Marshal(map[string]string{"text": string(poem)})
	s, err := q.Settle(t.Context(), registry.Call{Name: "word_count", Input: input})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("6 lines, %d words, %d bytes", len(strings.Fields(string(poem))), len(poem)); s.Text() != want {
		t.Errorf("word_count of poem.txt: %s %q, want %q", s.Outcome, s.Text(), want)
	}
}

// ExampleStart is how a plugin's own main_test.go uses the harness: build the plugin
// in the package directory, start it against a real host, settle calls.
func ExampleStart() {
	var t *testing.T // in a real test: the test's *testing.T

	h := plugintest.Start(t, plugintest.Build(t, "."), plugintest.Options{
		Options: json.RawMessage(`{"max_matches": 10}`),
	})
	s, err := h.Call(t.Context(), "upper", map[string]string{"text": "hello"})
	if err != nil {
		t.Fatal(err) // interrupted, a defect, or an operational failure such as a crash
	}
	if s.Outcome != registry.Completed || s.Text() != "HELLO" {
		t.Errorf("upper: %s %q", s.Outcome, s.Text())
	}
}

func interact(t *testing.T, h *plugintest.Host) InteractOutput {
	t.Helper()
	s, err := h.Call(t.Context(), "interact", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.Completed {
		t.Fatalf("interact: %s %q", s.Outcome, s.Text())
	}
	var out InteractOutput
	if err := json.Unmarshal(s.Structured, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnswerer drives sdk.Sample and sdk.Ask in a real plugin process through the
// answerers Options offers.
func TestAnswerer(t *testing.T) {
	both := []plugins.Grant{plugins.GrantAsk, plugins.GrantSample}
	t.Run("ScriptAnswersInOrder", func(t *testing.T) {
		script := &plugintest.Script{
			Answers:     []sdk.Answer{plugintest.Accept(map[string]bool{"ok": true}), {Action: sdk.Declined}},
			Completions: []sdk.SampleResult{plugintest.Completion("Ode")},
		}
		h := startProbe(t, plugintest.Options{Grants: both, Answerer: script})
		out := interact(t, h)
		if out.Completion != "Ode" || out.Action != "accept" || string(out.Content) != `{"ok":true}` || out.AskError != "" {
			t.Errorf("first call got %+v", out)
		}
		out = interact(t, h) // the script has no second completion, and declines
		if !strings.Contains(out.SampleError, "no one to answer") || out.Action != "decline" {
			t.Errorf("second call got %+v", out)
		}
		qs, rs := script.Questions(), script.Requests()
		if len(qs) != 2 || qs[0].Message != "Use Ode?" || string(qs[0].Schema) != string(confirmSchema) || len(rs) != 2 || rs[0].MaxTokens != 10 {
			t.Errorf("the script was asked %+v and %+v", qs, rs)
		}
	})
	t.Run("FunctionsAnswer", func(t *testing.T) {
		h := startProbe(t, plugintest.Options{Grants: both, Answerer: plugintest.Answerer{
			AskFunc: func(ctx context.Context, q sdk.Question) (sdk.Answer, error) {
				return plugintest.Accept(map[string]bool{"ok": strings.Contains(q.Message, "Sonnet")}), nil
			},
			SampleFunc: func(ctx context.Context, req sdk.SampleRequest) (sdk.SampleResult, error) {
				return plugintest.Completion("Sonnet " + req.Messages[0].Content.Text), nil
			},
		}})
		if out := interact(t, h); out.Completion != "Sonnet a title, please" || string(out.Content) != `{"ok":true}` {
			t.Errorf("got %+v", out)
		}
	})
	t.Run("AnswerAgainstTheSchemaIsRefused", func(t *testing.T) {
		h := startProbe(t, plugintest.Options{Grants: both, Answerer: &plugintest.Script{
			Answers: []sdk.Answer{plugintest.Accept(map[string]string{"ok": "yes"})},
		}})
		if out := interact(t, h); out.AskError == "" || out.Content != nil {
			t.Errorf("an answer that does not match the schema reached the plugin: %+v", out)
		}
	})
	t.Run("UngrantedIsUnanswered", func(t *testing.T) {
		h := startProbe(t, plugintest.Options{Grants: []plugins.Grant{plugins.GrantSample}, Answerer: &plugintest.Script{
			Answers:     []sdk.Answer{plugintest.Accept(map[string]bool{"ok": true})},
			Completions: []sdk.SampleResult{plugintest.Completion("Ode")},
		}})
		if out := interact(t, h); out.Completion != "Ode" || !strings.Contains(out.AskError, "no one to answer") {
			t.Errorf("got %+v, want the sample answered and the ask not", out)
		}
	})
	t.Run("TrustedIsGrantedBoth", func(t *testing.T) {
		h := startProbe(t, plugintest.Options{Trusted: true, Answerer: &plugintest.Script{
			Answers:     []sdk.Answer{{Action: sdk.Cancelled}},
			Completions: []sdk.SampleResult{plugintest.Completion("Ode")},
		}})
		if out := interact(t, h); out.Completion != "Ode" || out.Action != "cancel" {
			t.Errorf("got %+v", out)
		}
	})
	t.Run("NoAnswerer", func(t *testing.T) {
		h := startProbe(t, plugintest.Options{Grants: both})
		if out := interact(t, h); !strings.Contains(out.SampleError, "no one to answer") || !strings.Contains(out.AskError, "no one to answer") {
			t.Errorf("got %+v", out)
		}
	})
}

func TestCallTimeout(t *testing.T) {
	h := startProbe(t, plugintest.Options{CallTimeout: 50 * time.Millisecond})
	s, err := h.Call(t.Context(), "block", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.ToolFailed || !strings.Contains(s.Text(), "timeout of 50ms") {
		t.Fatalf("got %s %q, want a tool failure naming its timeout", s.Outcome, s.Text())
	}
}

func TestOverrides(t *testing.T) {
	other := func(h *plugintest.Host) error {
		_, err := h.Registry().Register(registry.Batch{Location: h.Location(), Source: registry.Source{Kind: "builtin"},
			Tools: map[string]sdk.Tool{"probe": sdk.NewTool("Another probe.", func(context.Context, sdk.Invocation, struct{}) (string, error) {
				return "the other probe", nil
			})}})
		return err
	}
	h := startProbe(t, plugintest.Options{})
	if err := other(h); !errors.Is(err, registry.ErrNameTaken) {
		t.Fatalf("another source took the plugin's name: %v", err)
	}
	h = startProbe(t, plugintest.Options{Overrides: []string{"probe"}})
	if err := other(h); err != nil {
		t.Fatal(err)
	}
	if out := probe(t, h); out.PID == 0 {
		t.Fatalf("the plugin's probe did not answer: %+v", out)
	}
}

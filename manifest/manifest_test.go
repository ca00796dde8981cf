package manifest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/manifest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var testdata = func() string {
	dir, err := filepath.Abs("testdata")
	if err != nil {
		panic(err)
	}
	return dir
}()

// python returns the real python3 interpreter (not a version manager's shim, which
// needs the host's environment).
func python(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skipf("python3 is not available: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// host is a registry with one Location placement whose tools are owned by a scope.
type host struct {
	reg  *registry.Registry
	loc  string // the Location directory, canonical
	root *scope.Scope
}

func newHost(t *testing.T) *host {
	t.Helper()
	h := hosttest.NewHost(t, registry.Options{})
	return &host{reg: h.Registry, loc: h.Location, root: h.Root}
}

// register registers tools and fails the test on any warning.
func (h *host) register(t *testing.T, tools ...manifest.Tool) {
	t.Helper()
	release, warnings := manifest.Register(h.reg, h.loc, h.root, tools, nil, nil)
	if len(warnings) > 0 {
		t.Fatal(warnings)
	}
	t.Cleanup(release)
}

func (h *host) settle(ctx context.Context, name, input string) (*registry.Settlement, error) {
	q, err := h.reg.Prepare(h.loc)
	if err != nil {
		return nil, err
	}
	return q.Settle(ctx, registry.Call{Name: name, Input: []byte(input)})
}

func (h *host) mustSettle(t *testing.T, name, input string, want registry.Outcome) *registry.Settlement {
	t.Helper()
	s, err := h.settle(t.Context(), name, input)
	if err != nil {
		t.Fatalf("settle %s: %v", name, err)
	}
	if s.Outcome != want {
		t.Fatalf("settle %s: outcome %s (%s), want %s", name, s.Outcome, s.Text(), want)
	}
	return s
}

func TestShellTool(t *testing.T) {
	h := newHost(t)
	work := filepath.Join(h.loc, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	h.register(t, manifest.Tool{
		Name: "greet", Description: "Greets.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`),
		Command:     []string{"sh", filepath.Join(testdata, "greet.sh")},
		Dir:         work,
		Env:         map[string]string{"PATH": "/usr/bin:/bin"},
	})
	s := h.mustSettle(t, "greet", `{"name":"Ada"}`, registry.Completed)
	want := "hello from sh, you sent {\"name\":\"Ada\"}\n(working in " + work + ")\n"
	if s.Text() != want || s.Structured != nil {
		t.Errorf("settlement = %q (structured %s), want %q as text only", s.Text(), s.Structured, want)
	}
}

func TestPythonTool(t *testing.T) {
	h := newHost(t)
	h.register(t, manifest.Tool{
		Name: "count", Description: "Counts words.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"words":{"type":"integer"},"chars":{"type":"integer"}},"required":["words","chars"]}`),
		Command:      []string{python(t), filepath.Join(testdata, "count.py")},
	})
	s := h.mustSettle(t, "count", `{"text":"to be or not"}`, registry.Completed)
	if string(s.Structured) != `{"words": 4, "chars": 12}` {
		t.Errorf("structured = %s", s.Structured)
	}
}

func TestEnvironmentIsExplicit(t *testing.T) {
	t.Setenv("TOOLHOST_TEST_SECRET", "leaked")
	h := newHost(t)
	h.register(t, manifest.Tool{
		Name: "env", Description: "Prints its environment.",
		Command: []string{"/usr/bin/env"},
		Env:     map[string]string{"GREETING": "hi", "PATH": "/nowhere"},
	})
	s := h.mustSettle(t, "env", `{}`, registry.Completed)
	if s.Text() != "GREETING=hi\nPATH=/nowhere\n" {
		t.Errorf("environment = %q, want exactly the tool's", s.Text())
	}
}

func TestFailureCarriesStderrTail(t *testing.T) {
	h := newHost(t)
	h.register(t, manifest.Tool{Name: "fail", Description: "Fails.", Command: []string{"/bin/sh", filepath.Join(testdata, "fail.sh")}})
	s := h.mustSettle(t, "fail", `{}`, registry.ToolFailed)
	text := s.Text()
	if !strings.HasPrefix(text, "the command exited with status 3\nstderr (last 4096 of ") ||
		!strings.HasSuffix(text, "diagnostic line 9999\nfatal: the input was not acceptable") {
		t.Errorf("failure = %.200q ... %q", text, text[max(0, len(text)-100):])
	}
	if strings.Contains(text, "diagnostic line 1\n") || len(text) > 4096+200 {
		t.Errorf("failure quotes more than the 4 KiB tail (%d bytes)", len(text))
	}
}

// hangTool runs hang.sh, which records its process group in the returned file.
func hangTool(t *testing.T, name string, timeout time.Duration, ignoreTerm bool) (manifest.Tool, string) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	env := map[string]string{"PATH": "/usr/bin:/bin", "PIDFILE": pidFile}
	if ignoreTerm {
		env["IGNORE_TERM"] = "1"
	}
	return manifest.Tool{Name: name, Description: "Hangs.", Command: []string{"/bin/sh", filepath.Join(testdata, "hang.sh")}, Env: env, Timeout: timeout}, pidFile
}

// groupOf waits for the pid file and returns the process group it names.
func groupOf(t *testing.T, pidFile string) int {
	t.Helper()
	var data []byte
	proctest.Until(t, func() bool {
		var err error
		data, err = os.ReadFile(pidFile)
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestCallLeavesNoProcess(t *testing.T) {
	h := newHost(t)
	marker := fmt.Sprintf("3000.%d", time.Now().UnixNano()%1000000)
	h.register(t, manifest.Tool{
		Name: "bg", Description: "Leaves children behind.",
		// A background child, and one that escapes the group with setsid.
		Command: []string{"sh", "-c", "sleep " + marker + " & setsid sleep " + marker + " & echo ok"},
		Dir:     h.loc,
		Env:     map[string]string{"PATH": "/usr/bin:/bin"},
	})
	if s := h.mustSettle(t, "bg", `{}`, registry.Completed); s.Text() != "ok\n" {
		t.Errorf("settlement = %q", s.Text())
	}
	proctest.AssertMarkedGone(t, marker)
}

func TestTimeoutKillsTheGroup(t *testing.T) {
	h := newHost(t)
	tool, pidFile := hangTool(t, "hang", 300*time.Millisecond, false)
	h.register(t, tool)
	s := h.mustSettle(t, "hang", `{}`, registry.ToolFailed)
	if s.Text() != "the command timed out after 300ms and was killed" {
		t.Errorf("failure = %q", s.Text())
	}
	proctest.AssertGroupGone(t, groupOf(t, pidFile))
}

func TestCancellation(t *testing.T) {
	for _, ignoreTerm := range []bool{false, true} {
		t.Run(fmt.Sprintf("IgnoreTerm=%v", ignoreTerm), func(t *testing.T) {
			h := newHost(t)
			tool, pidFile := hangTool(t, "hang", 0, ignoreTerm)
			h.register(t, tool)
			ctx, cancel := context.WithCancelCause(t.Context())
			errc := make(chan error, 1)
			go func() {
				_, err := h.settle(ctx, "hang", `{}`)
				errc <- err
			}()
			pgid := groupOf(t, pidFile)
			start := time.Now()
			cause := errors.New("the user pressed stop")
			cancel(fmt.Errorf("%w: %w", context.Canceled, cause))
			err := <-errc
			if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
				t.Errorf("err = %v, want the context's cause (an interruption)", err)
			}
			// SIGTERM ends it at once, unless ignored: then SIGKILL after the grace.
			if took := time.Since(start); ignoreTerm != (took >= manifest.KillGrace) {
				t.Errorf("took %s to end (ignoring SIGTERM: %v; grace %s)", took, ignoreTerm, manifest.KillGrace)
			}
			proctest.AssertGroupGone(t, pgid)
		})
	}
}

func TestScopeCloseInterruptsCalls(t *testing.T) {
	h := newHost(t)
	owner, err := h.root.Child()
	if err != nil {
		t.Fatal(err)
	}
	tool, pidFile := hangTool(t, "hang", 0, false)
	release, warnings := manifest.Register(h.reg, h.loc, owner, []manifest.Tool{tool}, nil, nil)
	if len(warnings) > 0 {
		t.Fatal(warnings)
	}
	defer release()
	errc := make(chan error, 1)
	go func() {
		_, err := h.settle(t.Context(), "hang", `{}`)
		errc <- err
	}()
	pgid := groupOf(t, pidFile)
	if err := owner.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want an interruption", err)
	}
	proctest.AssertGroupGone(t, pgid)
}

func TestProducerCap(t *testing.T) {
	h := newHost(t)
	py := python(t)
	emit := filepath.Join(testdata, "emit.py")
	h.register(t,
		manifest.Tool{Name: "emit", Description: "Emits.", Command: []string{py, emit}, MaxOutputBytes: 1000},
		manifest.Tool{Name: "emit_json", Description: "Emits.", Command: []string{py, emit}, MaxOutputBytes: 1000,
			OutputSchema: json.RawMessage(`{"type":"string"}`)},
	)
	t.Run("TextSaysWhatWasDropped", func(t *testing.T) {
		// 5 MiB through a 1000-byte cap: the command is drained, never blocked.
		s := h.mustSettle(t, "emit", `{"bytes":5242880}`, registry.Completed)
		want := strings.Repeat("x", 1000) + "\n[toolhost: output truncated by the producer cap: 5241880 of 5242880 bytes dropped]"
		if s.Text() != want {
			t.Errorf("text = %.60q...%q", s.Text(), s.Text()[max(0, len(s.Text())-90):])
		}
	})
	t.Run("CutsOnACharacterBoundary", func(t *testing.T) {
		// "é" is 2 bytes: 1000 bytes hold 500 of them exactly; 1001 would split one.
		s := h.mustSettle(t, "emit", `{"bytes":3001,"utf8":true}`, registry.Completed)
		want := strings.Repeat("é", 500) + "\n[toolhost: output truncated by the producer cap: 2000 of 3000 bytes dropped]"
		if s.Text() != want {
			t.Errorf("text ends %q", s.Text()[max(0, len(s.Text())-90):])
		}
	})
	t.Run("UnderTheCapIsComplete", func(t *testing.T) {
		s := h.mustSettle(t, "emit", `{"bytes":1000}`, registry.Completed)
		if s.Text() != strings.Repeat("x", 1000) {
			t.Errorf("text = %q", s.Text())
		}
	})
	t.Run("JSONIsAFailure", func(t *testing.T) {
		s := h.mustSettle(t, "emit_json", `{"bytes":4000}`, registry.ToolFailed)
		if !strings.Contains(s.Text(), "truncated by the producer cap: 3000 of 4000 bytes dropped (max_output_bytes is 1000)") {
			t.Errorf("failure = %q", s.Text())
		}
	})
}

func TestInvalidJSONOutput(t *testing.T) {
	h := newHost(t)
	h.register(t, manifest.Tool{
		Name: "bad_json", Description: "Prints text but promises JSON.",
		OutputSchema: json.RawMessage(`{"type":"object"}`),
		Command:      []string{"/bin/echo", "not json"},
	})
	s := h.mustSettle(t, "bad_json", `{}`, registry.InvalidOutput)
	if len(s.Problems) != 1 || !strings.Contains(s.Problems[0].Message, "not valid JSON") {
		t.Errorf("problems = %v", s.Problems)
	}
}

func TestAfterHookRuns(t *testing.T) {
	h := newHost(t)
	h.register(t, manifest.Tool{Name: "hi", Description: "Says hi.", Command: []string{"/bin/echo", "hi"}})
	var mu sync.Mutex
	var seen []string
	release, err := h.reg.AddHook(h.loc, func(_ context.Context, call registry.Call, s *registry.Settlement) (*registry.Settlement, error) {
		mu.Lock()
		seen = append(seen, call.Name+":"+string(s.Outcome))
		mu.Unlock()
		s.Content = append(s.Content, sdk.Text("(checked)"))
		return s, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	s := h.mustSettle(t, "hi", `{}`, registry.Completed)
	if s.Text() != "hi\n(checked)" {
		t.Errorf("text = %q, want the hook's addition", s.Text())
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "hi:completed" {
		t.Errorf("hook saw %v", seen)
	}
}

func TestRegisterIsolatesBadTools(t *testing.T) {
	h := newHost(t)
	var asked []string
	release, warnings := manifest.Register(h.reg, h.loc, h.root, []manifest.Tool{
		{Name: "good", Description: "Good.", Command: []string{"/bin/echo", "ok"}},
		{Name: "bad_schema", Description: "Bad.", Command: []string{"/bin/true"}, InputSchema: json.RawMessage(`{"type":"nope"}`)},
		{Name: "good", Description: "Same name, from a file.", Command: []string{"/bin/true"}, File: "/x/.toolhost/tools/good.json"},
		{Name: "denied", Description: "Denied.", Command: []string{"/bin/true"}},
	}, func(_ context.Context, tool string, _ sdk.Invocation) error {
		asked = append(asked, tool)
		if tool == "denied" {
			return &sdk.ToolFailure{Message: "permission denied"}
		}
		return nil
	}, nil)
	defer release()
	if len(warnings) != 2 || !strings.Contains(warnings[0].Error(), `"bad_schema"`) ||
		!strings.Contains(warnings[1].Error(), "already used by the tool from the config") {
		t.Errorf("warnings = %v", warnings)
	}
	if s := h.mustSettle(t, "good", `{}`, registry.Completed); s.Text() != "ok\n" {
		t.Errorf("good = %q", s.Text())
	}
	if s := h.mustSettle(t, "denied", `{}`, registry.ToolFailed); s.Text() != "permission denied" {
		t.Errorf("denied = %q", s.Text())
	}
	if strings.Join(asked, ",") != "good,denied" {
		t.Errorf("asked = %v", asked)
	}
	release()
	if s := h.mustSettle(t, "good", `{}`, registry.Unknown); s == nil {
		t.Error("released tool still known")
	}
}

func TestMissingCommandIsOperational(t *testing.T) {
	h := newHost(t)
	h.register(t, manifest.Tool{Name: "ghost", Description: "Missing.", Command: []string{"no-such-program"}, Env: map[string]string{"PATH": "/usr/bin"}})
	_, err := h.settle(t.Context(), "ghost", `{}`)
	var cerr *manifest.CommandError
	var op *registry.OperationalError
	if !errors.As(err, &cerr) || !errors.As(err, &op) || !strings.Contains(err.Error(), `"no-such-program" not found on the configured PATH`) {
		t.Errorf("err = %v, want an operational CommandError", err)
	}
}

func TestLoad(t *testing.T) {
	h := newHost(t)
	dir := filepath.Join(h.loc, ".toolhost", "tools")
	if tools, errs := manifest.Load(h.loc); tools != nil || errs != nil {
		t.Fatalf("no directory: Load = %v, %v; want nothing", tools, errs)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"a_good.json": `{"name":"greet","description":"Greets.","command":["./bin/greet.sh","--loud"],"dir":"sub",
			"input_schema":{"type":"object"},"output_schema":{"type":"string"},"env":{"PATH":"/bin"},"timeout":"1m30s","max_output_bytes":4096}`,
		"b_syntax.json":    `{"name":"x",`,
		"c_unknown.json":   `{"name":"c","description":"C.","command":["true"],"comand":["typo"]}`,
		"d_outside.json":   `{"name":"d","description":"D.","command":["true"],"dir":"../elsewhere"}`,
		"e_duplicate.json": `{"name":"greet","description":"Again.","command":["true"]}`,
		"f_many.json":      `{"name":"9lives","description":"","timeout":"-1s","max_output_bytes":0}`,
		"g_types.json":     `{"name":"g","description":"G.","command":"true"}`,
		"h_minimal.json":   `{"name":"minimal","description":"Minimal.","command":["true"]}`,
		"ignored.txt":      `not a manifest`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tools, errs := manifest.Load(h.loc)
	if len(tools) != 2 || tools[0].Name != "greet" || tools[1].Name != "minimal" {
		t.Fatalf("tools = %+v, want greet and minimal", tools)
	}
	greet := tools[0]
	if greet.Command[0] != filepath.Join(h.loc, "bin", "greet.sh") || greet.Command[1] != "--loud" ||
		greet.Dir != filepath.Join(h.loc, "sub") || greet.Timeout != 90*time.Second || greet.MaxOutputBytes != 4096 ||
		string(greet.OutputSchema) != `{"type":"string"}` || greet.Env["PATH"] != "/bin" || greet.File != filepath.Join(dir, "a_good.json") {
		t.Errorf("greet = %+v", greet)
	}
	if tools[1].Dir != h.loc || tools[1].InputSchema != nil {
		t.Errorf("minimal = %+v, want the Location as its directory and no schema", tools[1])
	}
	wants := []string{
		"b_syntax.json: ",
		`c_unknown.json: unknown field "comand"`,
		`d_outside.json: dir: directory "../elsewhere" is outside the Location directory`,
		`e_duplicate.json: name: "greet" is already used by ` + filepath.Join(dir, "a_good.json"),
		`f_many.json: name: invalid name "9lives": want a letter followed by at most 63 letters, digits, '_' or '-'; description: missing or empty; command: missing or empty: want the program and its arguments; timeout: invalid duration "-1s": must be positive; max_output_bytes: got 0, want a positive integer`,
		"g_types.json: command: got a JSON string, want []string",
	}
	if len(errs) != len(wants) {
		t.Fatalf("errors = %v, want %d", errs, len(wants))
	}
	for i, want := range wants {
		var ferr *manifest.FileError
		if !errors.As(errs[i], &ferr) || !strings.Contains(errs[i].Error(), want) {
			t.Errorf("error %d = %v, want it to contain %q", i, errs[i], want)
		}
	}
}

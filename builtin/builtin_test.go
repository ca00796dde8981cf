package builtin_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/builtin"
	"github.com/toolhost/toolhost/fsys"
	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recAsker records every ask and answers with ans, first running during (if set)
// as if the person took an action while deciding.
type recAsker struct {
	mu     sync.Mutex
	ans    permission.Answer
	during func(permission.Request)
	reqs   []permission.Request
}

func (a *recAsker) Ask(_ context.Context, _ string, req permission.Request) (permission.Answer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reqs = append(a.reqs, req)
	if a.during != nil {
		a.during(req)
	}
	return a.ans, nil
}

func (a *recAsker) asked() []permission.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]permission.Request(nil), a.reqs...)
}

type env struct {
	root    string
	outside string
	reg     *registry.Registry
	q       *registry.Request
}

var inv = sdk.Invocation{SessionID: "ses_1", Agent: "build", AssistantMessageID: "msg_9", ToolCallID: "call_3"}

// setup makes a workspace, its services with rules and asker, and a registry with
// the built-ins registered in a Location placement.
//
//	root/a.txt (3 lines), root/sub/b.go, root/sub/deep/c.go, root/bin.dat
//	root/out -> <outside>, root/in -> sub
func setup(t *testing.T, rules []permission.Rule, asker permission.Asker) *env {
	t.Helper()
	base := t.TempDir()
	e := &env{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside")}
	mkdir(t, filepath.Join(e.root, "sub", "deep"))
	mkdir(t, e.outside)
	write(t, filepath.Join(e.outside, "secret.txt"), "TODO secret\n")
	write(t, filepath.Join(e.root, "a.txt"), "alpha\nbeta\ngamma\n")
	write(t, filepath.Join(e.root, "sub", "b.go"), "package sub\n\n// TODO: b\nfunc B() {}\n")
	write(t, filepath.Join(e.root, "sub", "deep", "c.go"), "package deep\n// TODO: c\n")
	write(t, filepath.Join(e.root, "bin.dat"), "TODO\x00\x01")
	symlink(t, e.outside, filepath.Join(e.root, "out"))
	symlink(t, "sub", filepath.Join(e.root, "in"))

	files, err := fsys.New(e.root)
	if err != nil {
		t.Fatal(err)
	}
	perm, err := permission.New(permission.Options{Rules: rules, Asker: asker, ConfigHint: ".toolhost/config.json"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(perm.Close)

	reg := hosttest.Registry(t, registry.Options{})
	e.reg = reg
	closeLoc, err := reg.OpenLocation("loc", registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeLoc)
	release, err := reg.Register(registry.Batch{Location: "loc", Source: registry.Source{Kind: "builtin"}, Tools: builtin.Tools(files, perm)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	if e.q, err = reg.Prepare("loc"); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) call(t *testing.T, name string, input any) (*registry.Settlement, error) {
	t.Helper()
	data, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	return e.q.Settle(t.Context(), registry.Call{Name: name, Input: data, Invocation: inv})
}

// completed settles a call that must complete and returns its text and structured
// output decoded into out (if non-nil).
func (e *env) completed(t *testing.T, name string, input, out any) string {
	t.Helper()
	s, err := e.call(t, name, input)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if s.Outcome != registry.Completed {
		t.Fatalf("%s: outcome %s: %s", name, s.Outcome, s.Text())
	}
	if out != nil {
		if err := json.Unmarshal(s.Structured, out); err != nil {
			t.Fatalf("%s: structured output %s: %v", name, s.Structured, err)
		}
	}
	return s.Text()
}

// failed settles a call that must be a tool failure and returns its message.
func (e *env) failed(t *testing.T, name string, input any) string {
	t.Helper()
	s, err := e.call(t, name, input)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if s.Outcome != registry.ToolFailed {
		t.Fatalf("%s: outcome %s, want a tool failure: %s", name, s.Outcome, s.Text())
	}
	return s.Text()
}

func allowAll() []permission.Rule {
	return []permission.Rule{{Action: "*", Resource: "*", Effect: permission.Allow}}
}

func TestDefinitions(t *testing.T) {
	e := setup(t, allowAll(), nil)
	var names []string
	for _, d := range e.q.Definitions() {
		names = append(names, d.Name)
		if d.Description == "" || !strings.Contains(string(d.InputSchema), `"description"`) {
			t.Errorf("%s: missing descriptions: %s", d.Name, d.InputSchema)
		}
	}
	if want := []string{"glob", "grep", "list", "read"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("definitions %v, want %v", names, want)
	}
}

func TestRead(t *testing.T) {
	e := setup(t, allowAll(), nil)
	var out builtin.ReadOutput
	text := e.completed(t, "read", map[string]any{"path": "a.txt"}, &out)
	if want := "     1\talpha\n     2\tbeta\n     3\tgamma"; text != want {
		t.Errorf("read text %q, want %q", text, want)
	}
	if out.Path != "a.txt" || out.StartLine != 1 || out.EndLine != 3 || out.TotalLines != 3 {
		t.Errorf("read output %+v", out)
	}
	text = e.completed(t, "read", map[string]any{"path": "a.txt", "offset": 2, "limit": 1}, &out)
	if want := "     2\tbeta\n\n(showing lines 2-2 of 3; use offset=3 to read more)"; text != want {
		t.Errorf("ranged read text %q, want %q", text, want)
	}
	if text := e.completed(t, "read", map[string]any{"path": "in/b.go"}, &out); out.Path != "sub/b.go" || !strings.Contains(text, "func B") {
		t.Errorf("read through an inside symlink: %q %+v", text, out)
	}
	write(t, filepath.Join(e.root, "empty.txt"), "")
	if text := e.completed(t, "read", map[string]any{"path": "empty.txt"}, nil); !strings.Contains(text, "empty") {
		t.Errorf("empty file: %q", text)
	}
	for input, want := range map[string]string{
		`{"path": "bin.dat"}`:             "binary file",
		`{"path": "sub"}`:                 "is a directory",
		`{"path": "missing.txt"}`:         "does not exist",
		`{"path": "a.txt", "offset": 10}`: "past the end",
	} {
		if msg := e.failed(t, "read", json.RawMessage(input)); !strings.Contains(msg, want) {
			t.Errorf("read %s: %q, want it to say %q", input, msg, want)
		}
	}
}

func TestList(t *testing.T) {
	e := setup(t, allowAll(), nil)
	var out builtin.ListOutput
	text := e.completed(t, "list", map[string]any{}, &out)
	if want := "a.txt (17 bytes)\nbin.dat (6 bytes)\nin@\nout@\nsub/"; text != want {
		t.Errorf("list text %q, want %q", text, want)
	}
	if out.Path != "." || len(out.Entries) != 5 || out.Entries[4].Type != "dir" {
		t.Errorf("list output %+v", out)
	}
	e.completed(t, "list", map[string]any{"path": "sub/deep"}, &out)
	if out.Path != "sub/deep" || len(out.Entries) != 1 || out.Entries[0].Name != "c.go" {
		t.Errorf("list sub/deep: %+v", out)
	}
	if msg := e.failed(t, "list", map[string]any{"path": "a.txt"}); !strings.Contains(msg, "not a directory") {
		t.Errorf("list a file: %q", msg)
	}
}

func TestGlob(t *testing.T) {
	e := setup(t, allowAll(), nil)
	var out builtin.GlobOutput
	text := e.completed(t, "glob", map[string]any{"pattern": "**/*.go"}, &out)
	if text != "sub/b.go\nsub/deep/c.go" || out.Truncated {
		t.Errorf("glob: %q %+v", text, out)
	}
	e.completed(t, "glob", map[string]any{"pattern": "*.go", "path": "in/deep"}, &out)
	if !reflect.DeepEqual(out.Paths, []string{"sub/deep/c.go"}) || out.Pattern != "sub/deep/*.go" {
		t.Errorf("glob under a path: %+v", out)
	}
	text = e.completed(t, "glob", map[string]any{"pattern": "**", "limit": 2}, &out)
	if len(out.Paths) != 2 || !out.Truncated || !strings.Contains(text, "showing the first 2") {
		t.Errorf("limited glob: %q %+v", text, out)
	}
	text = e.completed(t, "glob", map[string]any{"pattern": "*.rs"}, &out)
	if len(out.Paths) != 0 || out.Paths == nil || !strings.Contains(text, "no paths match") {
		t.Errorf("empty glob: %q %+v", text, out)
	}
	if msg := e.failed(t, "glob", map[string]any{"pattern": "[x"}); !strings.Contains(msg, "bad pattern") {
		t.Errorf("bad glob: %q", msg)
	}
}

func TestGrep(t *testing.T) {
	e := setup(t, allowAll(), nil)
	var out builtin.GrepOutput
	text := e.completed(t, "grep", map[string]any{"pattern": "TODO"}, &out)
	if want := "sub/b.go:3: // TODO: b\nsub/deep/c.go:2: // TODO: c"; text != want {
		t.Errorf("grep text %q, want %q (binary files and the outside symlink skipped)", text, want)
	}
	e.completed(t, "grep", map[string]any{"pattern": "todo", "ignore_case": true, "include": "c.*"}, &out)
	if want := []fsys.Match{{Path: "sub/deep/c.go", Line: 2, Text: "// TODO: c"}}; !reflect.DeepEqual(out.Matches, want) {
		t.Errorf("grep include: %+v", out)
	}
	e.completed(t, "grep", map[string]any{"pattern": "TODO", "limit": 1}, &out)
	if len(out.Matches) != 1 || !out.Truncated {
		t.Errorf("grep limit: %+v", out)
	}
	e.completed(t, "grep", map[string]any{"pattern": "^package", "path": "sub/deep"}, &out)
	if len(out.Matches) != 1 || out.Matches[0].Path != "sub/deep/c.go" {
		t.Errorf("grep path: %+v", out)
	}
	if msg := e.failed(t, "grep", map[string]any{"pattern": "("}); !strings.Contains(msg, "invalid regular expression") {
		t.Errorf("bad regexp: %q", msg)
	}
	if msg := e.failed(t, "grep", map[string]any{"pattern": "x", "include": "["}); !strings.Contains(msg, "bad pattern") {
		t.Errorf("bad include: %q", msg)
	}
}

func TestPermissionRequests(t *testing.T) {
	asker := &recAsker{ans: permission.Answer{Reply: permission.Once}}
	e := setup(t, nil, asker)
	source := func(tool string) permission.Source {
		return permission.Source{Type: "tool", Tool: tool, MessageID: "msg_9", CallID: "call_3", ToolSource: "builtin"}
	}
	tests := []struct {
		tool  string
		input map[string]any
		want  permission.Request
	}{
		{"read", map[string]any{"path": "sub/deep/c.go"}, permission.Request{
			Action: "read", Resources: []string{"sub/deep/c.go"}, Save: []string{"sub/deep/*"},
			Metadata: map[string]any{"root": e.root},
		}},
		{"read", map[string]any{"path": "in/b.go"}, permission.Request{ // the resolved path
			Action: "read", Resources: []string{"sub/b.go"}, Save: []string{"sub/*"},
			Metadata: map[string]any{"root": e.root},
		}},
		{"read", map[string]any{"path": "a.txt"}, permission.Request{
			Action: "read", Resources: []string{"a.txt"}, Save: []string{"*"},
			Metadata: map[string]any{"root": e.root},
		}},
		{"list", map[string]any{"path": "sub"}, permission.Request{
			Action: "list", Resources: []string{"sub"}, Save: []string{"sub", "sub/*"},
			Metadata: map[string]any{"root": e.root},
		}},
		{"list", map[string]any{}, permission.Request{
			Action: "list", Resources: []string{"."}, Save: []string{"*"},
			Metadata: map[string]any{"root": e.root},
		}},
		{"glob", map[string]any{"pattern": "in/**/*.go"}, permission.Request{
			Action: "glob", Resources: []string{"sub/**/*.go"}, Save: []string{"sub/*"},
			Metadata: map[string]any{"root": e.root, "pattern": "in/**/*.go"},
		}},
		{"glob", map[string]any{"pattern": "**/*.go"}, permission.Request{
			Action: "glob", Resources: []string{"**/*.go"}, Save: []string{"*"},
			Metadata: map[string]any{"root": e.root, "pattern": "**/*.go"},
		}},
		{"grep", map[string]any{"pattern": "TODO", "path": "sub", "include": "*.go"}, permission.Request{
			Action: "grep", Resources: []string{"sub"}, Save: []string{"sub", "sub/*"},
			Metadata: map[string]any{"root": e.root, "pattern": "TODO", "include": "*.go"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			before := len(asker.asked())
			e.completed(t, tt.tool, tt.input, nil)
			reqs := asker.asked()[before:]
			tt.want.SessionID, tt.want.Agent, tt.want.Source = "ses_1", "build", source(tt.tool)
			if len(reqs) != 1 || !reflect.DeepEqual(reqs[0], tt.want) {
				t.Fatalf("asked %+v\nwant   %+v", reqs, tt.want)
			}
		})
	}
}

func TestReadHappensAfterTheAnswer(t *testing.T) {
	asker := &recAsker{ans: permission.Answer{Reply: permission.Once}}
	e := setup(t, nil, asker)
	asker.during = func(permission.Request) { write(t, filepath.Join(e.root, "a.txt"), "changed while asking\n") }
	if text := e.completed(t, "read", map[string]any{"path": "a.txt"}, nil); !strings.Contains(text, "changed while asking") {
		t.Fatalf("read %q: it read before permission was granted", text)
	}
}

func TestDeniedTouchesNothing(t *testing.T) {
	asker := &recAsker{ans: permission.Answer{Reply: permission.Once}}
	e := setup(t, []permission.Rule{
		{Action: "*", Resource: "*", Effect: permission.Allow},
		{Action: "grep", Resource: "*", Effect: permission.Deny},
		{Action: "read", Resource: "sub/*", Effect: permission.Deny},
		{Action: "list", Resource: "*", Effect: permission.Deny},
		{Action: "glob", Resource: "*", Effect: permission.Deny},
	}, asker)
	for _, c := range []struct {
		tool     string
		input    map[string]any
		resource string
	}{
		{"grep", map[string]any{"pattern": "TODO"}, `"."`},
		// A directory that does not exist: grep would fail with "does not exist" if
		// it walked before asserting.
		{"grep", map[string]any{"pattern": "TODO", "path": "nowhere"}, `"nowhere"`},
		{"read", map[string]any{"path": "in/b.go"}, `"sub/b.go"`},
		{"read", map[string]any{"path": "sub/missing.go"}, `"sub/missing.go"`},
		{"list", map[string]any{"path": "sub"}, `"sub"`},
		{"glob", map[string]any{"pattern": "**"}, `"**"`},
	} {
		s, err := e.call(t, c.tool, c.input)
		if err != nil || s.Outcome != registry.ToolFailed {
			t.Fatalf("%s %v = %+v, %v; want a tool failure", c.tool, c.input, s, err)
		}
		msg := s.Text()
		for _, want := range []string{"permission denied", `"` + c.tool + `"`, c.resource} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s %v: %q lacks %q", c.tool, c.input, msg, want)
			}
		}
		if strings.Contains(msg, ".toolhost/config.json") || !strings.Contains(s.Hint, ".toolhost/config.json") {
			t.Errorf("%s %v: the model sees %q, the runner %q; want the config only in the runner's hint", c.tool, c.input, msg, s.Hint)
		}
		if strings.Contains(msg, "TODO") || strings.Contains(msg, "package") || strings.Contains(msg, "does not exist") {
			t.Errorf("%s %v: a denied call revealed content: %q", c.tool, c.input, msg)
		}
	}
	if n := len(asker.asked()); n != 0 {
		t.Errorf("the asker was asked %d times for denied calls", n)
	}
}

func TestNobodyToAskIsADeny(t *testing.T) {
	e := setup(t, nil, nil)
	s, err := e.call(t, "read", map[string]any{"path": "a.txt"})
	if err != nil || s.Outcome != registry.ToolFailed {
		t.Fatalf("read without an asker = %+v, %v; want a tool failure", s, err)
	}
	if msg := s.Text(); !strings.Contains(msg, "no one to ask") || strings.Contains(msg, `"resource"`) {
		t.Errorf("read without an asker shows the model %q", msg)
	}
	if !strings.Contains(s.Hint, `"resource":"a.txt"`) {
		t.Errorf("read without an asker: runner hint %q lacks the rule", s.Hint)
	}
}

func TestRejections(t *testing.T) {
	t.Run("WithMessageIsAToolFailure", func(t *testing.T) {
		e := setup(t, nil, &recAsker{ans: permission.Answer{Reply: permission.Reject, Message: "not that file"}})
		if msg := e.failed(t, "read", map[string]any{"path": "a.txt"}); !strings.Contains(msg, "not that file") {
			t.Errorf("rejected read: %q", msg)
		}
	})
	t.Run("WithoutMessageIsAnInterruption", func(t *testing.T) {
		e := setup(t, nil, &recAsker{ans: permission.Answer{Reply: permission.Reject}})
		s, err := e.call(t, "read", map[string]any{"path": "a.txt"})
		if s != nil || !errors.Is(err, context.Canceled) || !errors.Is(err, permission.ErrDeclined) {
			t.Fatalf("declined read = %+v, %v; want no settlement and a decline", s, err)
		}
	})
}

func TestPathEscapesAreToolFailures(t *testing.T) {
	asker := &recAsker{ans: permission.Answer{Reply: permission.Once}}
	e := setup(t, allowAll(), asker)
	for _, c := range []struct {
		tool  string
		input map[string]any
	}{
		{"read", map[string]any{"path": "../outside/secret.txt"}},
		{"read", map[string]any{"path": filepath.Join(e.outside, "secret.txt")}},
		{"read", map[string]any{"path": "/etc/passwd"}},
		{"read", map[string]any{"path": "out/secret.txt"}},
		{"read", map[string]any{"path": "sub/../../outside/secret.txt"}},
		{"list", map[string]any{"path": ".."}},
		{"list", map[string]any{"path": "out"}},
		{"glob", map[string]any{"pattern": "../outside/*"}},
		{"glob", map[string]any{"pattern": "out/*"}},
		{"glob", map[string]any{"pattern": "*", "path": "out"}},
		{"glob", map[string]any{"pattern": filepath.Join(e.outside, "*")}},
		{"grep", map[string]any{"pattern": "TODO", "path": "out"}},
		{"grep", map[string]any{"pattern": "TODO", "path": "../outside"}},
	} {
		msg := e.failed(t, c.tool, c.input)
		if !strings.Contains(msg, "outside the workspace") || strings.Contains(msg, "TODO secret") {
			t.Errorf("%s %v: %q", c.tool, c.input, msg)
		}
	}
	if msg := e.failed(t, "read", map[string]any{"path": "a.txt\x00"}); !strings.Contains(msg, "NUL") {
		t.Errorf("NUL path: %q", msg)
	}
	if n := len(asker.asked()); n != 0 {
		t.Errorf("asked %d times about paths outside the root", n)
	}
}

func mkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestAlwaysCoversTheDirectory(t *testing.T) {
	asker := &recAsker{ans: permission.Answer{Reply: permission.Always}}
	e := setup(t, nil, asker)
	e.completed(t, "read", map[string]any{"path": "sub/b.go"}, nil)
	e.completed(t, "read", map[string]any{"path": "sub/deep/c.go"}, nil) // covered by "sub/*"
	if n := len(asker.asked()); n != 1 {
		t.Fatalf("asked %d times, want once", n)
	}
	e.completed(t, "read", map[string]any{"path": "a.txt"}, nil) // not covered
	if n := len(asker.asked()); n != 2 {
		t.Fatalf("asked %d times, want twice", n)
	}
}

func TestOverriddenBuiltinReappears(t *testing.T) {
	e := setup(t, allowAll(), nil)
	reg := e.reg
	release, err := reg.Register(registry.Batch{Location: "loc", Source: registry.Source{Kind: "plugin", Name: "p"}, Overrides: []string{"read"}, Tools: map[string]sdk.Tool{
		"read": sdk.NewTool("plugin read", func(context.Context, sdk.Invocation, builtin.ReadInput) (string, error) { return "from plugin", nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	settleRead := func() string {
		q, err := reg.Prepare("loc")
		if err != nil {
			t.Fatal(err)
		}
		s, err := q.Settle(t.Context(), registry.Call{Name: "read", Input: json.RawMessage(`{"path": "a.txt"}`), Invocation: inv})
		if err != nil {
			t.Fatal(err)
		}
		return s.Text()
	}
	if got := settleRead(); got != "from plugin" {
		t.Fatalf("overridden read = %q", got)
	}
	release()
	if got := settleRead(); !strings.Contains(got, "alpha") {
		t.Fatalf("after the plugin closed, read = %q; want the built-in", got)
	}
}

package location_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

var (
	// buildCache holds the plugins built for the tests.
	buildCache string
	// echoSource and echoBin are the test plugin's package directory and binary.
	echoSource, echoBin string
)

func TestMain(m *testing.M) {
	switch os.Getenv("LOCATION_HELPER") {
	case "host":
		helperHost()
	case "lock":
		helperLock()
	case "lockwriter":
		helperLockWriter()
	case "build":
		helperBuild()
	case "buildmodule":
		helperBuildModule()
	case "activate":
		helperActivate()
	}
	var err error
	buildCache, err = os.MkdirTemp("", "toolhost-location-test-")
	if err == nil {
		echoSource, err = filepath.Abs(filepath.Join("testdata", "plugins", "echo"))
	}
	if err == nil {
		echoBin, _, err = location.BuildPlugin(context.Background(), buildCache, "echo", echoSource)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build the test plugin:", err)
		os.RemoveAll(buildCache)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(buildCache)
		os.Exit(code)
	}))
}

// env is the harness's fixture: a registry, a root scope and activation options.
type env struct {
	reg  *registry.Registry
	root *scope.Scope
	opts location.Options
	logs *testio.SyncBuffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	reg := hosttest.Registry(t, registry.Options{})
	root := hosttest.Scope(t)
	logs := &testio.SyncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	return &env{reg: reg, root: root, logs: logs, opts: location.Options{
		Registry:   reg,
		Logger:     logger,
		BuildCache: buildCache,
		Env:        []string{},
		StateDir:   t.TempDir(),
	}}
}

func (e *env) activate(t *testing.T, dir string) *location.Location {
	t.Helper()
	l, err := location.Activate(t.Context(), e.root, dir, e.opts)
	if err != nil {
		t.Fatalf("activate: %v", err)
	}
	return l
}

// workspace makes a Location directory whose config is cfg (marshalled to JSON) and
// returns its canonical path.
func workspace(t *testing.T, cfg any) string {
	t.Helper()
	dir := canonicalDir(t, t.TempDir())
	setConfig(t, dir, cfg)
	return dir
}

func setConfig(t *testing.T, dir string, cfg any) {
	t.Helper()
	data, ok := cfg.(string)
	if !ok {
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		data = string(b)
	}
	file := filepath.Join(dir, location.ConfigPath)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

type obj = map[string]any

// allowAll is a permission rule list that lets every call through.
var allowAll = []obj{{"action": "*", "resource": "*", "effect": "allow"}}

func pluginsConfig(ps ...obj) obj { return obj{"plugins": ps, "permission": allowAll} }

func echoPlugin(name string) obj { return obj{"name": name, "path": echoBin} }

func names(defs []registry.Definition) []string {
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

type echoResult struct {
	Text      string `json:"text"`
	PID       int    `json:"pid"`
	PIDNS     string `json:"pid_ns"`
	Directory string `json:"directory"`
	Workspace string `json:"workspace_id"`
}

func callEcho(t *testing.T, l *location.Location, text string) echoResult {
	t.Helper()
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(obj{"text": text})
	s, err := q.Settle(t.Context(), registry.Call{Name: "echo", Input: in, Invocation: sdk.Invocation{ToolCallID: "call_1"}})
	if err != nil {
		t.Fatalf("settle echo: %v", err)
	}
	if s.Outcome != registry.Completed {
		t.Fatalf("settle echo: outcome %s: %s", s.Outcome, s.Text())
	}
	var out echoResult
	if err := json.Unmarshal(s.Structured, &out); err != nil {
		t.Fatalf("echo output %s: %v", s.Structured, err)
	}
	if out.PID == 1 && out.PIDNS != "" {
		out.PID = proctest.InitOf(out.PIDNS)
	}
	return out
}

func TestActivateRegistersPluginTools(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, pluginsConfig(echoPlugin("echo")))
	l := e.activate(t, dir)
	if l.ID() != dir {
		t.Errorf("ID() = %q, want %q", l.ID(), dir)
	}
	if got := l.Plugins(); len(got) != 1 || got[0].Name() != "echo" {
		t.Fatalf("Plugins() = %v", got)
	} else if st, err := got[0].State(); st != supervise.Running {
		t.Errorf("plugin state %s (%v), want running", st, err)
	}
	pids := proctest.Children(echoBin)
	if len(pids) != 1 {
		t.Fatalf("plugin processes %v, want one", pids)
	}

	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(q.Definitions()), []string{"echo", "glob", "grep", "list", "read", "wait"}; !slices.Equal(got, want) {
		t.Errorf("definitions %v, want %v", got, want)
	}
	out := callEcho(t, l, "hello")
	if out.Text != "hello" || out.PID != proctest.Program(pids[0]) || out.Directory != dir {
		t.Errorf("echo = %+v, want text hello from pid %d in %s", out, pids[0], dir)
	}

	if err := l.Close(t.Context()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := l.Close(t.Context()); err != nil {
		t.Errorf("second close: %v", err)
	}
	// Close cancels the scope's context first, so this holds from the moment Close
	// begins, not only once it has finished.
	if _, err := l.Prepare(); !errors.Is(err, location.ErrClosing) || !errors.Is(err, registry.ErrLocationNotOpen) {
		t.Errorf("Prepare after Close: %v, want ErrClosing (an ErrLocationNotOpen)", err)
	}
	if _, err := e.reg.Prepare(dir); !errors.Is(err, registry.ErrLocationNotOpen) {
		t.Errorf("registry Prepare after Close: %v, want ErrLocationNotOpen", err)
	}
	assertGone(t, pids)
}

func TestActivateCanonicalizesDirectory(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, pluginsConfig(echoPlugin("echo")))
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	l := e.activate(t, link+"/.")
	if l.ID() != dir {
		t.Errorf("ID() = %q, want the canonical %q", l.ID(), dir)
	}
	if out := callEcho(t, l, "x"); out.Directory != dir {
		t.Errorf("plugin saw directory %q, want %q", out.Directory, dir)
	}
}

func TestCloseInterruptsInFlightCalls(t *testing.T) {
	e := newEnv(t)
	l := e.activate(t, workspace(t, pluginsConfig(echoPlugin("echo"))))
	pids := proctest.Children(echoBin)
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	result := make(chan error, 1)
	go func() {
		_, err := q.Settle(t.Context(), registry.Call{Name: "wait", Progress: func(sdk.Progress) { once.Do(func() { close(started) }) }})
		result <- err
	}()
	select {
	case <-started:
	case err := <-result:
		t.Fatalf("wait returned before it was interrupted: %v", err)
	}
	if err := l.Close(t.Context()); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Errorf("in-flight call ended with %v, want an interruption (context.Canceled)", err)
	}
	assertGone(t, pids)
}

func TestLocationsAreIsolated(t *testing.T) {
	e := newEnv(t)
	a := e.activate(t, workspace(t, pluginsConfig(echoPlugin("echo"))))
	pidsA := proctest.Children(echoBin)
	b := e.activate(t, workspace(t, pluginsConfig(echoPlugin("echo"))))
	var pidsB []int
	for _, pid := range proctest.Children(echoBin) {
		if !slices.Contains(pidsA, pid) {
			pidsB = append(pidsB, pid)
		}
	}
	if len(pidsA) != 1 || len(pidsB) != 1 {
		t.Fatalf("processes A %v, B %v: want one each", pidsA, pidsB)
	}
	if out := callEcho(t, a, "a"); out.PID != proctest.Program(pidsA[0]) || out.Directory != a.ID() {
		t.Errorf("A served by %+v, want pid %d in %s", out, pidsA[0], a.ID())
	}
	if out := callEcho(t, b, "b"); out.PID != proctest.Program(pidsB[0]) || out.Directory != b.ID() {
		t.Errorf("B served by %+v, want pid %d in %s", out, pidsB[0], b.ID())
	}

	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	assertGone(t, pidsA)
	if !proctest.Running(pidsB[0]) {
		t.Fatal("closing A stopped B's plugin")
	}
	if out := callEcho(t, b, "still"); out.Text != "still" || out.PID != proctest.Program(pidsB[0]) {
		t.Errorf("B after closing A: %+v", out)
	}
	if _, err := a.Prepare(); !errors.Is(err, registry.ErrLocationNotOpen) {
		t.Errorf("Prepare on closed A: %v", err)
	}
}

func TestActivateSameDirectoryTwiceFails(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, pluginsConfig(echoPlugin("echo")))
	l := e.activate(t, dir)
	before := proctest.Children(echoBin)
	_, err := location.Activate(t.Context(), e.root, dir, e.opts)
	if !errors.Is(err, registry.ErrLocationOpen) {
		t.Fatalf("second activation: %v, want ErrLocationOpen", err)
	}
	if after := proctest.Children(echoBin); !slices.Equal(before, after) {
		t.Errorf("second activation changed the processes: %v → %v", before, after)
	}
	if out := callEcho(t, l, "first"); out.Text != "first" {
		t.Errorf("first activation after the refused second: %+v", out)
	}
}

func TestActivateDegrades(t *testing.T) {
	compileError := t.TempDir()
	writeFiles(t, compileError, map[string]string{
		"go.mod":  "module example.com/broken\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() { notDefined() }\n",
	})
	tests := []struct {
		name  string
		bad   []obj
		check func(t *testing.T, err error)
	}{
		{
			name: "MissingBinary",
			bad:  []obj{{"name": "ghost", "path": "/nonexistent/toolhost-plugin"}},
			check: func(t *testing.T, err error) {
				var serr *plugins.StartError
				if !errors.As(err, &serr) || serr.Plugin != "ghost" {
					t.Errorf("error %v: want a *plugins.StartError for ghost", err)
				}
			},
		},
		{
			name: "ChecksumMismatch",
			bad:  []obj{{"name": "pinned", "path": echoBin, "sha256": strings.Repeat("0", 64)}},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, plugins.ErrChecksum) {
					t.Errorf("error %v: want plugins.ErrChecksum", err)
				}
			},
		},
		{
			name: "CompileError",
			bad:  []obj{{"name": "broken", "source": compileError}},
			check: func(t *testing.T, err error) {
				var berr *location.BuildError
				if !errors.As(err, &berr) || berr.Plugin != "broken" || !strings.Contains(berr.Output, "notDefined") {
					t.Errorf("error %v: want a *location.BuildError for broken quoting the compiler", err)
				}
			},
		},
		{
			name: "EveryFailureNamed",
			bad: []obj{
				{"name": "ghost", "path": "/nonexistent/toolhost-plugin"},
				{"name": "pinned", "path": echoBin, "sha256": strings.Repeat("0", 64)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			dir := workspace(t, pluginsConfig(append([]obj{echoPlugin("good")}, tt.bad...)...))
			l, err := location.Activate(t.Context(), e.root, dir, e.opts)
			if err != nil {
				t.Fatalf("activation failed; a Location degrades: %v", err)
			}
			if out := callEcho(t, l, "served"); out.Text != "served" {
				t.Errorf("the good plugin does not serve: %+v", out)
			}
			var errs []error
			for _, b := range tt.bad {
				name := b["name"].(string)
				st := sourceErr(t, l, "plugin:"+name)
				if !strings.Contains(st.Err.Error(), strconv.Quote(name)) {
					t.Errorf("error does not name plugin %q:\n%v", name, st.Err)
				}
				errs = append(errs, st.Err)
			}
			if tt.check != nil {
				tt.check(t, errors.Join(errs...))
			}
			if err := l.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if pids := proctest.Children(echoBin); len(pids) != 0 {
				t.Errorf("plugin processes left running: %v", pids)
			}
			if _, err := e.reg.Prepare(dir); !errors.Is(err, registry.ErrLocationNotOpen) {
				t.Errorf("placement after close: %v, want ErrLocationNotOpen", err)
			}
		})
	}
}

// sourceErr waits until the source id reports an error while not running (retrying
// or failed) and returns its status.
func sourceErr(t *testing.T, l *location.Location, id string) location.SourceStatus {
	t.Helper()
	var found location.SourceStatus
	hosttest.UntilChanged(t, l.SourcesChanged, func() bool {
		for _, st := range l.Sources() {
			if st.ID == id && (st.State == supervise.Restarting || st.State == supervise.Failed) && st.Err != nil {
				found = st
				return true
			}
		}
		return false
	})
	return found
}

func TestActivateInvalidConfig(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, `{"plugins": [{"name": "x"}]}`)
	_, err := location.Activate(t.Context(), e.root, dir, e.opts)
	var cerr *location.ConfigError
	if !errors.As(err, &cerr) {
		t.Fatalf("error %v: want a *location.ConfigError", err)
	}
	file := filepath.Join(dir, location.ConfigPath)
	if cerr.File != file || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "/plugins/0") {
		t.Errorf("error does not name the file %s and the path /plugins/0:\n%v", file, err)
	}
	if _, err := e.reg.Prepare(dir); !errors.Is(err, registry.ErrLocationNotOpen) {
		t.Errorf("placement after invalid config: %v, want ErrLocationNotOpen", err)
	}
}

func TestActivateRefusesBadInput(t *testing.T) {
	tests := []struct {
		name string
		cfg  any
		env  []string
		want string
	}{
		{"BadReattach", pluginsConfig(echoPlugin("echo")), []string{"TOOLHOST_REATTACH={not json"}, "TOOLHOST_REATTACH"},
		{"OutputLimitsBelowMinimum", `{"tool_output": {"max_lines": 2}}`, nil, "/tool_output"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.opts.Env = tt.env
			dir := workspace(t, tt.cfg)
			_, err := location.Activate(t.Context(), e.root, dir, e.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v: want one naming %s", err, tt.want)
			}
			if pids := proctest.Children(echoBin); len(pids) != 0 {
				t.Errorf("plugin processes running: %v", pids)
			}
			if _, err := e.reg.Prepare(dir); !errors.Is(err, registry.ErrLocationNotOpen) {
				t.Errorf("placement: %v, want ErrLocationNotOpen", err)
			}
		})
	}
}

func TestActivateWithoutConfig(t *testing.T) {
	e := newEnv(t)
	l := e.activate(t, canonicalDir(t, t.TempDir()))
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	// Only the built-in tools, which every Location has.
	if got := strings.Join(names(q.Definitions()), ","); got != "glob,grep,list,read" {
		t.Errorf("definitions %s, want the built-ins only", got)
	}
}

func TestActivateBuildsSource(t *testing.T) {
	e := newEnv(t)
	// The cache usually holds this source's build already (TestMain), so nothing
	// compiles. Not always: the key covers every file of the module's packages the
	// source imports (test files and their imports too: 435 files here), so a file
	// made or changed there since TestMain (an edit or a merge while the tests run)
	// makes this activation build it again, under another key. The plugin is looked
	// for as the binary the Location built, not as echoBin.
	l := e.activate(t, workspace(t, pluginsConfig(obj{"name": "echo", "source": echoSource})))
	ps := l.Plugins()
	if len(ps) != 1 {
		t.Fatalf("Plugins() = %v, want the echo plugin", ps)
	}
	if st, err := ps[0].State(); st != supervise.Running {
		t.Fatalf("plugin state %s (%v), want running; logs:\n%s", st, err, e.logs.String())
	}
	bin := ps[0].Config().Path
	if filepath.Base(bin) != "echo" || filepath.Dir(filepath.Dir(bin)) != buildCache {
		t.Errorf("the plugin runs %s, want <build cache>/<key>/echo in %s", bin, buildCache)
	}
	if pids := proctest.Children(bin); len(pids) != 1 || proctest.Program(pids[0]) != ps[0].Current().PID() {
		t.Errorf("processes of the built binary %s: %v, want the plugin's (%d); this process's children: %v; logs:\n%s",
			bin, pids, ps[0].Current().PID(), childCommands(), e.logs.String())
	}
	if out := callEcho(t, l, "built"); out.Text != "built" {
		t.Errorf("echo: %+v", out)
	}
}

// childCommands describes this process's live children: pid, state and argv.
func childCommands() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: the fields after the last ')'.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, fmt.Sprintf("%s %s %q", e.Name(), f[0], strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")))
	}
	return out
}

func TestActivateStartsMCPServersAndManifestTools(t *testing.T) {
	script, _ := filepath.Abs("../mcp/testdata/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(script); serr != nil || err != nil {
		msg := "node or the pinned MCP servers are missing; install them with: npm ci --prefix mcp/testdata/node"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	path := filepath.Dir(node) + ":/usr/bin:/bin"
	e := newEnv(t)
	dir := workspace(t, obj{
		"mcp_servers": []obj{{"name": "everything", "command": "node", "args": []string{script}, "env": obj{"PATH": path}}},
		"tools": []obj{{"name": "shout", "description": "Upper-cases stdin.", "input_schema": obj{"type": "object"},
			"command": []string{"sh", "-c", "tr a-z A-Z"}, "env": obj{"PATH": path}}},
		"permission": []obj{
			{"action": "*", "resource": "*", "effect": "allow"},
			{"action": "everything_get-sum", "resource": "*", "effect": "deny"},
		},
	})
	l := e.activate(t, dir)
	// Every tool, the denied one included: its call is what is checked.
	q, err := l.Prepare(registry.OfferAll())
	if err != nil {
		t.Fatal(err)
	}
	got := names(q.Definitions())
	for _, want := range []string{"everything_echo", "everything_get-sum", "shout", "read"} {
		if !slices.Contains(got, want) {
			t.Fatalf("definitions %v lack %s", got, want)
		}
	}
	settle := func(name, input string) *registry.Settlement {
		s, err := q.Settle(t.Context(), registry.Call{Name: name, Input: json.RawMessage(input)})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return s
	}
	if s := settle("everything_echo", `{"message":"hi"}`); s.Outcome != registry.Completed || !strings.Contains(s.Text(), "hi") {
		t.Fatalf("mcp echo: %s %q", s.Outcome, s.Text())
	}
	if s := settle("shout", `{"a":"b"}`); s.Outcome != registry.Completed || !strings.Contains(s.Text(), `{"A":"B"}`) {
		t.Fatalf("manifest tool: %s %q", s.Outcome, s.Text())
	}
	// MCP tools are untrusted: the host asserts permission before each call.
	if s := settle("everything_get-sum", `{"a":1,"b":2}`); s.Outcome != registry.ToolFailed {
		t.Fatalf("denied MCP tool: %s %q, want a tool failure", s.Outcome, s.Text())
	}
	pids := l.MCPServers()[0].Current().PID()
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	assertGone(t, []int{pids})
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildPlugin(t *testing.T) {
	mod := t.TempDir()
	writeFiles(t, mod, map[string]string{
		"go.mod":              "module example.com/tiny\n\ngo 1.26\n",
		"lib/lib.go":          "package lib\n\nconst Greeting = \"one\"\n",
		"cmd/tiny/main.go":    "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/tiny/lib\"\n)\n\nfunc main() { fmt.Print(lib.Greeting) }\n",
		"unrelated/x.go":      "package unrelated\n",
		"cmd/tiny/.hidden/x":  "a",
		"cmd/tiny/testdata/x": "a",
	})
	src := filepath.Join(mod, "cmd", "tiny")
	cache := t.TempDir()
	build := func(wantBuilt bool, wantOutput string) string {
		t.Helper()
		path, built, err := location.BuildPlugin(t.Context(), cache, "tiny", src)
		if err != nil {
			t.Fatal(err)
		}
		if built != wantBuilt {
			t.Errorf("built = %v, want %v", built, wantBuilt)
		}
		if filepath.Base(path) != "tiny" || !strings.HasPrefix(path, cache+string(filepath.Separator)) {
			t.Errorf("binary %s is not <cache>/<key>/tiny", path)
		}
		out, err := exec.Command(path).Output()
		if err != nil || string(out) != wantOutput {
			t.Errorf("binary printed %q (%v), want %q", out, err, wantOutput)
		}
		return path
	}

	first := build(true, "one")
	if again := build(false, "one"); again != first {
		t.Errorf("cached path %s, want %s", again, first)
	}
	// Files the build never reads do not invalidate the cache.
	writeFiles(t, mod, map[string]string{
		"cmd/tiny/.hidden/x":  "b",
		"cmd/tiny/testdata/x": "b",
		"unrelated/x.go":      "package unrelated\n\nvar X = 1\n",
	})
	build(false, "one")

	writeFiles(t, mod, map[string]string{"cmd/tiny/main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/tiny/lib\"\n)\n\nfunc main() { fmt.Print(lib.Greeting + \"!\") }\n"})
	second := build(true, "one!")
	if second == first {
		t.Error("a changed source reused the old binary's path")
	}
	// A package of the same module outside the source directory is part of the key.
	writeFiles(t, mod, map[string]string{"lib/lib.go": "package lib\n\nconst Greeting = \"two\"\n"})
	build(true, "two!")

	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary build directory %s left in the cache", e.Name())
		}
	}
}

// TestBuildPluginLinksStatically: a plugin that uses the network and user lookups
// but no cgo of its own is built without a C library (no program interpreter in
// its ELF headers), so it starts without the dynamic loader; GOFLAGS's own tags
// still apply; a plugin with cgo of its own still builds with it.
func TestBuildPluginLinksStatically(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"go.mod": "module example.com/netty\n\ngo 1.26\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\t\"net\"\n\t\"os/user\"\n)\n\n" +
			"func main() { _, _ = user.Current(); fmt.Print(net.ParseIP(\"127.0.0.1\").IsLoopback(), extra) }\n",
		"extra.go":    "//go:build !mytag\n\npackage main\n\nconst extra = \" without mytag\"\n",
		"extra_on.go": "//go:build mytag\n\npackage main\n\nconst extra = \" with mytag\"\n",
	})
	cache := t.TempDir()
	build := func(want string) string {
		t.Helper()
		path, _, err := location.BuildPlugin(t.Context(), cache, "netty", src)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(path).Output(); err != nil || string(out) != want {
			t.Fatalf("binary printed %q (%v), want %q", out, err, want)
		}
		return path
	}
	if path := build("true without mytag"); interpreter(t, path) != "" {
		t.Errorf("%s is linked dynamically (interpreter %s); want a static binary", path, interpreter(t, path))
	}
	t.Setenv("GOFLAGS", "-tags=mytag")
	if path := build("true with mytag"); interpreter(t, path) != "" {
		t.Errorf("with GOFLAGS tags, %s is linked dynamically", path)
	}

	if _, err := exec.LookPath("gcc"); err != nil {
		t.Log("no C compiler here: the cgo plugin is not built")
		return
	}
	t.Setenv("GOFLAGS", "")
	t.Setenv("CGO_ENABLED", "1")
	csrc := t.TempDir()
	writeFiles(t, csrc, map[string]string{
		"go.mod":  "module example.com/cgo\n\ngo 1.26\n",
		"main.go": "package main\n\n// static int answer(void) { return 42; }\nimport \"C\"\n\nimport \"fmt\"\n\nfunc main() { fmt.Print(int(C.answer())) }\n",
	})
	path, _, err := location.BuildPlugin(t.Context(), cache, "cgo", csrc)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(path).Output(); err != nil || string(out) != "42" {
		t.Fatalf("cgo binary printed %q (%v), want 42", out, err)
	}
}

// interpreter is the program interpreter an ELF binary names ("" for a static one).
func interpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			data, _ := io.ReadAll(p.Open())
			return strings.TrimRight(string(data), "\x00")
		}
	}
	return ""
}

func TestBuildPluginCompileError(t *testing.T) {
	src := t.TempDir()
	writeFiles(t, src, map[string]string{
		"go.mod":  "module example.com/broken\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() {\n\tnotDefined()\n}\n",
	})
	cache := t.TempDir()
	_, _, err := location.BuildPlugin(t.Context(), cache, "broken", src)
	var berr *location.BuildError
	if !errors.As(err, &berr) {
		t.Fatalf("error %v: want a *location.BuildError", err)
	}
	if berr.Plugin != "broken" || berr.Source != src {
		t.Errorf("BuildError names plugin %q source %q", berr.Plugin, berr.Source)
	}
	if !strings.Contains(berr.Output, "undefined: notDefined") || !strings.Contains(err.Error(), "undefined: notDefined") {
		t.Errorf("error does not quote the compiler:\n%v", err)
	}
	if !strings.Contains(err.Error(), `"broken"`) {
		t.Errorf("error does not name the plugin:\n%v", err)
	}
}

func TestBuildPluginSourcesChangedDuringBuild(t *testing.T) {
	mod := t.TempDir()
	program := func(word string) map[string]string {
		return map[string]string{"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Print(\"" + word + "\") }\n"}
	}
	writeFiles(t, mod, map[string]string{"go.mod": "module example.com/tiny\n\ngo 1.26\n"})
	writeFiles(t, mod, program("one"))
	cache := t.TempDir()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := location.BuildPlugin(t.Context(), cache, "tiny", mod)
		done <- err
	}()
	// Edit the source while the go command builds it.
	proctest.Until(t, func() bool { return goBuildRunning(goCmd) })
	writeFiles(t, mod, program("two"))
	if err := <-done; !errors.Is(err, location.ErrSourcesChanged) {
		t.Fatalf("build during an edit: %v; want ErrSourcesChanged", err)
	}
	// Nothing was cached under the key of "one": going back to it builds it again,
	// and the binary says "one" (a cached binary of "two" under that key would not).
	for _, word := range []string{"two", "one"} {
		writeFiles(t, mod, program(word))
		path, built, err := location.BuildPlugin(t.Context(), cache, "tiny", mod)
		if err != nil || !built {
			t.Fatalf("%s: built %v, %v", word, built, err)
		}
		if out, err := exec.Command(path).Output(); err != nil || string(out) != word {
			t.Fatalf("%s: binary printed %q, %v", word, out, err)
		}
	}
}

// goBuildRunning reports whether a child of this process runs goCmd build.
func goBuildRunning(goCmd string) bool {
	for _, pid := range proctest.Children(goCmd) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := bytes.Split(cmdline, []byte{0}); len(args) > 1 && string(args[1]) == "build" {
			return true
		}
	}
	return false
}

func TestBuildPluginRefusesBadArguments(t *testing.T) {
	tests := []struct {
		name, cache, binary, src string
	}{
		{"NameWithSlash", t.TempDir(), "a/b", echoSource},
		{"EmptyName", t.TempDir(), "", echoSource},
		{"NoCache", "", "echo", echoSource},
		{"MissingSource", t.TempDir(), "echo", filepath.Join(t.TempDir(), "missing")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := location.BuildPlugin(t.Context(), tt.cache, tt.binary, tt.src); err == nil {
				t.Error("BuildPlugin succeeded")
			}
		})
	}
}

func TestActivateReattachesDebugPlugin(t *testing.T) {
	cmd := exec.Command(echoBin, "-debug")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	before := goleak.IgnoreCurrent()
	// The plugin prints: TOOLHOST_REATTACH='{"echo":{...}}'
	var out []byte
	for !bytes.Contains(out, []byte("}}'")) {
		chunk := make([]byte, 1024)
		n, err := stdout.Read(chunk)
		if err != nil {
			t.Fatalf("read the reattach line: %v (got %q)", err, out)
		}
		out = append(out, chunk[:n]...)
	}
	_, value, _ := strings.Cut(string(out), "TOOLHOST_REATTACH='")
	value, _, _ = strings.Cut(value, "'")

	e := newEnv(t)
	e.opts.Env = []string{"TOOLHOST_REATTACH=" + value}
	// The path is never launched: the host attaches to the running process.
	l := e.activate(t, workspace(t, pluginsConfig(obj{"name": "echo", "path": "/nonexistent/echo"})))
	if out := callEcho(t, l, "attached"); out.PID != cmd.Process.Pid {
		t.Errorf("echo served by pid %d, want the debug process %d", out.PID, cmd.Process.Pid)
	}
	if pids := proctest.Children(echoBin); len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Errorf("plugin processes %v: want only the debug process %d", pids, cmd.Process.Pid)
	}
	if err := l.Close(t.Context()); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The host does not own a reattached process: deactivation only disconnects.
	select {
	case <-exited:
		t.Error("deactivation stopped the debug plugin the host does not own")
	default:
	}
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left after detaching from the plugin: %v", err)
	}

	t.Run("UnmatchedNameIsReported", func(t *testing.T) {
		e := newEnv(t)
		e.opts.Env = []string{"TOOLHOST_REATTACH=" + strings.Replace(value, `"echo"`, `"ecko"`, 1)}
		l := e.activate(t, workspace(t, pluginsConfig(echoPlugin("echo"))))
		defer l.Close(t.Context())
		if logs := e.logs.String(); !strings.Contains(logs, `TOOLHOST_REATTACH names plugin "ecko"`) || !strings.Contains(logs, `["echo"]`) {
			t.Errorf("logs %q: want a warning naming the unmatched entry and the Location's plugins", logs)
		}
		if out := callEcho(t, l, "own copy"); out.PID == cmd.Process.Pid {
			t.Errorf("the unmatched entry attached to the debug process")
		}
	})
}

func assertGone(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if proctest.Running(pid) {
			t.Errorf("plugin process %d still exists", pid)
		}
	}
}

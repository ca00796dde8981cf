package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
)

var (
	// pluginBin is the test plugin (testdata/plugin), built once.
	pluginBin string
	// outputDir is the managed storage the commands use (TOOLHOST_OUTPUT_DIR).
	outputDir string
)

// mainEnv set in its environment makes the test binary run as the toolhost
// command (cli.Main) with its arguments (see startHost).
const mainEnv = "TOOLHOST_CLI_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		cli.Main() // the test binary as the toolhost command (see startHost)
	}
	tmp, err := os.MkdirTemp("", "toolhost-cli-test-")
	if err == nil {
		outputDir = filepath.Join(tmp, "tool-output")
		err = os.Setenv("TOOLHOST_OUTPUT_DIR", outputDir)
	}
	if err == nil {
		var src string
		if src, err = filepath.Abs(filepath.Join("testdata", "plugin")); err == nil {
			pluginBin, _, err = location.BuildPlugin(context.Background(), filepath.Join(tmp, "build"), "plugin", src)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(tmp)
		os.Exit(code)
	}))
}

// workspace makes a Location whose config is data ("" means one plugin, "test", that
// runs the test plugin) and returns its canonical directory.
func workspace(t *testing.T, data string) string {
	t.Helper()
	if data == "" {
		data = fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, pluginBin)
	}
	dir, err := location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, location.ConfigPath)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs the command in-process and checks that it left no plugin process behind.
func run(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runContext(t, t.Context(), stdin, nil, args...)
}

func runContext(t *testing.T, ctx context.Context, stdin string, stderr *watchWriter, args ...string) result {
	t.Helper()
	if stderr == nil {
		stderr = &watchWriter{}
	}
	var stdout bytes.Buffer
	code := cli.Run(ctx, args, strings.NewReader(stdin), &stdout, stderr)
	if pids := proctest.Children(pluginBin); len(pids) != 0 {
		t.Errorf("plugin processes left running after %q: %v", args, pids)
	}
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func (r result) want(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

// watchWriter is a stderr that can tell when something has been written to it.
type watchWriter struct {
	mu      sync.Mutex
	b       bytes.Buffer
	pattern string
	seen    chan struct{}
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if w.seen != nil && strings.Contains(w.b.String(), w.pattern) {
		close(w.seen)
		w.seen = nil
	}
	return n, err
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// allTools are the test plugin's tools and the built-ins every Location has.
var allTools = []string{"big", "block", "confirm", "echo", "fail", "glob", "grep", "list", "picture", "progress", "read", "stuck"}

func TestTools(t *testing.T) {
	dir := workspace(t, "")
	r := run(t, "", "tools", "--location", dir)
	r.want(t, cli.ExitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 1+len(allTools) || !strings.HasPrefix(lines[0], "NAME") {
		t.Fatalf("want a header and one line per tool:\n%s", r.stdout)
	}
	for i, name := range allTools {
		if fields := strings.Fields(lines[i+1]); len(fields) == 0 || fields[0] != name {
			t.Errorf("line %d is %q, want tool %s", i+1, lines[i+1], name)
		}
	}
	if !strings.Contains(r.stdout, "Echo the text back.") || strings.Contains(r.stdout, "second line") {
		t.Errorf("want the first line of each description only:\n%s", r.stdout)
	}
	if r.stderr != "" {
		t.Errorf("stderr is not empty:\n%s", r.stderr)
	}
}

func TestToolsJSON(t *testing.T) {
	dir := workspace(t, "")
	r := run(t, "", "tools", "--json", "--location", dir)
	r.want(t, cli.ExitOK)
	var got struct {
		Location string                `json:"location"`
		Tools    []registry.Definition `json:"tools"`
	}
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decode %s: %v", r.stdout, err)
	}
	if got.Location != dir {
		t.Errorf("location %q, want %q", got.Location, dir)
	}
	var names []string
	for _, d := range got.Tools {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, allTools) {
		t.Errorf("tools %v, want %v", names, allTools)
	}
	echo := got.Tools[slices.Index(names, "echo")]
	if !strings.Contains(string(echo.InputSchema), `"text"`) || len(echo.OutputSchema) == 0 ||
		echo.Description != "Echo the text back.\nThe second line is not shown in listings." {
		t.Errorf("echo definition %+v", echo)
	}
	// The title and annotations toolhost mcp passes on are in the listing too.
	if echo.Title != "Echo" || echo.Annotations == nil || !echo.Annotations.ReadOnlyHint || echo.Annotations.OpenWorldHint == nil || *echo.Annotations.OpenWorldHint ||
		!strings.Contains(r.stdout, `"title": "Echo"`) || !strings.Contains(r.stdout, `"readOnlyHint": true`) {
		t.Errorf("echo title %q, annotations %+v; want them listed:\n%s", echo.Title, echo.Annotations, r.stdout)
	}
}

func TestToolsEmptyLocation(t *testing.T) {
	r := run(t, "", "tools", "--location", t.TempDir(), "--json")
	r.want(t, cli.ExitOK)
	var got struct {
		Tools []registry.Definition `json:"tools"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range got.Tools {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "glob,grep,list,read" {
		t.Errorf("want the built-ins only:\n%s", r.stdout)
	}
}

func TestCall(t *testing.T) {
	dir := workspace(t, "")
	tests := []struct {
		name       string
		stdin      string
		args       []string
		code       int
		stdout     []string // substrings of stdout
		stderr     []string // substrings of stderr
		notStdout  []string
		checkFiles bool
	}{
		{
			// The human form shows the content only; the structured output (here
			// the ids the plugin saw) is in --json.
			name:   "Completed",
			args:   []string{"echo", `{"text": "hi"}`},
			code:   cli.ExitOK,
			stdout: []string{"echo: hi\n"},
		},
		{
			name:   "CompletedJSONHasStructured",
			args:   []string{"--json", "echo", `{"text": "hi"}`},
			code:   cli.ExitOK,
			stdout: []string{`"text": "hi"`, `"agent": "toolhost"`, `"call": "call_`},
		},
		{
			name:   "NoInputMeansEmptyObject",
			args:   []string{"progress"},
			code:   cli.ExitOK,
			stdout: []string{"done\n"},
		},
		{
			name:   "InvocationFromFlags",
			args:   []string{"--json", "--agent", "reviewer", "--call-id", "c42", "--session", "s1", "--message", "m1", "echo", `{"text": "x"}`},
			code:   cli.ExitOK,
			stdout: []string{`"agent": "reviewer"`, `"call": "c42"`},
		},
		{
			name:   "Stdin",
			stdin:  `{"text": "from stdin"}`,
			args:   []string{"echo", "-"},
			code:   cli.ExitOK,
			stdout: []string{"echo: from stdin\n"},
		},
		{
			name:   "Progress",
			args:   []string{"progress"},
			code:   cli.ExitOK,
			stderr: []string{"progress: 1/3 step\nprogress: 2/3 step\nprogress: 3/3 step\n"},
		},
		{
			name:   "Media",
			args:   []string{"picture"},
			code:   cli.ExitOK,
			stdout: []string{"a picture:\n[media image/png, 4 bytes]\n"},
		},
		{
			name:       "ManagedOutput",
			args:       []string{"big"},
			code:       cli.ExitOK,
			stdout:     []string{"full output: " + outputDir + string(filepath.Separator)},
			checkFiles: true,
		},
		{
			name:   "ToolFailure",
			args:   []string{"fail"},
			code:   cli.ExitToolError,
			stdout: []string{`tool_failure: the file "missing.txt" does not exist`},
		},
		{
			name:   "UnknownTool",
			args:   []string{"nope"},
			code:   cli.ExitToolError,
			stdout: []string{`unknown: unknown tool "nope"`},
		},
		{
			name:   "InvalidJSON",
			args:   []string{"echo", `{"text": `},
			code:   cli.ExitToolError,
			stdout: []string{"invalid_input: ", "not valid JSON"},
		},
		{
			name:   "InvalidInput",
			args:   []string{"echo", `{"txt": 1}`},
			code:   cli.ExitToolError,
			stdout: []string{"invalid_input: ", "missing property 'text'", "received keys: txt"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, tt.stdin, append([]string{"call", "--location", dir}, tt.args...)...)
			r.want(t, tt.code)
			for _, s := range tt.stdout {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout does not contain %q:\n%s", s, r.stdout)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not contain %q:\n%s", s, r.stderr)
				}
			}
			if tt.checkFiles {
				_, path, _ := strings.Cut(r.stdout, "full output: ")
				path = strings.TrimSpace(path)
				if data, err := os.ReadFile(path); err != nil || string(data) != strings.Repeat("line\n", 5000) {
					t.Errorf("managed file %s does not hold the complete output (%d bytes, %v)", path, len(data), err)
				}
			}
		})
	}
}

func TestCallJSON(t *testing.T) {
	dir := workspace(t, "")
	tests := []struct {
		name    string
		args    []string
		code    int
		outcome registry.Outcome
		check   func(t *testing.T, s registry.Settlement)
	}{
		{
			name:    "Completed",
			args:    []string{"echo", `{"text": "hi"}`, "--call-id", "c1"}, // flags after the arguments
			code:    cli.ExitOK,
			outcome: registry.Completed,
			check: func(t *testing.T, s registry.Settlement) {
				if s.Name != "echo" || s.ToolCallID != "c1" || s.Text() != "echo: hi" {
					t.Errorf("settlement %+v", s)
				}
				var out struct{ Text, Call string }
				if err := json.Unmarshal(s.Structured, &out); err != nil || out.Text != "hi" || out.Call != "c1" {
					t.Errorf("structured %s: %v", s.Structured, err)
				}
			},
		},
		{
			name:    "Media",
			args:    []string{"picture"},
			code:    cli.ExitOK,
			outcome: registry.Completed,
			check: func(t *testing.T, s registry.Settlement) {
				if len(s.Content) != 2 || s.Content[1].MIMEType != "image/png" || string(s.Content[1].Data) != "\x89PNG" {
					t.Errorf("content %+v", s.Content)
				}
			},
		},
		{
			name:    "ManagedPaths",
			args:    []string{"big"},
			code:    cli.ExitOK,
			outcome: registry.Completed,
			check: func(t *testing.T, s registry.Settlement) {
				if len(s.ManagedPaths) != 1 || !strings.HasPrefix(s.ManagedPaths[0], outputDir) {
					t.Errorf("managed paths %v", s.ManagedPaths)
				}
			},
		},
		{
			name:    "ToolFailure",
			args:    []string{"fail"},
			code:    cli.ExitToolError,
			outcome: registry.ToolFailed,
		},
		{
			name:    "InvalidInputProblems",
			args:    []string{"echo", `{"txt": 1}`},
			code:    cli.ExitToolError,
			outcome: registry.InvalidInput,
			check: func(t *testing.T, s registry.Settlement) {
				if len(s.Problems) == 0 {
					t.Error("no problems listed")
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, "", append([]string{"call", "--json", "--location", dir}, tt.args...)...)
			r.want(t, tt.code)
			var s registry.Settlement
			dec := json.NewDecoder(strings.NewReader(r.stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&s); err != nil {
				t.Fatalf("decode %s: %v", r.stdout, err)
			}
			if s.Outcome != tt.outcome {
				t.Errorf("outcome %q, want %q", s.Outcome, tt.outcome)
			}
			if !strings.HasPrefix(s.ToolCallID, "c") {
				t.Errorf("tool_call_id %q", s.ToolCallID)
			}
			if tt.check != nil {
				tt.check(t, s)
			}
		})
	}
}

func TestCallInterrupted(t *testing.T) {
	dir := workspace(t, "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stderr := &watchWriter{pattern: "progress: 0 blocking", seen: make(chan struct{})}
	seen := stderr.seen
	go func() {
		<-seen
		cancel()
	}()
	r := runContext(t, ctx, "", stderr, "call", "--location", dir, "block")
	r.want(t, cli.ExitInterrupted)
	if !strings.Contains(r.stderr, "interrupted\n") {
		t.Errorf("stderr does not say interrupted:\n%s", r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("an interruption printed a settlement:\n%s", r.stdout)
	}
}

func TestPluginThatDoesNotStartIsReported(t *testing.T) {
	missing := workspace(t, `{"plugins": [{"name": "ghost", "path": "/nonexistent/toolhost-plugin"}]}`)
	r := run(t, "", "tools", "--location", missing)
	r.want(t, cli.ExitPartial)
	for _, want := range []string{"read", "plugin:ghost: restarting", "/nonexistent/toolhost-plugin"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout does not contain %q:\n%s", want, r.stdout)
		}
	}
}

func TestOperationalFailures(t *testing.T) {
	invalid := workspace(t, `{"plugins": [{"name": "x"}]}`)
	tests := []struct {
		name   string
		args   []string
		stderr []string
	}{
		{"InvalidConfigTools", []string{"tools", "--location", invalid}, []string{filepath.Join(invalid, location.ConfigPath), "/plugins/0"}},
		{"InvalidConfigCall", []string{"call", "--location", invalid, "echo"}, []string{filepath.Join(invalid, location.ConfigPath), "/plugins/0"}},
		{"NoSuchLocation", []string{"tools", "--location", filepath.Join(t.TempDir(), "missing")}, []string{"missing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, "", tt.args...)
			r.want(t, cli.ExitFailure)
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr does not contain %q:\n%s", s, r.stderr)
				}
			}
			if r.stdout != "" {
				t.Errorf("stdout is not empty:\n%s", r.stdout)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"NoCommand", nil, "usage: toolhost"},
		{"UnknownCommand", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"ToolsWithoutLocation", []string{"tools"}, "missing --location"},
		{"ToolsExtraArgument", []string{"tools", "--location", dir, "extra"}, "unexpected arguments"},
		{"CallWithoutLocation", []string{"call", "echo"}, "missing --location"},
		{"CallWithoutName", []string{"call", "--location", dir}, "missing the tool NAME"},
		{"CallTooManyArguments", []string{"call", "--location", dir, "echo", "{}", "more"}, "unexpected arguments"},
		{"UnknownFlag", []string{"call", "--location", dir, "--frob", "echo"}, "flag provided but not defined: -frob"},
		{"VersionWithArguments", []string{"version", "x"}, "unexpected arguments"},
		{"HelpUnknownCommand", []string{"help", "frobnicate"}, `unknown command "frobnicate"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, "", tt.args...)
			r.want(t, cli.ExitUsage)
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr does not contain %q:\n%s", tt.want, r.stderr)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "exit status:"},
		{[]string{"--help"}, "exit status:"},
		{[]string{"help", "call"}, "usage: toolhost call"},
		{[]string{"help", "tools"}, "usage: toolhost tools"},
		{[]string{"call", "-h"}, "usage: toolhost call"},
		{[]string{"tools", "--help"}, "usage: toolhost tools"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			r := run(t, "", tt.args...)
			r.want(t, cli.ExitOK)
			if !strings.Contains(r.stdout+r.stderr, tt.want) {
				t.Errorf("help does not contain %q:\n%s%s", tt.want, r.stdout, r.stderr)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	r := run(t, "", "version")
	r.want(t, cli.ExitOK)
	if !strings.HasPrefix(r.stdout, "toolhost ") || len(strings.TrimSpace(r.stdout)) <= len("toolhost ") {
		t.Errorf("version printed %q", r.stdout)
	}
}

func TestToolsProvider(t *testing.T) {
	dir := workspace(t, `{"tools": [{"name": "either", "description": "Takes one of two shapes.",
		"input_schema": {"anyOf": [{"type": "object"}, {"type": "string"}]}, "command": ["/bin/true"]}]}`)
	r := run(t, "", "tools", "--location", dir, "--provider", "anthropic")
	r.want(t, cli.ExitToolError)
	if !strings.Contains(r.stdout, "either: not compatible with anthropic") {
		t.Fatalf("want the incompatible tool named:\n%s", r.stdout)
	}
	r = run(t, "", "tools", "--location", dir, "--provider", "anthropic", "--json")
	r.want(t, cli.ExitToolError)
	var got struct {
		Problems map[string][]struct{ Pointer, Message string } `json:"problems"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got.Problems["either"]) == 0 || len(got.Problems) != 1 {
		t.Fatalf("problems %+v (%v):\n%s", got.Problems, err, r.stdout)
	}
	run(t, "", "tools", "--location", dir, "--provider", "bard").want(t, cli.ExitUsage)
}

func TestToolOfASourceThatDoesNotServeIsUnavailable(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"go.mod": "module broken\n\ngo 1.26\n", "main.go": "package main\n\nfunc main() { undefinedCall() }\n"} {
		if err := os.WriteFile(filepath.Join(broken, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, config string
		want         []string
	}{
		{"Failed", fmt.Sprintf(`{"plugins": [{"name": "conv", "source": %q}]}`, broken),
			[]string{`no running source serves "convert"`, "plugin:conv: failed", "undefinedCall"}},
		{"Restarting", `{"plugins": [{"name": "ghost", "path": "/nonexistent/toolhost-plugin"}]}`,
			[]string{"plugin:ghost: restarting", "/nonexistent/toolhost-plugin"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TOOLHOST_BUILD_CACHE", filepath.Join(t.TempDir(), "build"))
			dir := workspace(t, tt.config)
			r := run(t, "", "call", "--location", dir, "convert")
			r.want(t, cli.ExitFailure)
			for _, want := range append([]string{"unavailable: "}, tt.want...) {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout does not contain %q:\n%s", want, r.stdout)
				}
			}
			r = run(t, "", "call", "--location", dir, "--json", "convert")
			r.want(t, cli.ExitFailure)
			var s struct{ Outcome string }
			if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || s.Outcome != "unavailable" {
				t.Errorf("--json printed outcome %q (%v):\n%s", s.Outcome, err, r.stdout)
			}
		})
	}
	t.Run("NotAnMCPServersName", func(t *testing.T) {
		// Only a plugin could hold any name; a server that does not serve holds only its own.
		dir := workspace(t, `{"mcp_servers": [{"name": "srv", "command": "/nonexistent/server"}]}`)
		r := run(t, "", "call", "--location", dir, "convert")
		r.want(t, cli.ExitToolError)
		if !strings.Contains(r.stdout, `unknown: unknown tool "convert"`) {
			t.Errorf("stdout:\n%s", r.stdout)
		}
		r = run(t, "", "call", "--location", dir, "srv_convert")
		r.want(t, cli.ExitFailure)
		if !strings.Contains(r.stdout, "mcp:srv: ") {
			t.Errorf("stdout does not name the server:\n%s", r.stdout)
		}
	})
}

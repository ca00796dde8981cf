package location_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/supervise"
)

func TestImportMCPConfigsValid(t *testing.T) {
	dir := canonicalDir(t, filepath.Join("testdata", "mcpimport", "valid"))
	cfg, err := location.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]location.MCPServerConfig{}
	var order []string
	for _, m := range cfg.MCPServers {
		byName[m.Name] = m
		order = append(order, m.Name)
	}
	if got := strings.Join(order, " "); got != "api fs linear legacy github_com_tool" {
		t.Fatalf("servers %q", got)
	}
	if o := byName["linear"].Origin; o != filepath.Join(dir, ".mcp.json")+" at /mcpServers/linear" {
		t.Errorf("origin %q", o)
	}
	if byName["legacy"].Transport != mcp.TransportSSE || byName["linear"].Transport != mcp.TransportAuto {
		t.Errorf("transports: legacy %q, linear %q", byName["legacy"].Transport, byName["linear"].Transport)
	}
	if h := byName["api"].Headers["Authorization"]; h != "Bearer ${API_TOKEN}" {
		t.Errorf("headers must stay unexpanded until activation: %q", h)
	}

	env := map[string]string{"API_TOKEN": "t0ken", "HOME": "/home/p", "PATH": "/bin", "LINEAR_KEY": "lk", "GH_TOKEN": "gh"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	expand := func(name string) location.MCPServerConfig {
		t.Helper()
		m, err := byName[name].Expand(lookup)
		if err != nil {
			t.Fatalf("expand %s: %v", name, err)
		}
		return m
	}
	if got := expand("api").Headers["Authorization"]; got != "Bearer t0ken" {
		t.Errorf("api header %q", got)
	}
	fs := expand("fs")
	if fs.Args[2] != "/home/p/notes" || fs.Env["MODE"] != "read-only" || fs.Env["PATH"] != "/bin" || fs.Env["HOME"] != "/home/p" {
		t.Errorf("fs: args %q env %v", fs.Args, fs.Env)
	}
	if got := expand("linear").Headers["X-Api-Key"]; got != "lk" {
		t.Errorf("linear header %q", got)
	}
	tool := expand("github_com_tool")
	if tool.Command != filepath.Join(dir, "bin", "tool") || tool.Args[1] != "gh" || tool.Dir != dir {
		t.Errorf("vscode server: %q %q %q", tool.Command, tool.Args, tool.Dir)
	}

	delete(env, "API_TOKEN")
	env["LINEAR_KEY"] = "x"
	_, err = byName["api"].Expand(lookup)
	if err == nil || !strings.Contains(err.Error(), "API_TOKEN is not set") || !strings.Contains(err.Error(), "/mcp_servers/0") || !strings.Contains(err.Error(), "/headers/Authorization") {
		t.Errorf("unset variable: %v", err)
	}
}

// TestImportMCPConfigsBroken: JSON that does not parse refuses the file, naming
// where; a broken entry fails alone, its Problem naming the file and pointer.
func TestImportMCPConfigsBroken(t *testing.T) {
	dir := canonicalDir(t, filepath.Join("testdata", "mcpimport", "broken"))
	_, err := location.LoadConfig(dir)
	var cerr *location.ConfigError
	if !errors.As(err, &cerr) {
		t.Fatalf("err = %v, want a *ConfigError", err)
	}
	if msg := err.Error(); !strings.Contains(msg, filepath.Join(dir, ".cursor", "mcp.json")+":") || !strings.Contains(msg, "invalid JSON at 1:") ||
		strings.Contains(msg, ".mcp.json:") || strings.Contains(msg, ".vscode") {
		t.Errorf("error, want only the file that does not parse:\n%s", msg)
	}

	// Without that file the Location's config loads, each broken entry failing alone.
	tmp := canonicalDir(t, t.TempDir())
	if err := os.CopyFS(tmp, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(tmp, ".cursor", "mcp.json")); err != nil {
		t.Fatal(err)
	}
	cfg, err := location.LoadConfig(tmp)
	if err != nil {
		t.Fatal(err)
	}
	problems := map[string]string{}
	for _, m := range cfg.MCPServers {
		if m.Problem != nil {
			problems[m.Name] = m.Problem.Error()
		}
	}
	claude, vscode := filepath.Join(tmp, ".mcp.json"), filepath.Join(tmp, ".vscode", "mcp.json")
	for name, want := range map[string][]string{
		"both":  {claude + ":", "/mcpServers/both: give either command (a stdio server) or url (a remote server), not both"},
		"ws":    {`/mcpServers/ws/type: got "websocket"`},
		"api":   {`/mcpServers/api: duplicate server name "api": already defined in ` + filepath.Join(tmp, location.ConfigPath) + " at /mcp_servers/0"},
		"types": {"/mcpServers/types/args: got \"not-an-array\", want an array of strings", "/mcpServers/types/env/X: got 1, want a string"},
		"open":  {"/mcpServers/open/url: unterminated variable reference"},
		"e":     {vscode + ":", "/servers/e/args/0: ${input:password} asks the person for a value"},
	} {
		for _, w := range want {
			if !strings.Contains(problems[name], w) {
				t.Errorf("entry %s: problem %q, want it to contain %q", name, problems[name], w)
			}
		}
	}
	if !slices.ContainsFunc(cfg.Notes, func(n string) bool { return strings.HasPrefix(n, vscode+" at /extra: ignored") }) {
		t.Errorf("notes %q, want the unknown top-level key noted", cfg.Notes)
	}
}

// TestImportFormats reads each tool's file in the shape that tool writes it: its
// key of servers, its variable syntax, its own keys (envFile, headersHelper,
// serverUrl, dev, enabled, disabled, command arrays), entries toolhost cannot run
// failing alone.
func TestImportFormats(t *testing.T) {
	dir := canonicalDir(t, filepath.Join("testdata", "mcpimport", "formats"))
	cfg, err := location.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]location.MCPServerConfig{}
	var order []string
	for _, m := range cfg.MCPServers {
		byName[m.Name] = m
		order = append(order, m.Name)
	}
	want := "cc-http cc-oauth cc-stdio cursor-remote cursor-stdio cursor-vscode-syntax vscode-input vscode-sandbox vscode-stdio ws-hidden ws-remote ws-stdio desktop oc-args oc-local oc-remote"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("servers\n%s, want\n%s", got, want)
	}

	// Entries toolhost cannot run fail alone, naming file and pointer.
	for name, w := range map[string]string{
		"cc-oauth":             filepath.Join(dir, ".mcp.json") + ":\n  /mcpServers/cc-oauth/oauth: \"oauth\" is a key toolhost does not read in Claude Code's file",
		"cursor-vscode-syntax": filepath.Join(dir, ".cursor", "mcp.json") + ":\n  /mcpServers/cursor-vscode-syntax/args/0: ${input:token} asks the person for a value",
		"vscode-input":         "/servers/vscode-input/headers/Authorization: ${input:api-key} asks the person",
		"vscode-sandbox":       "/servers/vscode-sandbox/sandboxEnabled: \"sandboxEnabled\" is a key toolhost does not read in VS Code's file",
		"ws-hidden":            filepath.Join(dir, ".windsurf", "mcp_config.json") + ":\n  /mcpServers/ws-hidden/disabledTools: toolhost does not hide single tools",
		"oc-args":              "/mcp/oc-args/args: \"args\" is a key toolhost does not read in opencode's file",
	} {
		p := byName[name].Problem
		if p == nil || !strings.Contains(p.Error(), w) {
			t.Errorf("%s: problem %v, want it to contain %q", name, p, w)
		}
		if _, err := byName[name].Expand(func(string) (string, bool) { return "", false }); !errors.Is(err, error(p)) {
			t.Errorf("%s: Expand = %v, want the entry's problem", name, err)
		}
	}
	for _, name := range []string{"cc-http", "cc-stdio", "cursor-remote", "cursor-stdio", "vscode-stdio", "ws-remote", "ws-stdio", "desktop", "oc-local", "oc-remote"} {
		if p := byName[name].Problem; p != nil {
			t.Errorf("%s: unexpected problem %v", name, p)
		}
	}
	for _, w := range []string{
		filepath.Join(dir, ".vscode", "mcp.json") + " at /servers/vscode-stdio/dev: ignored",
		filepath.Join(dir, ".windsurf", "mcp_config.json") + " at /mcpServers/ws-off: left out: it is disabled",
		filepath.Join(dir, "opencode.json") + " at /mcp/oc-off: left out: it is not enabled",
	} {
		if !slices.ContainsFunc(cfg.Notes, func(n string) bool { return strings.HasPrefix(n, w) }) {
			t.Errorf("notes %q\nwant one starting %q", cfg.Notes, w)
		}
	}
	if slices.ContainsFunc(cfg.Notes, func(n string) bool { return strings.Contains(n, "globalShortcut") || strings.Contains(n, "$schema") }) {
		t.Errorf("notes %q: a tool's own settings in its whole-config file are not toolhost's to note", cfg.Notes)
	}

	env := map[string]string{"API_KEY": "k3y", "HOME": "/home/p", "PATH": "/bin", "MODE": "fast", "TOKEN": "t0k"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	expand := func(name string) location.MCPServerConfig {
		t.Helper()
		m, err := byName[name].Expand(lookup)
		if err != nil {
			t.Fatalf("expand %s: %v", name, err)
		}
		return m
	}
	check := func(name, what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %s = %q, want %q", name, what, got, want)
		}
	}

	// Claude Code: ${VAR:-default}, and a headers helper run with the server's name.
	m := expand("cc-stdio")
	check("cc-stdio", "args", m.Args, []string{"-y", "@modelcontextprotocol/server-filesystem", "/srv/notes"})
	check("cc-stdio", "env", m.Env, map[string]string{"MODE": "fast", "PATH": "/bin", "HOME": "/home/p"})
	m, err = expand("cc-http").RunHeadersHelper(t.Context(), []string{"TOKEN=t0k", "PATH=" + os.Getenv("PATH")})
	if err != nil {
		t.Fatal(err)
	}
	check("cc-http", "headers", m.Headers, map[string]string{"X-Static": "s", "Authorization": "Bearer t0k", "X-Server": "cc-http"})

	// Cursor: ${workspaceFolder}, ${userHome}, ${env:NAME}, an env file under env.
	m = expand("cursor-stdio")
	check("cursor-stdio", "command", m.Command, filepath.Join(dir, "bin", "server"))
	check("cursor-stdio", "args", m.Args, []string{"--home", "/home/p", "--key", "k3y"})
	check("cursor-stdio", "env", m.Env, map[string]string{"REGION": "eu", "FROM_FILE": "file-value", "QUOTED": `a "b"`, "PATH": "/bin", "HOME": "/home/p"})
	m = expand("cursor-remote")
	check("cursor-remote", "transport", m.Transport, mcp.TransportStreamable)
	check("cursor-remote", "headers", m.Headers, map[string]string{"Authorization": "Bearer k3y"})

	// VS Code: servers, envFile, dev ignored.
	m = expand("vscode-stdio")
	check("vscode-stdio", "args", m.Args, []string{filepath.Join(dir, "server.js")})
	check("vscode-stdio", "env", m.Env, map[string]string{"TOKEN": "k3y", "REGION": "overridden-by-env", "FROM_FILE": "file-value", "QUOTED": `a "b"`, "PATH": "/bin", "HOME": "/home/p"})

	// Windsurf: serverUrl, ${env:NAME}, ${file:PATH}.
	m = expand("ws-remote")
	check("ws-remote", "url", m.URL, "https://ws.example.com/mcp")
	check("ws-remote", "headers", m.Headers, map[string]string{"Authorization": "Bearer k3y"})
	check("ws-stdio", "env", expand("ws-stdio").Env, map[string]string{"SECRET": "file-secret", "PATH": "/bin", "HOME": "/home/p"})

	// Claude Desktop: values as written.
	check("desktop", "args", expand("desktop").Args, []string{"--literal", "${NOT_EXPANDED}"})

	// opencode: a command array, environment, {env:NAME}, {file:PATH}, timeout in ms.
	m = expand("oc-local")
	check("oc-local", "command", m.Command, "bun")
	check("oc-local", "args", m.Args, []string{"x", "my-mcp-command", "--key", "k3y"})
	check("oc-local", "env", m.Env, map[string]string{"MY_ENV_VAR": "my_env_var_value", "SECRET": "file-secret", "PATH": "/bin", "HOME": "/home/p"})
	check("oc-local", "start timeout", m.StartTimeout, 10*time.Second)
	check("oc-remote", "headers", expand("oc-remote").Headers, map[string]string{"Authorization": "Bearer k3y"})

	// An unset variable names the entry, file, pointer and variable.
	delete(env, "API_KEY")
	_, err = byName["oc-local"].Expand(lookup)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "opencode.json")+" at /mcp/oc-local") || !strings.Contains(err.Error(), "/command/4: environment variable API_KEY is not set") {
		t.Errorf("unset variable: %v", err)
	}
}

// TestHeadersHelperFails: a helper that fails or prints what is not a header
// object is an error naming the entry and saying what the command did.
func TestHeadersHelperFails(t *testing.T) {
	for _, tc := range []struct{ helper, want string }{
		{"echo broken >&2; exit 3", "/headersHelper: the command failed (exit status 3): broken"},
		{"echo '[1]'", "must print a JSON object of header names to string values"},
		{`echo '{"Bad Name": "x"}'`, `invalid header name "Bad Name"`},
		{`echo '{"X": 1}'`, `header "X" with a value that is not a single-line string`},
	} {
		dir := canonicalDir(t, t.TempDir())
		setConfig(t, dir, obj{"import_mcp_config": []string{".mcp.json"}})
		data, _ := json.Marshal(obj{"mcpServers": obj{"h": obj{"type": "http", "url": "https://h.example/mcp", "headersHelper": tc.helper}}})
		if err := os.WriteFile(filepath.Join(dir, ".mcp.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := location.LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cfg.MCPServers[0].RunHeadersHelper(t.Context(), []string{"PATH=" + os.Getenv("PATH")})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `mcp server "h" (`+filepath.Join(dir, ".mcp.json")+" at /mcpServers/h)") {
			t.Errorf("helper %q: %v, want it to say %q", tc.helper, err, tc.want)
		}
	}
}

func TestParseConfigRemoteServers(t *testing.T) {
	for _, tc := range []struct {
		name, cfg string
		want      []string
	}{
		{"BothCommandAndURL", `{"mcp_servers":[{"name":"a","command":"x","url":"https://h/mcp"}]}`, []string{"/mcp_servers/0: give either command"}},
		{"Neither", `{"mcp_servers":[{"name":"a"}]}`, []string{"/mcp_servers/0: give command"}},
		{"Scheme", `{"mcp_servers":[{"name":"a","url":"ftp://h/mcp"}]}`, []string{`/mcp_servers/0/url: URL scheme "ftp" is not http or https`}},
		{"StdioOnlyFields", `{"mcp_servers":[{"name":"a","url":"https://h/mcp","args":["x"],"env":{"A":"b"}}]}`, []string{"/mcp_servers/0/args: applies only to a stdio server", "/mcp_servers/0/env: applies only"}},
		{"RemoteOnlyFields", `{"mcp_servers":[{"name":"a","command":"x","transport":"sse","headers":{"A":"b"}}]}`, []string{"/mcp_servers/0/headers: applies only to a remote server", "/mcp_servers/0/transport: applies only"}},
		{"BadTransport", `{"mcp_servers":[{"name":"a","url":"https://h/mcp","transport":"websocket"}]}`, []string{"/mcp_servers/0/transport"}},
		{"BadReference", `{"mcp_servers":[{"name":"a","url":"https://h/mcp","headers":{"Authorization":"Bearer ${1X}"}}]}`, []string{"/mcp_servers/0/headers/Authorization: invalid variable reference ${1X}"}},
		{"BadImport", `{"import_mcp_config":["mcp.json"]}`, []string{"/import_mcp_config/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := canonicalDir(t, t.TempDir())
			_, err := location.ParseConfig(dir, "", []byte(tc.cfg))
			var cerr *location.ConfigError
			if !errors.As(err, &cerr) {
				t.Fatalf("err = %v, want a *ConfigError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

// pingServer serves a Go SDK MCP server with one tool, ping, on loopback; a
// request without "Authorization: Bearer token" gets 401. It returns the URL.
func pingServer(t *testing.T, token string) string {
	server := gomcp.NewServer(&gomcp.Implementation{Name: "t", Version: "1"}, nil)
	gomcp.AddTool(server, &gomcp.Tool{Name: "ping", Description: "Answers pong."},
		func(context.Context, *gomcp.CallToolRequest, struct{}) (*gomcp.CallToolResult, any, error) {
			return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: "pong"}}}, nil, nil
		})
	h := gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return server }, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go srv.Serve(lis)
	t.Cleanup(func() {
		srv.Close()
		for ss := range server.Sessions() {
			ss.Close()
		}
	})
	return "http://" + lis.Addr().String() + "/mcp"
}

// TestActivateImportDegrades: an imported entry toolhost cannot run is a Failed
// source naming the file and pointer, while the file's other entry (its headers
// from a headers helper) and the built-ins serve.
func TestActivateImportDegrades(t *testing.T) {
	url := pingServer(t, "helper-secret")
	e := newEnv(t)
	dir := workspace(t, obj{"import_mcp_config": []string{".mcp.json"}, "permission": allowAll})
	data, _ := json.Marshal(obj{"mcpServers": obj{
		"good": obj{"type": "http", "url": url, "headersHelper": `printf '{"Authorization": "Bearer %s"}' "$SECRET"`},
		"bad":  obj{"command": "x", "alwaysAllow": []string{"y"}},
	}})
	if err := os.WriteFile(filepath.Join(dir, ".mcp.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.opts.Env = []string{"SECRET=helper-secret", "PATH=" + os.Getenv("PATH")}
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	defs := strings.Join(names(q.Definitions()), " ")
	if !strings.Contains(defs, "good_ping") || !strings.Contains(defs, "read") {
		t.Errorf("definitions %s, want good_ping and the built-ins", defs)
	}
	var bad *location.SourceStatus
	for _, s := range l.Sources() {
		if s.ID == "mcp:bad" {
			bad = &s
		}
	}
	want := filepath.Join(dir, ".mcp.json") + ":\n  /mcpServers/bad/alwaysAllow: \"alwaysAllow\" is a key toolhost does not read"
	if bad == nil || bad.State != supervise.Failed || bad.Err == nil || !strings.Contains(bad.Err.Error(), want) {
		t.Fatalf("source mcp:bad = %+v, want Failed with %q", bad, want)
	}
	if err := l.RestartSource(t.Context(), "bad"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("RestartSource(bad) = %v, want the entry's problem", err)
	}
}

// TestActivateRemoteServer activates a Location whose config names a Go SDK
// server on loopback, its bearer token taken from the environment.
func TestActivateRemoteServer(t *testing.T) {
	url := pingServer(t, "env-secret")

	e := newEnv(t)
	dir := workspace(t, obj{
		"mcp_servers": []obj{{"name": "remote", "url": url, "headers": obj{"Authorization": "Bearer ${REMOTE_TOKEN}"}}},
		"permission":  allowAll,
	})
	e.opts.Env = []string{"REMOTE_TOKEN=env-secret", "XDG_DATA_HOME=" + t.TempDir()}
	l := e.activate(t, dir)
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	defs := names(q.Definitions())
	if !strings.Contains(strings.Join(defs, " "), "remote_ping") {
		t.Errorf("definitions %v", defs)
	}
	if err := l.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The wrong token, then an unset variable: the Location activates degraded, and
	// the remote source is reported with an error naming the server and URL (or the
	// variable), never the token.
	for _, tc := range []struct {
		name string
		env  []string
		want []string
	}{
		{"WrongToken", []string{"REMOTE_TOKEN=wrong-secret"}, []string{`"remote" at ` + url, "HTTP 401"}},
		{"UnsetVariable", nil, []string{"REMOTE_TOKEN is not set"}},
	} {
		e.opts.Env = append(tc.env, "XDG_DATA_HOME="+t.TempDir())
		l, err := location.Activate(t.Context(), e.root, dir, e.opts)
		if err != nil {
			t.Fatalf("%s: activation failed: %v", tc.name, err)
		}
		var remote *location.SourceStatus
		for _, s := range l.Sources() {
			if s.ID == "mcp:remote" {
				remote = &s
			}
		}
		if remote == nil || remote.State == supervise.Running || remote.Err == nil {
			t.Fatalf("%s: remote source %+v, want it not serving with an error", tc.name, remote)
		}
		for _, want := range tc.want {
			if msg := remote.Err.Error(); !strings.Contains(msg, want) || strings.Contains(msg, "wrong-secret") {
				t.Errorf("%s: source error %q, want it to say %q and not the token", tc.name, msg, want)
			}
		}
		if err := l.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReloadChangedServerDrains: a changed MCP server is replaced by its next
// generation, and a call in flight on the old one completes: the server's "hold"
// tool is answered only once the next generation has connected.
func TestReloadChangedServerDrains(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	initialized := make(chan struct{}, 4)
	server := gomcp.NewServer(&gomcp.Implementation{Name: "t", Version: "1"}, &gomcp.ServerOptions{
		InitializedHandler: func(context.Context, *gomcp.InitializedRequest) { initialized <- struct{}{} },
	})
	gomcp.AddTool(server, &gomcp.Tool{Name: "hold", Description: "Answers once released."},
		func(ctx context.Context, _ *gomcp.CallToolRequest, _ struct{}) (*gomcp.CallToolResult, any, error) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
			return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: "held"}}}, nil, nil
		})
	h := gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return server }, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(lis)
	defer srv.Close()
	url := "http://" + lis.Addr().String() + "/mcp"

	e := newEnv(t)
	cfg := obj{"permission": allowAll, "mcp_servers": []obj{{"name": "remote", "url": url}}}
	dir := workspace(t, cfg)
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	<-initialized

	settled := make(chan *registry.Settlement, 1)
	go func() {
		s, err := settle(t, l, "remote_hold", obj{})
		if err != nil {
			t.Error(err)
		}
		settled <- s
	}()
	<-entered
	cfg["mcp_servers"] = []obj{{"name": "remote", "url": url, "headers": obj{"X-Generation": "2"}}}
	setConfig(t, dir, cfg)
	reloaded := make(chan error, 1)
	go func() { reloaded <- l.Reload(t.Context()) }()
	<-initialized // the next generation connected; the old one still holds the call
	close(release)
	if s := <-settled; s == nil || s.Outcome != registry.Completed || s.Text() != "held" {
		t.Errorf("the call in flight across the change: %s, want it completed", settlementText(s))
	}
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if st, ok := sourceState(l, "mcp:remote"); !ok || st.State != supervise.Running {
		t.Errorf("the changed server after the reload: %+v", st)
	}
	if s, err := settle(t, l, "remote_hold", obj{}); err != nil || s.Outcome != registry.Completed {
		t.Errorf("a call on the next generation: %v %s", err, settlementText(s))
	}
}

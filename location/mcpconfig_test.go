package location_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/mcp"
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

func TestImportMCPConfigsBroken(t *testing.T) {
	dir := canonicalDir(t, filepath.Join("testdata", "mcpimport", "broken"))
	_, err := location.LoadConfig(dir)
	var cerr *location.ConfigError
	if !errors.As(err, &cerr) {
		t.Fatalf("err = %v, want a *ConfigError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		filepath.Join(dir, ".mcp.json") + ":",
		"/mcpServers/both: give either command (a stdio server) or url (a remote server), not both",
		`/mcpServers/ws/type: got "websocket"`,
		`/mcpServers/api: duplicate server name "api": already defined in ` + filepath.Join(dir, location.ConfigPath) + " at /mcp_servers/0",
		"/mcpServers/types/args: got \"not-an-array\", want an array of strings",
		"/mcpServers/types/env/X: got 1, want a string",
		"/mcpServers/open/url: unterminated variable reference",
		filepath.Join(dir, ".cursor", "mcp.json") + ":",
		"invalid JSON at 1:",
		filepath.Join(dir, ".vscode", "mcp.json") + ":",
		"/extra: unknown key",
		"/servers/e/args/0: ${input:password} asks the person for a value",
		"/servers/e/envFile: unsupported key",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
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

// TestActivateRemoteServer activates a Location whose config names a Go SDK
// server on loopback, its bearer token taken from the environment.
func TestActivateRemoteServer(t *testing.T) {
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
		if r.Header.Get("Authorization") != "Bearer env-secret" {
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
	url := "http://" + lis.Addr().String() + "/mcp"

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

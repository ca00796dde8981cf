package cli_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/internal/oauthtest"
)

func TestMCPLogin(t *testing.T) {
	server := gomcp.NewServer(&gomcp.Implementation{Name: "t", Version: "1"}, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return server }, nil)}
	go srv.Serve(lis)
	t.Cleanup(func() {
		srv.Close()
		for ss := range server.Sessions() {
			ss.Close()
		}
	})
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	dir := workspace(t, fmt.Sprintf(`{"mcp_servers": [
		{"name": "open", "url": "http://%s/mcp"},
		{"name": "local", "command": "true"}]}`, lis.Addr()))

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"NoAuthorizationNeeded", []string{"mcp-login", "open", "--location", dir}, cli.ExitOK, `"open" does not ask for authorization`},
		{"UnknownServer", []string{"mcp-login", "nope", "--location", dir}, cli.ExitFailure, `no MCP server "nope" (remote servers: open)`},
		{"StdioServer", []string{"mcp-login", "local", "--location", dir}, cli.ExitFailure, `"local" is a stdio server`},
		{"NoName", []string{"mcp-login", "--location", dir}, cli.ExitUsage, "want exactly one server NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runContext(t, context.Background(), "", nil, tc.args...)
			r.want(t, tc.code)
			if !strings.Contains(r.stdout+r.stderr, tc.output) {
				t.Errorf("output does not say %q:\n%s%s", tc.output, r.stdout, r.stderr)
			}
		})
	}
}

// TestLoginOnFirstUseAtATerminal: a remote server that needs OAuth and has no token
// yet is logged in to when a person is at the terminal (the test plays the browser
// with the URL printed on stderr), and its tools serve in the same run.
func TestLoginOnFirstUseAtATerminal(t *testing.T) {
	server := gomcp.NewServer(&gomcp.Implementation{Name: "t", Version: "1"}, nil)
	gomcp.AddTool(server, &gomcp.Tool{Name: "ping", Description: "answers pong"}, func(context.Context, *gomcp.CallToolRequest, struct{}) (*gomcp.CallToolResult, any, error) {
		return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: "pong"}}}, nil, nil
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resource := "http://" + lis.Addr().String() + "/mcp"
	as := oauthtest.New(t)
	srv := &http.Server{Handler: as.Protect(resource, gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return server }, nil))}
	go srv.Serve(lis)
	t.Cleanup(func() {
		srv.Close()
		for ss := range server.Sessions() {
			ss.Close()
		}
	})
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	dir := workspace(t, fmt.Sprintf(`{"mcp_servers": [{"name": "secure", "url": %q}]}`, resource))

	_, slave := openPTY(t)
	seen := make(chan struct{}) // Write sets the field to nil once it is closed
	stderr := &watchWriter{pattern: "/authorize?", seen: seen}
	browsed := make(chan error, 1)
	go func() {
		select {
		case <-seen:
		case <-t.Context().Done():
			browsed <- t.Context().Err()
			return
		}
		out := stderr.String()
		i := strings.Index(out, as.URL()+"/authorize?")
		u, _, _ := strings.Cut(out[i:], "\n")
		browsed <- oauthtest.Browser(t.Context(), strings.TrimSpace(u))
	}()
	var stdout strings.Builder
	code := cli.Run(t.Context(), []string{"tools", "--location", dir}, slave, &stdout, stderr)
	if err := <-browsed; err != nil {
		t.Fatalf("browser: %v\nstderr:\n%s", err, stderr.String())
	}
	if code != cli.ExitOK || !strings.Contains(stdout.String(), "secure_ping") || !strings.Contains(stderr.String(), `MCP server "secure" needs authorization`) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}

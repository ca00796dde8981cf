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

package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/toolhost/toolhost/internal/termtext"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/supervise"
)

type mcpLoginOptions struct {
	location        string
	clientID        string
	clientSecretEnv string
	listen          string
}

func (a *app) mcpLoginFlags() (*flag.FlagSet, *mcpLoginOptions) {
	o := &mcpLoginOptions{}
	fs := a.newFlagSet("mcp-login", "NAME --location DIR [--client-id ID [--client-secret-env VAR]] [--listen 127.0.0.1:PORT]",
		"authorizes toolhost with the remote MCP server NAME of the Location at DIR, per the\n"+
			"MCP authorization specification (OAuth 2.1): it discovers the server's authorization\n"+
			"server, registers a client there (unless --client-id names one registered\n"+
			"beforehand), prints a URL to open in your browser and waits for the browser's\n"+
			"redirect to a loopback address. The token is stored for your user, outside the\n"+
			"workspace, in $XDG_DATA_HOME/toolhost/oauth (mode 0600); later activations use it\n"+
			"and refresh it.\n")
	fs.StringVar(&o.location, "location", "", "the Location `directory` (required)")
	fs.StringVar(&o.clientID, "client-id", "", "a client `id` registered beforehand with the authorization server")
	fs.StringVar(&o.clientSecretEnv, "client-secret-env", "", "the environment `variable` holding that client's secret, if it has one")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "the loopback `address` the browser is redirected to")
	return fs, o
}

func (a *app) mcpLogin(ctx context.Context, args []string) int {
	fs, o := a.mcpLoginFlags()
	positional, code, ok := a.parse(fs, args)
	if !ok {
		return code
	}
	if len(positional) != 1 {
		return a.usageError(fs, "want exactly one server NAME, got %q", positional)
	}
	if o.location == "" {
		return a.usageError(fs, "missing --location DIR")
	}
	name := positional[0]
	dir, err := location.Canonicalize(o.location)
	if err != nil {
		a.errorf("toolhost mcp-login: %v", err)
		return ExitFailure
	}
	cfg, err := location.LoadConfig(dir)
	if err != nil {
		a.errorf("toolhost mcp-login: %v", err)
		return ExitFailure
	}
	var entry *location.MCPServerConfig
	var remote []string
	for i, m := range cfg.MCPServers {
		if m.URL != "" {
			remote = append(remote, m.Name)
		}
		if m.Name == name {
			entry = &cfg.MCPServers[i]
		}
	}
	switch {
	case entry == nil:
		a.errorf("toolhost mcp-login: the Location %s has no MCP server %q (remote servers: %s)", dir, name, orNone(remote))
		return ExitFailure
	case entry.URL == "":
		a.errorf("toolhost mcp-login: MCP server %q is a stdio server; only remote (url) servers log in (remote servers: %s)", name, orNone(remote))
		return ExitFailure
	}
	m, err := entry.Expand(os.LookupEnv)
	if err != nil {
		a.errorf("toolhost mcp-login: %v", err)
		return ExitFailure
	}
	tokenDir, err := mcp.DefaultTokenDir(os.Getenv)
	if err != nil {
		a.errorf("toolhost mcp-login: %v", err)
		return ExitFailure
	}
	opts := mcp.LoginOptions{Out: termtext.NewWriter(a.stdout), ListenAddr: o.listen, ClientID: o.clientID} // the server chooses what it prints
	if o.clientSecretEnv != "" {
		opts.ClientSecret = os.Getenv(o.clientSecretEnv)
		if opts.ClientSecret == "" {
			return a.usageError(fs, "--client-secret-env %s: the variable is not set", o.clientSecretEnv)
		}
	}
	err = mcp.Login(ctx, mcp.Config{Name: m.Name, Remote: mcp.Remote{URL: m.URL, Headers: m.Headers, TokenDir: tokenDir}}, opts)
	switch {
	case errors.Is(err, mcp.ErrNoAuthorizationNeeded):
		fmt.Fprintf(a.stdout, "%q does not ask for authorization; nothing to do\n", name)
		return ExitOK
	case ctx.Err() != nil:
		a.errorf("interrupted")
		return ExitInterrupted
	case err != nil:
		a.errorf("toolhost mcp-login: %v", err)
		return ExitFailure
	}
	return ExitOK
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// loginOnFirstUse logs in, with the person at the terminal, to each remote MCP server
// of loc that did not start for want of an OAuth token (a *mcp.AuthRequiredError
// that names a login), then restarts it. A login that fails is reported and the
// Location goes on without that server.
func (a *app) loginOnFirstUse(ctx context.Context, loc *location.Location) {
	tokenDir, err := mcp.DefaultTokenDir(os.Getenv)
	if err != nil {
		return
	}
	for _, st := range loc.Sources() {
		var auth *mcp.AuthRequiredError
		if st.Kind != location.KindMCP || st.State == supervise.Running || !errors.As(st.Err, &auth) || auth.Hint == "" {
			continue
		}
		var m *location.MCPServerConfig
		for i, c := range loc.Config().MCPServers {
			if c.Name == st.Name && c.URL != "" {
				m = &loc.Config().MCPServers[i]
			}
		}
		if m == nil {
			continue
		}
		expanded, err := m.Expand(os.LookupEnv)
		if err != nil {
			continue
		}
		fmt.Fprintf(a.stderr, "MCP server %q needs authorization (%s); logging in:\n", st.Name, auth.Reason)
		err = mcp.Login(ctx, mcp.Config{Name: expanded.Name, Remote: mcp.Remote{URL: expanded.URL, Headers: expanded.Headers, TokenDir: tokenDir}},
			mcp.LoginOptions{Out: a.stderr, ListenAddr: "127.0.0.1:0"})
		if err == nil {
			err = loc.RestartSource(ctx, st.ID)
		}
		if err != nil {
			a.errorf("toolhost: log in to MCP server %q: %v (run %s to try again)", st.Name, err, auth.Hint)
		}
	}
}

package mcp_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/toolhost/toolhost/internal/oauthtest"
	"github.com/toolhost/toolhost/mcp"
)

// protected puts srv's MCP endpoint behind a's tokens.
func protected(a *oauthtest.Server, srv *goServer) {
	srv.wrap = func(next http.Handler) http.Handler { return a.Protect(srv.URL(), next) }
}

func TestOAuthLoginThenSessionRefreshes(t *testing.T) {
	h := newBareHost(t)
	as := oauthtest.New(t)
	srv := &goServer{t: t}
	protected(as, srv)
	srv.start("127.0.0.1:0")
	t.Cleanup(srv.kill)
	cfg := h.remote("secure", srv.URL(), func(c *mcp.Config) { c.LoginHint = "toolhost mcp-login secure --location /ws" })

	// Without a token: a clear error that says what to run.
	_, err := h.start(cfg)
	var need *mcp.AuthRequiredError
	if !errors.As(err, &need) || !strings.Contains(err.Error(), "toolhost mcp-login secure --location /ws") {
		t.Fatalf("before login: %v", err)
	}

	var out bytes.Buffer
	if err := mcp.Login(t.Context(), cfg, mcp.LoginOptions{Out: &out, Open: oauthtest.Browser}); err != nil {
		t.Fatalf("login: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), as.URL()+"/authorize?") {
		t.Errorf("login did not print the authorization URL:\n%s", out.String())
	}
	if res := as.Resources(); len(res) != 1 || res[0] != srv.URL() {
		t.Errorf("resource indicators %q, want [%s]", res, srv.URL())
	}

	store := mcp.TokenStore{Dir: cfg.TokenDir}
	file := store.Path(srv.URL())
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	before, err := store.Load(srv.URL())
	if err != nil || before == nil || before.Token.RefreshToken == "" || before.ClientID == "" {
		t.Fatalf("stored grant %+v, %v", before, err)
	}

	// A session uses the stored token; it is already about to expire, so it is
	// refreshed first and the new one is stored.
	h.supervise(cfg)
	if s := mustSettle(t, h, "secure_echo", `{"text":"authorized"}`); s.Text() != "authorized" {
		t.Errorf("echo: %q", s.Text())
	}
	if as.Refreshed() == 0 {
		t.Error("the expired token was not refreshed")
	}
	after, err := store.Load(srv.URL())
	if err != nil || after.Token.AccessToken == before.Token.AccessToken {
		t.Errorf("the refreshed token was not stored: %v", err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file after refresh: %v %v", fi.Mode(), err)
	}
	for _, secret := range []string{before.Token.AccessToken, before.Token.RefreshToken, after.Token.AccessToken} {
		if h.logs.Contains(secret) || strings.Contains(out.String(), secret) {
			t.Errorf("a token leaks into the logs or the login output")
		}
	}

	// A refresh token the server no longer honours: a clear error asking to log in.
	as.ForgetRefreshTokens()
	h2 := newBareHost(t)
	_, err = h2.start(cfg)
	if !errors.As(err, &need) || !strings.Contains(err.Error(), "could not be refreshed") || !strings.Contains(err.Error(), "mcp-login secure") {
		t.Fatalf("with a dead refresh token: %v", err)
	}
}

func TestLoginNotNeeded(t *testing.T) {
	h := newBareHost(t)
	srv := startGoServer(t, "", false)
	err := mcp.Login(t.Context(), h.remote("open", srv.URL(), nil), mcp.LoginOptions{Out: io.Discard})
	if !errors.Is(err, mcp.ErrNoAuthorizationNeeded) {
		t.Fatalf("err = %v", err)
	}
	_ = gomcp.Implementation{}
}

// TestTokenEndpointDownIsNoLoginError: a stored token that expired while its token
// endpoint cannot be reached fails the session with the refresh's error, which
// says it is tried again, and not as a server that requires a login.
func TestTokenEndpointDownIsNoLoginError(t *testing.T) {
	h := newBareHost(t)
	as := oauthtest.New(t)
	srv := &goServer{t: t}
	protected(as, srv)
	srv.start("127.0.0.1:0")
	t.Cleanup(srv.kill)
	cfg := h.remote("secure", srv.URL(), nil)
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	g := &mcp.Grant{Server: srv.URL(), ClientID: "client-x", TokenURL: down.URL + "/token",
		Token: &oauth2.Token{AccessToken: "access-x", TokenType: "Bearer", RefreshToken: "refresh-x", Expiry: time.Now().Add(-time.Minute)}}
	if err := (mcp.TokenStore{Dir: cfg.TokenDir}).Save(srv.URL(), g); err != nil {
		t.Fatal(err)
	}
	_, err := h.start(cfg)
	var need *mcp.AuthRequiredError
	var re *mcp.RefreshError
	if errors.As(err, &need) || !errors.As(err, &re) || !strings.Contains(err.Error(), "tried again at the next use") {
		t.Fatalf("with the token endpoint down: %v; want the refresh's error, not a login request", err)
	}
}

package mcp_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/mcp"
)

// authServer is an OAuth 2.1 authorization server for one protected MCP server:
// metadata, dynamic client registration, authorization with PKCE (S256) that
// approves at once, code exchange and refresh. Access tokens expire in 5 seconds,
// which golang.org/x/oauth2 already counts as expired, so every later use of a
// stored token refreshes it first.
type authServer struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	clients   map[string][]string // client id → redirect URIs
	codes     map[string]authCode
	access    map[string]bool
	refresh   map[string]bool
	n         int
	refreshed int
	resources []string // resource indicators seen
}

type authCode struct{ client, redirect, challenge string }

func newAuthServer(t *testing.T) *authServer {
	a := &authServer{t: t, clients: map[string][]string{}, codes: map[string]authCode{}, access: map[string]bool{}, refresh: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                           a.srv.URL,
			"authorization_endpoint":           a.srv.URL + "/authorize",
			"token_endpoint":                   a.srv.URL + "/token",
			"registration_endpoint":            a.srv.URL + "/register",
			"response_types_supported":         []string{"code"},
			"grant_types_supported":            []string{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported": []string{"S256"},
			"scopes_supported":                 []string{"tools", "offline_access"},
		})
	})
	mux.HandleFunc("POST /register", func(w http.ResponseWriter, r *http.Request) {
		var md struct {
			RedirectURIs []string `json:"redirect_uris"`
		}
		json.NewDecoder(r.Body).Decode(&md)
		a.mu.Lock()
		a.n++
		id := fmt.Sprintf("client-%d", a.n)
		a.clients[id] = md.RedirectURIs
		a.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		writeJSON(w, map[string]any{"client_id": id, "redirect_uris": md.RedirectURIs, "token_endpoint_auth_method": "none"})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		a.mu.Lock()
		defer a.mu.Unlock()
		redirects, ok := a.clients[q.Get("client_id")]
		if !ok || !contains(redirects, q.Get("redirect_uri")) || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("response_type") != "code" {
			http.Error(w, "bad authorization request", http.StatusBadRequest)
			return
		}
		a.resources = append(a.resources, q.Get("resource"))
		a.n++
		code := fmt.Sprintf("code-%d", a.n)
		a.codes[code] = authCode{client: q.Get("client_id"), redirect: q.Get("redirect_uri"), challenge: q.Get("code_challenge")}
		http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		a.mu.Lock()
		defer a.mu.Unlock()
		switch r.Form.Get("grant_type") {
		case "authorization_code":
			c, ok := a.codes[r.Form.Get("code")]
			delete(a.codes, r.Form.Get("code"))
			sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
			if !ok || c.client != r.Form.Get("client_id") || c.redirect != r.Form.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
				w.WriteHeader(http.StatusBadRequest)
				writeJSON(w, map[string]string{"error": "invalid_grant"})
				return
			}
		case "refresh_token":
			if !a.refresh[r.Form.Get("refresh_token")] {
				w.WriteHeader(http.StatusBadRequest)
				writeJSON(w, map[string]string{"error": "invalid_grant"})
				return
			}
			delete(a.refresh, r.Form.Get("refresh_token"))
			a.refreshed++
		default:
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, map[string]string{"error": "unsupported_grant_type"})
			return
		}
		a.n++
		at, rt := fmt.Sprintf("access-%d", a.n), fmt.Sprintf("refresh-%d", a.n)
		a.access[at], a.refresh[rt] = true, true
		writeJSON(w, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": 5, "refresh_token": rt})
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *authServer) valid(token string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.access[token]
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	json.NewEncoder(w).Encode(v)
}

// protected puts srv's MCP endpoint behind a's tokens, with protected-resource
// metadata at the endpoint's well-known path.
func protected(a *authServer, srv *goServer) {
	srv.wrap = func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
				writeJSON(w, map[string]any{"resource": srv.URL(), "authorization_servers": []string{a.srv.URL}, "scopes_supported": []string{"tools"}})
				return
			}
			if !a.valid(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")) {
				w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://`+srv.addr+`/.well-known/oauth-protected-resource/mcp"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// browser plays the person's browser: it follows the authorization URL to the
// loopback redirect.
func browser(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("authorized")) {
		return fmt.Errorf("redirect page: %d %s", resp.StatusCode, body)
	}
	return nil
}

func TestOAuthLoginThenSessionRefreshes(t *testing.T) {
	h := newBareHost(t)
	as := newAuthServer(t)
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
	if err := mcp.Login(t.Context(), cfg, mcp.LoginOptions{Out: &out, Open: browser}); err != nil {
		t.Fatalf("login: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), as.srv.URL+"/authorize?") {
		t.Errorf("login did not print the authorization URL:\n%s", out.String())
	}
	if len(as.resources) != 1 || as.resources[0] != srv.URL() {
		t.Errorf("resource indicators %q, want [%s]", as.resources, srv.URL())
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
	as.mu.Lock()
	refreshed := as.refreshed
	as.mu.Unlock()
	if refreshed == 0 {
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
	as.mu.Lock()
	clear(as.refresh)
	as.mu.Unlock()
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

// Package oauthtest is an OAuth 2.1 authorization server for tests of remote MCP
// servers: metadata, dynamic client registration, authorization with PKCE (S256)
// that approves at once, code exchange and refresh with refresh-token rotation
// and reuse detection; a wrapper that puts an MCP endpoint behind its tokens; and
// a "browser" that follows an authorization URL.
package oauthtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is the authorization server. Access tokens expire in 5 seconds unless
// SetTokenLifetime says otherwise, which golang.org/x/oauth2 already counts as
// expired, so every later use of a stored token refreshes it first.
//
// Refresh tokens rotate as most providers' do: a refresh hands out a new refresh
// token and invalidates the one it used. A refresh token used a second time is
// refused with invalid_grant and, as the OAuth 2.0 security best practice asks of
// reuse detection, revokes every token issued from the same login since (its
// family), access tokens included. Safe for concurrent use; the test's cleanup
// closes it.
type Server struct {
	srv *httptest.Server

	mu        sync.Mutex
	clients   map[string][]string // client id → redirect URIs
	codes     map[string]authCode
	access    map[string]int // live access token → family
	refresh   map[string]int // live refresh token → family
	used      map[string]int // rotated-out refresh token → family
	lifetime  int            // seconds
	n         int
	refreshed int
	rejected  int
	reused    int
	resources []string // resource indicators seen
}

type authCode struct{ client, redirect, challenge string }

// New starts a Server on loopback.
func New(t testing.TB) *Server {
	a := &Server{
		clients: map[string][]string{}, codes: map[string]authCode{},
		access: map[string]int{}, refresh: map[string]int{}, used: map[string]int{}, lifetime: 5,
	}
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
		if !ok || !slices.Contains(redirects, q.Get("redirect_uri")) || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" || q.Get("response_type") != "code" {
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
		family := 0
		switch r.Form.Get("grant_type") {
		case "authorization_code":
			c, ok := a.codes[r.Form.Get("code")]
			delete(a.codes, r.Form.Get("code"))
			sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
			if !ok || c.client != r.Form.Get("client_id") || c.redirect != r.Form.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
				tokenError(w, "invalid_grant", "the code is unknown or does not match the request")
				return
			}
		case "refresh_token":
			rt := r.Form.Get("refresh_token")
			f, ok := a.refresh[rt]
			if !ok {
				a.rejected++
				if f, reused := a.used[rt]; reused {
					a.reused++
					a.revoke(f)
				}
				tokenError(w, "invalid_grant", "the refresh token is unknown, revoked or already used")
				return
			}
			delete(a.refresh, rt)
			a.used[rt] = f
			family = f
			a.refreshed++
		default:
			tokenError(w, "unsupported_grant_type", "")
			return
		}
		at, rt := a.issue(family)
		writeJSON(w, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": a.lifetime, "refresh_token": rt})
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// URL is the authorization server's base URL (its issuer).
func (a *Server) URL() string { return a.srv.URL }

// Refreshed counts the refresh grants it honoured.
func (a *Server) Refreshed() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refreshed
}

// Rejected counts the refresh grants it refused (invalid_grant): unknown, revoked
// or reused refresh tokens.
func (a *Server) Rejected() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rejected
}

// Reused counts the refresh grants that presented a refresh token already
// rotated out (each revoked its family).
func (a *Server) Reused() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reused
}

// SetTokenLifetime sets the expires_in of the access tokens issued from now on.
func (a *Server) SetTokenLifetime(d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lifetime = int(d / time.Second)
}

// Issue mints an access and refresh token pair of a new family, as a login would,
// for tests that need a grant without playing the authorization flow. The pair
// refreshes at the token endpoint (URL()+"/token") for any client id.
func (a *Server) Issue() (access, refresh string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.issue(0)
}

// Valid reports whether access is a live access token.
func (a *Server) Valid(access string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.access[access]
	return ok
}

// issue mints a token pair in family, or in a new family when family is 0. a.mu
// is held.
func (a *Server) issue(family int) (access, refresh string) {
	a.n++
	if family == 0 {
		family = a.n
	}
	access, refresh = fmt.Sprintf("access-%d", a.n), fmt.Sprintf("refresh-%d", a.n)
	a.access[access], a.refresh[refresh] = family, family
	return access, refresh
}

// revoke invalidates every live token of family. a.mu is held.
func (a *Server) revoke(family int) {
	maps.DeleteFunc(a.access, func(_ string, f int) bool { return f == family })
	maps.DeleteFunc(a.refresh, func(_ string, f int) bool { return f == family })
}

// Resources lists the resource indicators authorization requests carried.
func (a *Server) Resources() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.resources)
}

// ForgetRefreshTokens makes every refresh token issued so far invalid.
func (a *Server) ForgetRefreshTokens() {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.refresh)
}

// Protect puts next, the MCP endpoint at resource (its URL, path "/mcp"), behind the
// server's tokens, and serves the protected-resource metadata at the endpoint's
// well-known path.
func (a *Server) Protect(resource string, next http.Handler) http.Handler {
	u, _ := url.Parse(resource)
	metadata := "/.well-known/oauth-protected-resource" + u.Path
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == metadata {
			writeJSON(w, map[string]any{"resource": resource, "authorization_servers": []string{a.srv.URL}, "scopes_supported": []string{"tools"}})
			return
		}
		if !a.Valid(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")) {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://`+u.Host+metadata+`"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Browser plays the person's browser: it follows the authorization URL u to the
// loopback redirect and checks that the page there says the login worked.
func Browser(ctx context.Context, u string) error {
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

// tokenError answers a token request with an OAuth error (RFC 6749 section 5.2).
func tokenError(w http.ResponseWriter, code, description string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	body := map[string]string{"error": code}
	if description != "" {
		body["error_description"] = description
	}
	writeJSON(w, body)
}

func writeJSON(w http.ResponseWriter, v any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	json.NewEncoder(w).Encode(v)
}

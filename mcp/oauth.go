package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
)

// DefaultTokenDir returns where OAuth tokens are stored for the user:
// $XDG_DATA_HOME/toolhost/oauth, else $HOME/.local/share/toolhost/oauth. It is
// outside every workspace on purpose.
func DefaultTokenDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "toolhost", "oauth"), nil
	}
	home := getenv("HOME")
	if home == "" || !filepath.IsAbs(home) {
		return "", errors.New("mcp: cannot place the OAuth token store: neither XDG_DATA_HOME nor HOME is an absolute path")
	}
	return filepath.Join(home, ".local", "share", "toolhost", "oauth"), nil
}

func (c Config) tokenStore() (TokenStore, error) {
	if c.TokenDir != "" {
		return TokenStore{Dir: c.TokenDir}, nil
	}
	dir, err := DefaultTokenDir(os.Getenv)
	return TokenStore{Dir: dir}, err
}

// refreshTimeout bounds one refresh at the token endpoint; other processes wait
// for it holding the grant's lock.
const refreshTimeout = 30 * time.Second

// storedTokenSource returns a token source over the grant stored for cfg.URL, or
// nil when none is stored. It refreshes an expired token through hc and the
// store (see TokenStore.Fresh), so the processes sharing the grant refresh it
// once.
func storedTokenSource(cfg Config, hc *http.Client) (oauth2.TokenSource, error) {
	store, err := cfg.tokenStore()
	if err != nil {
		return nil, nil // no store, so nothing stored: the server may not need one
	}
	g, err := store.Load(cfg.URL)
	if err != nil {
		hint := cfg.LoginHint
		if hint == "" {
			hint = "toolhost mcp-login " + cfg.Name
		}
		return nil, fmt.Errorf("%w: %s", err, hint)
	}
	if g == nil {
		return nil, nil
	}
	return &grantSource{
		store: store, url: cfg.URL, held: g,
		refresh: func(g *Grant) (*Grant, error) { return g.refresh(hc) },
		log: func(err error) {
			cfg.Logger.Warn("could not store the refreshed OAuth token", "server", cfg.Name, "error", err)
		},
	}, nil
}

func (g *Grant) config(redirect string) *oauth2.Config {
	return &oauth2.Config{
		ClientID: g.ClientID, ClientSecret: g.ClientSecret, RedirectURL: redirect, Scopes: g.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: g.AuthURL, TokenURL: g.TokenURL, AuthStyle: oauth2.AuthStyle(g.AuthStyle)},
	}
}

// errNoRefreshToken: the grant's token expired and it has nothing to refresh with.
var errNoRefreshToken = errors.New("the token has expired and the grant holds no refresh token")

// refresh exchanges g's refresh token at its token endpoint through hc, within
// refreshTimeout, and returns g with the new token (which keeps the old refresh
// token when the endpoint sends none).
func (g *Grant) refresh(hc *http.Client) (*Grant, error) {
	if g.Token.RefreshToken == "" {
		return nil, errNoRefreshToken
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), oauth2.HTTPClient, hc), refreshTimeout)
	defer cancel()
	t, err := g.config("").TokenSource(ctx, &oauth2.Token{RefreshToken: g.Token.RefreshToken}).Token()
	if err != nil {
		return nil, err
	}
	next := *g
	next.Token = t
	return &next, nil
}

// grantSource hands out the token of the grant it holds, taking a fresh one from
// the store when it has expired.
type grantSource struct {
	store   TokenStore
	url     string
	refresh func(*Grant) (*Grant, error)
	log     func(error)

	mu   sync.Mutex
	held *Grant
}

func (s *grantSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held.Token.Valid() {
		return s.held.Token, nil
	}
	g, err := s.store.Fresh(s.url, s.held, s.refresh)
	if g == nil {
		return nil, err
	}
	if err != nil {
		s.log(err) // refreshed but not stored: still usable here
	}
	s.held = g
	return g.Token, nil
}

// LoginOptions configure Login.
type LoginOptions struct {
	// Out receives the URL the person opens and what happened. Required.
	Out io.Writer
	// Open, if set, is called with the authorization URL (to launch a browser, or
	// in tests to play the browser); the URL is printed to Out first in any case.
	// An error from Open is reported on Out and the wait goes on.
	Open func(ctx context.Context, url string) error
	// ListenAddr is the loopback address of the redirect listener; default
	// "127.0.0.1:0" (any free port).
	ListenAddr string
	// ClientID and ClientSecret name a client registered beforehand with the
	// authorization server; without ClientID the client registers itself
	// dynamically (RFC 7591) where the server offers it.
	ClientID, ClientSecret string
}

// ErrNoAuthorizationNeeded is returned by Login for a server that accepted an
// unauthorized session.
var ErrNoAuthorizationNeeded = errors.New("mcp: the server did not ask for authorization")

// Login authorizes the host with a remote server per the MCP authorization
// specification, through the go-sdk's auth package: it sends an initialize
// request and, on 401 (or 403 insufficient_scope), discovers the protected-resource
// and authorization-server metadata, registers a client dynamically unless
// opts.ClientID is given, and runs the authorization-code flow with PKCE and the
// resource indicator, the person approving in a browser that is redirected to a
// loopback listener. The grant (client, token endpoint, access and refresh
// tokens) is stored in the token store (Config.TokenDir), where later sessions
// find and refresh it. Login blocks until the redirect arrives or ctx ends.
func Login(ctx context.Context, cfg Config, opts LoginOptions) error {
	cfg = cfg.withDefaults()
	if err := ValidateURL(cfg.URL); err != nil {
		return fmt.Errorf("mcp: login %q: %w", cfg.Name, err)
	}
	store, err := cfg.tokenStore()
	if err != nil {
		return err
	}
	addr := opts.ListenAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("mcp: login %q: redirect listener: %w", cfg.Name, err)
	}
	redirect := "http://" + lis.Addr().String() + "/callback"
	codes := make(chan *auth.AuthorizationResult, 1)
	srv := &http.Server{Handler: redirectHandler(codes), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(lis)
	defer srv.Close()

	var base http.RoundTripper
	var own *http.Transport
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		base = cfg.HTTPClient.Transport
	} else {
		own = http.DefaultTransport.(*http.Transport).Clone()
		defer own.CloseIdleConnections()
		base = own
	}
	hc := &http.Client{Transport: base}
	var saved *Grant
	hcfg := &auth.AuthorizationCodeHandlerConfig{
		RedirectURL:         redirect,
		RequestRefreshToken: true,
		Client:              hc,
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			fmt.Fprintf(opts.Out, "Open this URL in your browser to authorize %q:\n\n  %s\n\nWaiting for the redirect to %s ...\n", cfg.Name, args.URL, redirect)
			if opts.Open != nil {
				if err := opts.Open(ctx, args.URL); err != nil {
					fmt.Fprintf(opts.Out, "(could not open the browser: %v)\n", err)
				}
			}
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case res := <-codes:
				if res.Code == "" {
					return nil, fmt.Errorf("the authorization server refused: %s", res.State)
				}
				return res, nil
			}
		},
		NewTokenSource: func(ctx context.Context, oc *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			g := &Grant{
				Server: cfg.URL, ClientID: oc.ClientID, ClientSecret: oc.ClientSecret, AuthStyle: int(oc.Endpoint.AuthStyle),
				AuthURL: oc.Endpoint.AuthURL, TokenURL: oc.Endpoint.TokenURL, Scopes: oc.Scopes, Token: tok,
			}
			if err := store.Save(cfg.URL, g); err != nil {
				return nil, err
			}
			saved = g
			return oauth2.StaticTokenSource(tok), nil
		},
	}
	if opts.ClientID != "" {
		hcfg.PreregisteredClient = &oauthex.ClientCredentials{ClientID: opts.ClientID}
		if opts.ClientSecret != "" {
			hcfg.PreregisteredClient.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: opts.ClientSecret}
		}
	} else {
		hcfg.DynamicClientRegistrationConfig = &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			RedirectURIs: []string{redirect}, ClientName: "toolhost", TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"},
		}}
	}
	handler, err := auth.NewAuthorizationCodeHandler(hcfg)
	if err != nil {
		return fmt.Errorf("mcp: login %q: %w", cfg.Name, err)
	}

	req, resp, err := probe(ctx, hc, cfg, "")
	if err != nil {
		return fmt.Errorf("mcp: login %q at %s: cannot reach the server: %w", cfg.Name, RedactURL(cfg.URL), err)
	}
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return ErrNoAuthorizationNeeded
		}
		return fmt.Errorf("mcp: login %q at %s: the server answered HTTP %d to initialize, not 401", cfg.Name, RedactURL(cfg.URL), resp.StatusCode)
	}
	if err := handler.Authorize(ctx, req, resp); err != nil { // closes resp.Body
		return fmt.Errorf("mcp: login %q at %s: %w", cfg.Name, RedactURL(cfg.URL), err)
	}
	if saved == nil {
		return fmt.Errorf("mcp: login %q at %s: the server refused access without asking for more scope (HTTP %d)", cfg.Name, RedactURL(cfg.URL), resp.StatusCode)
	}
	// Check that the server takes the token.
	_, resp, err = probe(ctx, hc, cfg, saved.Token.AccessToken)
	if err != nil {
		return fmt.Errorf("mcp: login %q: authorized, but the check failed: %w", cfg.Name, err)
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return fmt.Errorf("mcp: login %q: authorized, but the server still answers HTTP %d", cfg.Name, resp.StatusCode)
	}
	fmt.Fprintf(opts.Out, "Authorized %q; the token is stored in %s\n", cfg.Name, store.Dir)
	return nil
}

// probe sends an initialize request as the streamable HTTP transport would.
func probe(ctx context.Context, hc *http.Client, cfg Config, token string) (*http.Request, *http.Response, error) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"toolhost","version":"` + version() + `"}}}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, v := range cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		// Do not leave the probing session behind.
		del, _ := http.NewRequestWithContext(ctx, http.MethodDelete, cfg.URL, nil)
		for k, v := range cfg.Headers {
			del.Header.Set(k, v)
		}
		if token != "" {
			del.Header.Set("Authorization", "Bearer "+token)
		}
		del.Header.Set("Mcp-Session-Id", sid)
		if r, err := hc.Do(del); err == nil {
			r.Body.Close()
		}
	}
	return req, resp, nil
}

// redirectHandler receives the authorization server's redirect and hands over the
// code (or, with an empty code, the error in State).
func redirectHandler(codes chan<- *auth.AuthorizationResult) http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/callback" {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		res := &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}
		msg := "toolhost is authorized. You can close this window."
		if res.Code == "" {
			res.State = q.Get("error") + " " + q.Get("error_description")
			msg = "Authorization failed: " + res.State
		}
		once.Do(func() { codes <- res })
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!doctype html><title>toolhost</title><p>%s</p>", html.EscapeString(msg))
	})
}

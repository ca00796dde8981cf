package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/supervise"
)

// goServer is a Go SDK MCP server on loopback, over streamable HTTP or HTTP+SSE,
// optionally behind a static bearer token. It can be killed and started again on
// the same address.
type goServer struct {
	t     *testing.T
	addr  string
	token string
	sse   bool
	wrap  func(http.Handler) http.Handler

	mu     sync.Mutex
	srv    *http.Server
	server *gomcp.Server
	ran    int // how many times it started
}

func startGoServer(t *testing.T, token string, sse bool) *goServer {
	t.Helper()
	s := &goServer{t: t, token: token, sse: sse}
	s.start("127.0.0.1:0")
	t.Cleanup(s.kill)
	return s
}

func (s *goServer) URL() string { return "http://" + s.addr + "/mcp" }

func (s *goServer) start(addr string) {
	s.t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		s.t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	s.mu.Lock()
	s.ran++
	run := s.ran
	s.mu.Unlock()
	server := gomcp.NewServer(&gomcp.Implementation{Name: "go-test", Version: "1"}, nil)
	type echoIn struct {
		Text string `json:"text"`
	}
	gomcp.AddTool(server, &gomcp.Tool{Name: "echo", Description: "Echoes its text."},
		func(ctx context.Context, req *gomcp.CallToolRequest, in echoIn) (*gomcp.CallToolResult, any, error) {
			return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: in.Text}}}, nil, nil
		})
	gomcp.AddTool(server, &gomcp.Tool{Name: "run", Description: "Says which run of the server answers."},
		func(ctx context.Context, req *gomcp.CallToolRequest, _ struct{}) (*gomcp.CallToolResult, any, error) {
			return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: strings.Repeat("I", run)}}}, nil, nil
		})
	var h http.Handler
	if s.sse {
		h = gomcp.NewSSEHandler(func(*http.Request) *gomcp.Server { return server }, nil)
	} else {
		h = gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return server }, nil)
	}
	if s.token != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+s.token {
				w.Header().Set("WWW-Authenticate", `Bearer realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	if s.wrap != nil {
		h = s.wrap(h)
	}
	srv := &http.Server{Handler: h}
	s.mu.Lock()
	s.srv, s.server = srv, server
	s.mu.Unlock()
	go srv.Serve(lis)
}

// kill closes the listener and every connection at once, as a crash would.
func (s *goServer) kill() {
	s.mu.Lock()
	srv, server := s.srv, s.server
	s.srv, s.server = nil, nil
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
		for ss := range server.Sessions() {
			ss.Close()
		}
	}
}

func (h *host) remote(name, url string, edit func(*mcp.Config)) mcp.Config {
	cfg := mcp.Config{
		Name: name, Remote: mcp.Remote{URL: url, TokenDir: h.t.TempDir()},
		StartTimeout: 10 * time.Second, StopGrace: time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: h.logs}),
	}
	if edit != nil {
		edit(&cfg)
	}
	return cfg
}

func (h *host) start(cfg mcp.Config) (*mcp.Supervisor, error) {
	return mcp.Supervise(h.t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc})
}

func TestRemoteStreamableWithBearerToken(t *testing.T) {
	h := newBareHost(t)
	srv := startGoServer(t, "s3cret-token", false)
	sup := h.supervise(h.remote("go", srv.URL(), func(c *mcp.Config) {
		c.Headers = map[string]string{"Authorization": "Bearer s3cret-token"}
	}))
	if got := sup.Current().Transport(); got != mcp.TransportStreamable {
		t.Errorf("transport %q, want %q", got, mcp.TransportStreamable)
	}
	if names := h.names(); !names["go_echo"] || !names["go_run"] {
		t.Fatalf("names %v, want go_echo and go_run", names)
	}
	s := mustSettle(t, h, "go_echo", `{"text":"hello over http"}`)
	if s.Text() != "hello over http" {
		t.Errorf("echo: %q", s.Text())
	}

	// A tool added on the server reaches the registry through list_changed on the
	// standalone stream.
	srv.mu.Lock()
	server := srv.server
	srv.mu.Unlock()
	server.AddTool(&gomcp.Tool{Name: "added", Description: "Added later.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *gomcp.CallToolRequest) (*gomcp.CallToolResult, error) {
			return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: "late"}}}, nil
		})
	waitListed(t, sup.Current(), func() bool { return h.names()["go_added"] })
	if s := mustSettle(t, h, "go_added", `{}`); s.Text() != "late" {
		t.Errorf("added: %q", s.Text())
	}
	if h.logs.Contains("s3cret-token") {
		t.Error("the token appears in the logs")
	}
}

func TestRemoteWrongToken(t *testing.T) {
	h := newBareHost(t)
	srv := startGoServer(t, "right", false)
	_, err := h.start(h.remote("go", srv.URL()+"?key=hidden", func(c *mcp.Config) {
		c.Headers = map[string]string{"Authorization": "Bearer wrong-value"}
	}))
	var auth *mcp.AuthRequiredError
	if !errors.As(err, &auth) || auth.Status != http.StatusUnauthorized {
		t.Fatalf("err = %v, want an *AuthRequiredError with 401", err)
	}
	msg := err.Error()
	for _, want := range []string{`server "go"`, "127.0.0.1", "HTTP 401", "refused the credentials in the configured headers (Authorization)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	for _, secret := range []string{"wrong-value", "hidden"} {
		if strings.Contains(msg, secret) || h.logs.Contains(secret) {
			t.Errorf("%q leaks into the error or logs: %s", secret, msg)
		}
	}
}

func TestRemoteNoTokenAsksForLogin(t *testing.T) {
	h := newBareHost(t)
	srv := startGoServer(t, "right", false)
	_, err := h.start(h.remote("go", srv.URL(), func(c *mcp.Config) { c.LoginHint = "toolhost mcp-login go --location /ws" }))
	var auth *mcp.AuthRequiredError
	if !errors.As(err, &auth) {
		t.Fatalf("err = %v, want an *AuthRequiredError", err)
	}
	if !strings.Contains(err.Error(), "no OAuth token is stored") || !strings.Contains(err.Error(), "run: toolhost mcp-login go --location /ws") {
		t.Errorf("error does not tell the person to log in: %v", err)
	}
}

func TestRemoteHTML(t *testing.T) {
	for _, status := range []int{http.StatusOK, http.StatusNotFound} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			h := newBareHost(t)
			page := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.WriteHeader(status)
				w.Write([]byte("<!doctype html><title>Welcome</title><h1>Sign in</h1>"))
			})}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go page.Serve(lis)
			t.Cleanup(func() { page.Close() })
			_, err = h.start(h.remote("site", "http://"+lis.Addr().String()+"/", nil))
			var rerr *mcp.RemoteError
			if !errors.As(err, &rerr) || rerr.ContentType != "text/html" {
				t.Fatalf("err = %v, want a *RemoteError about HTML", err)
			}
			if !strings.Contains(err.Error(), "HTML page") || !strings.Contains(err.Error(), `server "site"`) {
				t.Errorf("unclear error: %v", err)
			}
		})
	}
}

func TestRemoteUnreachable(t *testing.T) {
	h := newBareHost(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	_, err = h.start(h.remote("gone", "http://"+addr+"/mcp", nil))
	var serr *mcp.StartError
	if !errors.As(err, &serr) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want a *StartError naming %s and the refusal", err, addr)
	}
}

func TestRemoteSSEFallback(t *testing.T) {
	h := newBareHost(t)
	srv := startGoServer(t, "", true)
	sup := h.supervise(h.remote("old", srv.URL(), nil))
	if got := sup.Current().Transport(); got != mcp.TransportSSE {
		t.Errorf("transport %q, want %q after the fallback", got, mcp.TransportSSE)
	}
	if s := mustSettle(t, h, "old_echo", `{"text":"via sse"}`); s.Text() != "via sse" {
		t.Errorf("echo: %q", s.Text())
	}

	// Configured as SSE: no streamable attempt.
	h2 := newBareHost(t)
	sup2 := h2.supervise(h2.remote("old", srv.URL(), func(c *mcp.Config) { c.Transport = mcp.TransportSSE }))
	if got := sup2.Current().Transport(); got != mcp.TransportSSE {
		t.Errorf("transport %q, want %q", got, mcp.TransportSSE)
	}
}

func TestRemoteServerRestartsMidSession(t *testing.T) {
	h := newBareHost(t)
	srv := startGoServer(t, "", false)
	sup := h.supervise(h.remote("go", srv.URL(), func(c *mcp.Config) {
		c.Budget = supervise.Budget{Crashes: 5, Window: time.Minute, MinBackoff: 10 * time.Millisecond}
	}))
	if s := mustSettle(t, h, "go_run", `{}`); s.Text() != "I" {
		t.Fatalf("first run: %q", s.Text())
	}
	first := sup.Current()
	addr := srv.addr
	srv.kill()
	srv.start(addr) // the same address, a server that knows no session

	// The client's stream reconnects to a server that answers 404 for the old
	// session: the generation ends and the supervisor starts the next.
	hosttest.UntilChanged(t, sup.Changed, func() bool {
		st, _ := sup.State()
		return st == supervise.Running && sup.Current() != first
	})
	if s := mustSettle(t, h, "go_run", `{}`); s.Text() != "II" {
		t.Errorf("after the restart: %q, want the second run", s.Text())
	}
	if !h.logs.Contains("MCP server crashed") {
		t.Error("the crash was not logged")
	}
	_ = registry.Completed
}

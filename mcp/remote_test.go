package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
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
	gomcp.AddTool(server, &gomcp.Tool{Name: "progress", Description: "Reports progress, then answers."},
		func(ctx context.Context, req *gomcp.CallToolRequest, _ struct{}) (*gomcp.CallToolResult, any, error) {
			err := req.Session.NotifyProgress(ctx, &gomcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(), Progress: 1, Total: 2, Message: "half way"})
			if err != nil {
				return nil, nil, err
			}
			return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: "done"}}}, nil, nil
		})
	type askIn struct {
		N int `json:"n"`
	}
	gomcp.AddTool(server, &gomcp.Tool{Name: "ask", Description: "Asks the person n questions at once; says how they were answered."},
		func(ctx context.Context, req *gomcp.CallToolRequest, in askIn) (*gomcp.CallToolResult, any, error) {
			var mu sync.Mutex
			var wg sync.WaitGroup
			var report struct {
				Answered int
				Refused  map[string]int // by code
				Messages []string
			}
			report.Refused = map[string]int{}
			for range in.N {
				wg.Go(func() {
					_, err := req.Session.Elicit(ctx, &gomcp.ElicitParams{Message: "Your name?",
						RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}}})
					mu.Lock()
					defer mu.Unlock()
					var rpc *jsonrpc.Error
					switch {
					case err == nil:
						report.Answered++
					case errors.As(err, &rpc):
						report.Refused[strconv.Itoa(int(rpc.Code))]++
						if len(report.Messages) == 0 {
							report.Messages = append(report.Messages, rpc.Message)
						}
					default:
						report.Refused["?"]++
						report.Messages = append(report.Messages, err.Error())
					}
				})
			}
			wg.Wait()
			text, _ := json.Marshal(report)
			return &gomcp.CallToolResult{Content: []gomcp.Content{&gomcp.TextContent{Text: string(text)}}}, nil, nil
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

// A remote server's progress reaches the call (through its gate, as it is read),
// over streamable HTTP and HTTP+SSE.
func TestRemoteProgress(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(map[bool]string{false: "Streamable", true: "SSE"}[sse], func(t *testing.T) {
			h := newBareHost(t)
			srv := startGoServer(t, "", sse)
			h.supervise(h.remote("go", srv.URL(), nil))
			q, err := h.reg.Prepare(h.loc)
			if err != nil {
				t.Fatal(err)
			}
			var events []sdk.Progress
			st, err := q.Settle(t.Context(), registry.Call{Name: "go_progress", Input: []byte(`{}`),
				Progress: func(p sdk.Progress) { events = append(events, p) }})
			if err != nil || st.Text() != "done" {
				t.Fatalf("progress: %v %v", st, err)
			}
			if len(events) != 1 || events[0].Progress != 1 || events[0].Total != 2 || events[0].Message != "half way" {
				t.Errorf("progress events %+v; want one, 1 of 2, half way", events)
			}
		})
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

// A remote server's asks are held to the same limits as a stdio server's: of 30
// questions put at once, the person is asked one at a time, at most the burst in
// all, and the server hears why the others were refused (by the ask limits, or,
// past the 16 requests the host answers at once, by its gate).
func TestRemoteServerAsksAreBounded(t *testing.T) {
	h := newBareHost(t)
	srv := startGoServer(t, "", false)
	h.supervise(h.remote("go", srv.URL(), nil))
	p := &countingPerson{}
	s, err := h.settle(sdk.WithInteractor(t.Context(), p), "go_ask", `{"n":30}`)
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("ask: %v %v", s, err)
	}
	var r struct {
		Answered int
		Refused  map[string]int
		Messages []string
	}
	if err := json.Unmarshal([]byte(s.Text()), &r); err != nil {
		t.Fatalf("ask: %q: %v", s.Text(), err)
	}
	asked, maxOpen := p.counts()
	t.Logf("%+v; the person was asked %d, at most %d at once", r, asked, maxOpen)
	if maxOpen != 1 || asked != r.Answered || asked > mcp.DefaultAskBurst || r.Refused["-32000"] == 0 || r.Refused["-32000"]+r.Refused["-32600"] != 30-asked {
		t.Errorf("the person was asked %d, at most %d at once; the server got %d answers and refusals %v; want at most %d, one at a time, the rest refused with -32000 or -32600",
			asked, maxOpen, r.Answered, r.Refused, mcp.DefaultAskBurst)
	}
}

// countingPerson answers every question, counting them and how many are open
// at once.
type countingPerson struct {
	mu                   sync.Mutex
	open, maxOpen, asked int
}

func (p *countingPerson) Ask(ctx context.Context, _ sdk.Question) (sdk.Answer, error) {
	p.mu.Lock()
	p.asked++
	p.open++
	p.maxOpen = max(p.maxOpen, p.open)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.open--
		p.mu.Unlock()
	}()
	runtime.Gosched() // give the other asks a chance to arrive meanwhile
	return sdk.Answer{Action: sdk.Accepted, Content: []byte(`{"name":"Ada"}`)}, nil
}

func (p *countingPerson) Sample(context.Context, sdk.SampleRequest) (sdk.SampleResult, error) {
	return sdk.SampleResult{}, &sdk.UnansweredError{Op: "sample", Reason: "this test answers questions only"}
}

func (p *countingPerson) counts() (asked, maxOpen int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asked, p.maxOpen
}

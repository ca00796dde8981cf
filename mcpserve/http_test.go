package mcpserve_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/mcpserve"
)

// httpFixture serves f's Server over HTTP with o (its Token "s3cret" unless set).
type httpFixture struct {
	h     http.Handler
	url   string
	token string
}

func (f *fixture) http(t *testing.T, o mcpserve.HTTPOptions) *httpFixture {
	t.Helper()
	if o.Token == "" {
		o.Token = "s3cret"
	}
	h := f.srv.Handler(o)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { f.srv.Close() }) // ends the sessions' streams before ts.Close waits for them
	return &httpFixture{h: h, url: ts.URL, token: o.Token}
}

// do sends one request with the token (and the session id, if any) and returns
// the response with its body read.
func (hf *httpFixture) do(t *testing.T, method, session, body string, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, hf.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+hf.token)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for k, v := range header {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

// TestHTTPSessionsIdleOut: a session whose client sends nothing more (no DELETE)
// is closed once it has idled for SessionIdleTimeout, and its id is then unknown.
func TestHTTPSessionsIdleOut(t *testing.T) {
	f := start(t, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{SessionIdleTimeout: time.Millisecond})
	var ids []string
	for range 20 {
		resp, _ := hf.do(t, "POST", "", initialize, nil)
		ids = append(ids, resp.Header.Get("Mcp-Session-Id"))
	}
	if err := mcpserve.WaitSessions(t.Context(), hf.h, 0); err != nil {
		t.Fatal(err)
	}
	if n := mcpserve.SDKSessions(f.srv); n != 0 {
		t.Errorf("%d sessions live in the go-sdk after idling, want 0", n)
	}
	for _, id := range ids {
		if id == "" { // closed before its initialize was served: nothing to address
			continue
		}
		if resp, body := hf.do(t, "POST", id, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("ping on an idled-out session: %d %q, want 404", resp.StatusCode, body)
		}
	}
}

// TestHTTPSessionCap: past MaxSessions live sessions an initialize is refused
// with 503 and a JSON-RPC error naming the limit, concurrent initializes included;
// once a client DELETEs its session a new one is served.
func TestHTTPSessionCap(t *testing.T) {
	f := start(t, "ws")
	const limit = 3
	hf := f.http(t, mcpserve.HTTPOptions{MaxSessions: limit})

	var mu sync.Mutex
	var ids []string
	var refused [][]byte
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			resp, body := hf.do(t, "POST", "", initialize, nil)
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case http.StatusOK:
				ids = append(ids, resp.Header.Get("Mcp-Session-Id"))
			case http.StatusServiceUnavailable:
				if resp.Header.Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
				refused = append(refused, body)
			default:
				t.Errorf("initialize: %d %q", resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	if len(ids) != limit || len(refused) != 8-limit {
		t.Fatalf("%d sessions served and %d refused, want %d and %d", len(ids), len(refused), limit, 8-limit)
	}
	if n := mcpserve.SDKSessions(f.srv); n != limit {
		t.Errorf("%d sessions live in the go-sdk, want %d", n, limit)
	}
	var m struct {
		ID    any `json:"id"`
		Error struct {
			Code    int            `json:"code"`
			Message string         `json:"message"`
			Data    map[string]int `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(refused[0], &m); err != nil || m.Error.Code != -32000 || m.Error.Data["limit"] != limit ||
		!strings.Contains(m.Error.Message, "at most 3 sessions") || !strings.Contains(m.Error.Message, "DELETE") {
		t.Errorf("refusal %q (%v), want a JSON-RPC error -32000 naming the limit and DELETE", refused[0], err)
	}

	if resp, body := hf.do(t, "DELETE", ids[0], "", nil); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %q", resp.StatusCode, body)
	}
	if err := mcpserve.WaitSessions(t.Context(), hf.h, limit-1); err != nil {
		t.Fatal(err)
	}
	if resp, body := hf.do(t, "POST", "", initialize, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("initialize after a DELETE: %d %q, want 200", resp.StatusCode, body)
	}
}

// openSession initializes a session that has set its log level to debug and
// returns its id.
func (hf *httpFixture) openSession(t *testing.T) string {
	t.Helper()
	resp, body := hf.do(t, "POST", "", initialize, nil)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %q", resp.StatusCode, body)
	}
	for _, msg := range []string{
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}`,
	} {
		if resp, body := hf.do(t, "POST", id, msg, nil); resp.StatusCode/100 != 2 {
			t.Fatalf("%s: %d %q", msg, resp.StatusCode, body)
		}
	}
	return id
}

// TestHTTPStalledStreamHoldsUpNoOne: a client that stops reading its GET stream
// does not keep another session from getting its log messages: the write to the
// stalled stream gives up after WriteTimeout and the stream is closed.
func TestHTTPStalledStreamHoldsUpNoOne(t *testing.T) {
	f := start(t, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{WriteTimeout: 100 * time.Millisecond})
	stalled, reading := hf.openSession(t), hf.openSession(t)

	// The stalled client reads its GET stream's response header, then nothing.
	conn, err := net.Dial("tcp", strings.TrimPrefix(hf.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10) // so fewer messages fill it
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\nMcp-Session-Id: %s\r\n\r\n", hf.token, stalled)
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}

	// The reading client hands on the number of every log message it gets.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", hf.url, nil)
	req.Header.Set("Authorization", "Bearer "+hf.token)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", reading)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %v", err, resp)
	}
	defer resp.Body.Close()
	got := make(chan int, 1)
	go func() {
		defer close(got)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m struct {
				Params struct {
					Data struct{ N string } `json:"data"`
				} `json:"params"`
			}
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || json.Unmarshal([]byte(data), &m) != nil || m.Params.Data.N == "" {
				continue
			}
			n, _ := strconv.Atoi(m.Params.Data.N)
			got <- n
		}
	}()

	// 8 MiB of log messages, twice what the stalled client's socket buffers hold
	// (the sender's grows to 4 MiB on Linux), each sent once the reading client has the one before (so none is
	// dropped for a full queue).
	sink := f.srv.LogSink()
	pad := strings.Repeat("x", 256<<10)
	for i := range 32 {
		sink.Accept("test", hclog.Info, pad, "n", strconv.Itoa(i))
		if n, ok := <-got; !ok || n != i {
			t.Fatalf("the reading client got message %d (stream open %v), want %d", n, ok, i)
		}
	}
}

// TestHTTPRefusalsCloseTheConnection: a request refused before it reaches the
// session (no token, a foreign Host or Origin, OAuth discovery) does not leave its
// connection open for the next one.
func TestHTTPRefusalsCloseTheConnection(t *testing.T) {
	f := start(t)
	hf := f.http(t, mcpserve.HTTPOptions{})
	for _, tc := range []struct {
		name   string
		method string
		header map[string]string
		path   string
		want   int
	}{
		{"NoToken", "POST", map[string]string{"Authorization": ""}, "/", http.StatusUnauthorized},
		{"NoTokenDELETE", "DELETE", map[string]string{"Authorization": "", "Mcp-Session-Id": "x"}, "/", http.StatusUnauthorized},
		{"NoTokenGET", "GET", map[string]string{"Authorization": "Bearer s3cre", "Mcp-Session-Id": "x"}, "/", http.StatusUnauthorized},
		{"ForeignHost", "POST", map[string]string{"Host": "evil.example:80"}, "/", http.StatusForbidden},
		{"ForeignOrigin", "POST", map[string]string{"Origin": "http://evil.example"}, "/", http.StatusForbidden},
		{"NullOrigin", "POST", map[string]string{"Origin": "null"}, "/", http.StatusForbidden},
		{"OAuthDiscovery", "GET", nil, "/.well-known/oauth-authorization-server", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := *hf
			u.url += tc.path
			resp, body := u.do(t, tc.method, "", initialize, tc.header)
			if resp.StatusCode != tc.want || !resp.Close {
				t.Errorf("%d (connection closed %v) %q, want %d and the connection closed", resp.StatusCode, resp.Close, body, tc.want)
			}
		})
	}
}

// TestHTTPInitializeIsBounded: the POST that makes a session, whose initialize
// params the session keeps for its life, is refused (413) past 64 KiB, though
// other requests may be as large as MaxRequestBytes.
func TestHTTPInitializeIsBounded(t *testing.T) {
	f := start(t)
	hf := f.http(t, mcpserve.HTTPOptions{})
	big := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"experimental":{"x":"` +
		strings.Repeat("a", 1<<20) + `"}},"clientInfo":{"name":"raw","version":"1"}}}`
	if resp, body := hf.do(t, "POST", "", big, nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 1 MiB initialize: %d (%d bytes of body), want 413", resp.StatusCode, len(body))
	}
	if n := mcpserve.SDKSessions(f.srv); n != 0 {
		t.Errorf("%d sessions live, want none", n)
	}
	if err := mcpserve.WaitSessions(t.Context(), hf.h, 0); err != nil {
		t.Fatal(err)
	}
	id := hf.openSession(t)
	ping := `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"_meta":{"x":"` + strings.Repeat("a", 1<<20) + `"}}}`
	if resp, body := hf.do(t, "POST", id, ping, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("a 1 MiB ping in a session: %d %q, want 200", resp.StatusCode, body)
	}
}

// TestHTTPSessionIDStaysWithTheClient: the session id a tool's invocation carries
// is not the HTTP session's Mcp-Session-Id, which (with the token) addresses the
// session: a plugin learns nothing it could use to reach the client's session.
func TestHTTPSessionIDStaysWithTheClient(t *testing.T) {
	f := start(t, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{})
	client := gomcp.NewClient(&gomcp.Implementation{Name: "go-http", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &gomcp.StreamableClientTransport{Endpoint: hf.url, HTTPClient: &http.Client{Transport: bearer{hf.token}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	got := text(call(t, cs, "session", map[string]string{"text": ""}))
	if !strings.HasPrefix(got, "mcp_") || cs.ID() == "" || strings.Contains(got, cs.ID()) {
		t.Errorf("the invocation's session id %q, the HTTP session's %q: want an mcp_ id of its own", got, cs.ID())
	}
}

// TestHTTPSessionsCannotCancelEachOther: notifications/cancelled naming a request
// id of another session's call leaves that call alone (request ids are per
// session).
func TestHTTPSessionsCannotCancelEachOther(t *testing.T) {
	f := start(t, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{})
	a, b := hf.openSession(t), hf.openSession(t)

	req, _ := http.NewRequestWithContext(t.Context(), "POST", hf.url, strings.NewReader(
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"wait","arguments":{"steps":20,"step_ms":10},"_meta":{"progressToken":"a"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+hf.token)
	req.Header.Set("Mcp-Session-Id", a)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	cancelled := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatal(err)
		}
		if m["method"] == "notifications/progress" && !cancelled { // under way: b cancels "its" request 7
			cancelled = true
			if resp, body := hf.do(t, "POST", b, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`, nil); resp.StatusCode/100 != 2 {
				t.Fatalf("cancel from b: %d %q", resp.StatusCode, body)
			}
			continue
		}
		if m["id"] == 7.0 {
			if res, _ := m["result"].(map[string]any); res == nil || res["isError"] == true {
				t.Fatalf("a's call after b's cancel: %v, want its result", m)
			}
			return
		}
	}
	t.Fatalf("a's stream ended without the call's answer: %v", sc.Err())
}

package mcpserve_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

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
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
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

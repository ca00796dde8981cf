package mcpserve_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/mcpserve"
)

// next returns the next message of the raw session, notifications included.
func (rs *rawSession) next(t *testing.T) map[string]any {
	t.Helper()
	line, err := rs.r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("server wrote a non-JSON line %q", line)
	}
	return m
}

// TestCallsPerSessionAreBounded: a session with MaxCallsPerSession calls in flight
// has its next call refused at once with an error naming the limit; once one of
// them ends, a call is served again.
func TestCallsPerSessionAreBounded(t *testing.T) {
	f := startWith(t, mcpserve.Options{MaxCallsPerSession: 2}, "ws")
	rs := f.raw(t)
	rs.send(t, initialize)
	rs.recv(t)
	rs.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	long := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"wait","arguments":{"steps":100000,"step_ms":20},"_meta":{"progressToken":"p%d"}}}`, id, id)
	}
	rs.send(t, long(1))
	rs.send(t, long(2))
	// Both under way: a progress notification of each.
	for running := map[any]bool{}; len(running) < 2; {
		m := rs.next(t)
		if m["method"] != "notifications/progress" {
			t.Fatalf("before any progress: %v", m)
		}
		running[m["params"].(map[string]any)["progressToken"]] = true
	}

	rs.send(t, long(3))
	for {
		m := rs.next(t)
		if m["method"] == "notifications/progress" {
			if m["params"].(map[string]any)["progressToken"] == "p3" {
				t.Fatal("a third call runs beside two, past MaxCallsPerSession 2")
			}
			continue
		}
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		msg, _ := e["message"].(string)
		if m["id"] != 3.0 || errCode(m) != -32000 || data["limit"] != 2.0 || !strings.Contains(msg, "2 calls in flight") {
			t.Fatalf("third call: %v, want error -32000 naming the limit of 2", m)
		}
		break
	}

	rs.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	for {
		if m := rs.next(t); m["id"] == 1.0 {
			break
		}
	}
	rs.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"served"}}}`)
	for {
		m := rs.next(t)
		if m["id"] != 4.0 {
			continue
		}
		if res, _ := m["result"].(map[string]any); res == nil || res["isError"] == true {
			t.Fatalf("call after one ended: %v", m)
		}
		break
	}
}

// TestDisconnectWithAnAskPendingEndsTheSession: a client that goes away (closes
// stdin) while the host waits for its answer to an elicitation ends the session:
// ServeStdio returns, the call interrupted.
func TestDisconnectWithAnAskPendingEndsTheSession(t *testing.T) {
	f := start(t, "ws")
	rs := f.raw(t)
	rs.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	rs.recv(t)
	rs.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	rs.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"guarded","arguments":{"text":"go"}}}`)
	for {
		if m := rs.next(t); m["method"] == "elicitation/create" {
			break
		}
	}
	rs.w.Close() // never answered: the client goes away
	go func() {  // what the host still writes, until it is done
		for {
			if _, err := rs.r.ReadByte(); err != nil {
				return
			}
		}
	}()
	if err := <-rs.served; err != nil {
		t.Errorf("ServeStdio: %v", err)
	}
	rs.served <- nil // for the cleanup
}

// httpCall is one tools/call POSTed on an HTTP session whose answer streams back.
type httpCall struct {
	resp *http.Response
	sc   *bufio.Scanner
}

// startCall POSTs body on session id and returns the call with its stream open.
func (hf *httpFixture) startCall(t *testing.T, id, body string) *httpCall {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", hf.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+hf.token)
	req.Header.Set("Mcp-Session-Id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return &httpCall{resp: resp, sc: sc}
}

// next returns the call's next message; ok is false once its stream has ended.
func (c *httpCall) next(t *testing.T) (m map[string]any, ok bool) {
	t.Helper()
	for c.sc.Scan() {
		line := c.sc.Text()
		data, isData := strings.CutPrefix(line, "data: ")
		if !isData {
			if strings.HasPrefix(line, "{") { // a JSON reply rather than a stream
				data = line
			} else {
				continue
			}
		}
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("stream data %q: %v", data, err)
		}
		return m, true
	}
	return nil, false
}

// TestCallsOfAllSessionsAreBounded: MaxCalls bounds the calls in flight of every
// HTTP session together: with two sessions each running one call and MaxCalls 2,
// a third call, from either session and under its own session's limit, is refused
// at once with an error naming the host-wide limit; once one call ends a call is
// served again.
func TestCallsOfAllSessionsAreBounded(t *testing.T) {
	f := startWith(t, mcpserve.Options{MaxCalls: 2}, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{})
	a, b := hf.openSession(t), hf.openSession(t)
	long := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"wait","arguments":{"steps":100000,"step_ms":20},"_meta":{"progressToken":"p%d"}}}`, id, id)
	}
	running := map[string]*httpCall{a: hf.startCall(t, a, long(1)), b: hf.startCall(t, b, long(1))}
	for id, c := range running { // each under way: a progress notification
		if m, ok := c.next(t); !ok || m["method"] != "notifications/progress" {
			t.Fatalf("session %s's call before any progress: %v (stream open %v)", id, m, ok)
		}
	}

	for _, id := range []string{a, b} {
		m, ok := hf.startCall(t, id, long(2)).next(t)
		e, _ := m["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		msg, _ := e["message"].(string)
		if !ok || m["id"] != 2.0 || errCode(m) != -32000 || data["limit"] != 2.0 || data["scope"] != "host" ||
			!strings.Contains(msg, "2 calls in flight across all its sessions") {
			t.Fatalf("a third call, on a session with one: %v, want error -32000 naming the host-wide limit of 2", m)
		}
	}

	if resp, body := hf.do(t, "POST", a, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, nil); resp.StatusCode/100 != 2 {
		t.Fatalf("cancel: %d %q", resp.StatusCode, body)
	}
	for {
		m, ok := running[a].next(t)
		if !ok || m["id"] == 1.0 {
			break
		}
	}
	c := hf.startCall(t, b, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"served"}}}`)
	for {
		m, ok := c.next(t)
		if !ok {
			t.Fatal("the call after one ended: its stream ended without an answer")
		}
		if m["id"] != 3.0 {
			continue
		}
		if res, _ := m["result"].(map[string]any); res == nil || res["isError"] == true {
			t.Fatalf("the call after one ended: %v", m)
		}
		break
	}
	if resp, body := hf.do(t, "POST", b, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, nil); resp.StatusCode/100 != 2 {
		t.Fatalf("cancel: %d %q", resp.StatusCode, body)
	}
	for {
		if m, ok := running[b].next(t); !ok || m["id"] == 1.0 {
			break
		}
	}
}

// TestCloseInterruptsHTTPCalls: Server.Close interrupts an HTTP session's call in
// flight and returns: the call's stream ends, with the interruption as its answer
// if that was written before the session closed. The go-sdk
// closes a session only once its calls have returned, so Close waited for the
// call to end by itself, and toolhost mcp --http's shutdown with it.
func TestCloseInterruptsHTTPCalls(t *testing.T) {
	f := start(t, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{})
	id := hf.openSession(t)
	c := hf.startCall(t, id, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"wait","arguments":{"steps":1000000,"step_ms":20},"_meta":{"progressToken":"p"}}}`)
	if m, ok := c.next(t); !ok || m["method"] != "notifications/progress" {
		t.Fatalf("before any progress: %v (stream open %v)", m, ok)
	}
	closed := make(chan error, 1)
	go func() { closed <- f.srv.Close() }()
	for {
		m, ok := c.next(t)
		if !ok { // the session closed before its answer was written
			break
		}
		if m["id"] != 5.0 {
			continue
		}
		e, _ := m["error"].(map[string]any)
		if msg, _ := e["message"].(string); !strings.Contains(msg, "interrupted") {
			t.Fatalf("the call's answer once the server closed: %v, want an interruption", m)
		}
		break
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}

// TestHTTPPostsAreBounded: with MaxPosts POSTs in flight (two calls), the next
// POST is refused unread with 503 and a JSON-RPC error naming the limit; once one
// has ended a POST is served again.
func TestHTTPPostsAreBounded(t *testing.T) {
	f := start(t, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{MaxPosts: 2})
	id := hf.openSession(t)
	long := func(n int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"wait","arguments":{"steps":100000,"step_ms":20},"_meta":{"progressToken":"p%d"}}}`, n, n)
	}
	calls := []*httpCall{hf.startCall(t, id, long(1)), hf.startCall(t, id, long(2))}
	for _, c := range calls {
		if m, ok := c.next(t); !ok || m["method"] != "notifications/progress" {
			t.Fatalf("before any progress: %v (stream open %v)", m, ok)
		}
	}
	resp, body := hf.do(t, "POST", id, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, nil)
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	e, _ := m["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || data["limit"] != 2.0 || data["scope"] != "posts" {
		t.Fatalf("a POST past the limit: %d %q, want 503 naming the limit of 2", resp.StatusCode, body)
	}
	// A client that stops waiting for its call gives its POST's slot back: a POST
	// is served again.
	calls[0].resp.Body.Close()
	proctest.Until(t, func() bool {
		resp, _ := hf.do(t, "POST", id, `{"jsonrpc":"2.0","id":4,"method":"ping"}`, nil)
		return resp.StatusCode == http.StatusOK
	})
}

// TestHTTPDeleteInterruptsCalls: a client that DELETEs its session while a call
// runs has the call interrupted and the DELETE answered: the go-sdk closes a
// session only once its calls have returned, so the DELETE waited for the call
// to end by itself.
func TestHTTPDeleteInterruptsCalls(t *testing.T) {
	f := start(t, "ws")
	hf := f.http(t, mcpserve.HTTPOptions{})
	id := hf.openSession(t)
	c := hf.startCall(t, id, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"wait","arguments":{"steps":1000000,"step_ms":20},"_meta":{"progressToken":"p"}}}`)
	if m, ok := c.next(t); !ok || m["method"] != "notifications/progress" {
		t.Fatalf("before any progress: %v (stream open %v)", m, ok)
	}
	if resp, body := hf.do(t, "DELETE", id, "", nil); resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE with a call in flight: %d %q", resp.StatusCode, body)
	}
	for { // the call's stream ends, with the interruption if it was written first
		m, ok := c.next(t)
		if !ok {
			break
		}
		if m["id"] == 5.0 {
			if e, _ := m["error"].(map[string]any); e == nil {
				t.Fatalf("the call's answer once its session was deleted: %v, want an interruption", m)
			}
			break
		}
	}
}

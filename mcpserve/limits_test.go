package mcpserve_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

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

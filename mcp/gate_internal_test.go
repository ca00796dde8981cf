package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolhost/toolhost/internal/loglimit"
)

func testGate(t *testing.T, max int64, notify func(string, json.RawMessage)) *gate {
	logs := loglimit.New(hclog.NewNullLogger(), 0, 0)
	t.Cleanup(logs.Close)
	return newGate("srv", max, notify, logs)
}

func id(n int) jsonrpc.ID {
	v, _ := jsonrpc.MakeID(float64(n))
	return v
}

// A server's own requests are held until the host answers them, at most
// maxServing at once; one past that, or reusing an id being answered, is
// answered at once with an error and never reaches the session.
func TestGateBoundsTheServersRequests(t *testing.T) {
	g := testGate(t, 1<<20, nil)
	params := json.RawMessage(`{"messages":[]}`)
	for i := range maxServing {
		pass, reply := g.admit(&jsonrpc.Request{ID: id(i), Method: "sampling/createMessage", Params: params}, 100)
		if pass == nil || reply != nil {
			t.Fatalf("request %d: pass %v, reply %v; want it handed to the session", i, pass, reply)
		}
	}
	pass, reply := g.admit(&jsonrpc.Request{ID: id(maxServing), Method: "sampling/createMessage", Params: params}, 100)
	if pass != nil || reply == nil || !strings.Contains(reply.Error.Error(), fmt.Sprintf("%d requests of this server are being answered already", maxServing)) {
		t.Fatalf("request past maxServing: pass %v, reply %v; want it answered with an error", pass, reply)
	}
	if pass, reply := g.admit(&jsonrpc.Request{ID: id(0), Method: "ping"}, 100); pass != nil || reply == nil || !strings.Contains(reply.Error.Error(), "already in use") {
		t.Fatalf("a reused id: pass %v, reply %v; want it answered with an error", pass, reply)
	}
	// A cancellation reaches the session once, and only for a request being answered.
	cancel := func(n int) jsonrpc.Message {
		m, _ := g.admit(&jsonrpc.Request{Method: notifyCancelled, Params: json.RawMessage(fmt.Sprintf(`{"requestId":%d}`, n))}, 50)
		return m
	}
	if cancel(3) == nil || cancel(3) != nil || cancel(maxServing+5) != nil {
		t.Error("notifications/cancelled: want it passed once for a request being answered, never otherwise")
	}
	if held := g.b.held.Load(); held != maxServing*100 {
		t.Errorf("held %d bytes, want %d", held, maxServing*100)
	}
	// An answer being written still counts: a server that does not read its
	// answers keeps as many goroutines writing them as requests being answered.
	var written []func()
	for i := range maxServing {
		written = append(written, g.sent(t.Context(), &jsonrpc.Response{ID: id(i), Result: json.RawMessage(`{}`)}))
	}
	if pass, reply := g.admit(&jsonrpc.Request{ID: id(0), Method: "ping"}, 100); pass != nil || reply == nil || !strings.Contains(reply.Error.Error(), "being answered already") {
		t.Fatalf("a request while %d answers are being written: pass %v, reply %v; want it answered with an error", maxServing, pass, reply)
	}
	for _, w := range written {
		w()
	}
	if held := g.b.held.Load(); held != 0 {
		t.Errorf("every request answered: held %d bytes, want 0", held)
	}
	if pass, reply := g.admit(&jsonrpc.Request{ID: id(0), Method: "ping"}, 100); pass == nil || reply != nil {
		t.Errorf("a request once the answers are written: pass %v, reply %v; want it handed to the session", pass, reply)
	}
}

// A response is held until its request's context ends; one nobody waits for is
// dropped; notifications the host acts on are handled as they are read and never
// reach the session, the others are dropped.
func TestGateHoldsResponsesUntilTheirRequestEnds(t *testing.T) {
	var handled []string
	g := testGate(t, 1000, func(method string, _ json.RawMessage) { handled = append(handled, method) })
	ctx, end := context.WithCancel(t.Context())
	g.sent(ctx, &jsonrpc.Request{ID: id(1), Method: "tools/call"})
	if m, _ := g.admit(&jsonrpc.Response{ID: id(2), Result: json.RawMessage(`{}`)}, 600); m != nil {
		t.Error("a response nobody waits for reached the session")
	}
	if m, _ := g.admit(&jsonrpc.Response{ID: id(1), Result: json.RawMessage(`{}`)}, 600); m == nil {
		t.Fatal("the response to the call did not reach the session")
	}
	if g.b.held.Load() != 600 {
		t.Errorf("held %d, want 600 while the call runs", g.b.held.Load())
	}
	// While it is held, a notification of 600 bytes is past the budget.
	for _, method := range []string{notifyProgress, notifyMessage, notifyToolsListed, "notifications/resources/updated"} {
		if m, _ := g.admit(&jsonrpc.Request{Method: method}, 600); m != nil {
			t.Errorf("%s reached the session", method)
		}
	}
	if len(handled) != 0 {
		t.Errorf("handled %v past the budget", handled)
	}
	end()
	for g.b.held.Load() != 0 { // context.AfterFunc runs in its own goroutine
		runtime.Gosched()
	}
	for _, method := range []string{notifyProgress, notifyMessage, notifyToolsListed, "notifications/resources/updated"} {
		g.admit(&jsonrpc.Request{Method: method}, 600)
	}
	if strings.Join(handled, " ") != "notifications/progress notifications/message notifications/tools/list_changed" {
		t.Errorf("handled %v; want the three the host acts on", handled)
	}
	if g.b.held.Load() != 0 {
		t.Errorf("held %d after handling, want 0", g.b.held.Load())
	}
	// Under a context of hold, a response is held until release, not until the
	// context ends.
	hctx, release := g.hold(t.Context())
	g.sent(hctx, &jsonrpc.Request{ID: id(4), Method: "tools/list"})
	if m, _ := g.admit(&jsonrpc.Response{ID: id(4), Result: json.RawMessage(`{}`)}, 500); m == nil || g.b.held.Load() != 500 {
		t.Fatalf("a response under hold: %v, held %d; want it passed and held", m, g.b.held.Load())
	}
	release()
	if g.b.held.Load() != 0 {
		t.Errorf("released: held %d, want 0", g.b.held.Load())
	}
	// Past the budget, a response fails its call with a *BudgetError.
	g.sent(t.Context(), &jsonrpc.Request{ID: id(3), Method: "tools/call"})
	m, _ := g.admit(&jsonrpc.Response{ID: id(3), Result: json.RawMessage(`{}`)}, 1001)
	var budget *BudgetError
	if r, ok := m.(*jsonrpc.Response); !ok || !errors.As(r.Error, &budget) || budget.Limit != 1000 {
		t.Errorf("a response past the budget: %#v; want an error response carrying a *BudgetError", m)
	}
}

// The host's requests given up on without an answer are forgotten: what the gate
// keeps of them stays in proportion to the requests awaiting a response.
func TestGateForgetsRequestsGivenUpOn(t *testing.T) {
	g := testGate(t, 1<<20, nil)
	for i := range 1000 {
		ctx, cancel := context.WithCancel(t.Context())
		g.sent(ctx, &jsonrpc.Request{ID: id(i), Method: "tools/call"})
		cancel() // never answered
	}
	g.mu.Lock()
	n := len(g.calls)
	g.mu.Unlock()
	if n > 64 {
		t.Errorf("%d requests kept after 1,000 were given up on; want a few", n)
	}
}

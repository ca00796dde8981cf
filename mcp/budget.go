package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolhost/toolhost/internal/loglimit"
)

// A server's messages pass one counting point, its gate, on their way from the
// transport (the stdio connection, or the SDK's HTTP connection) to the session,
// and the host's messages pass it on their way back; so whatever the server sends,
// the bytes of its messages the host holds at once stay within its budget
// (Config.MaxHeldBytes):
//   - a response to one of the host's requests is counted from when it is read
//     until the host is done with it: a tool call's until the call returns, a
//     listing's pages until the listing is applied (both made under a context of
//     gate.hold), any other's until its request's context ends. A response past
//     the budget fails its request with a *BudgetError; a response to nothing the
//     host is waiting for is dropped;
//   - a notification the host acts on (progress, notifications/message,
//     tools/list_changed) is handled as it is read, before the next message is
//     read: it is never queued. One past the budget is dropped (and counted in a
//     log line). Notifications the host does not act on are dropped unread;
//     notifications/cancelled is passed on only for a request of the server's that
//     is being answered, once;
//   - a request of the server's (sampling, elicitation, ping, …) is counted until
//     the host has written its answer; at most maxServing are being answered (or
//     their answers written) at once, and one past that, past the budget or with
//     an id already being answered is refused: answered with an error through the
//     connection's queue (conn.reply), not handed to the session. So a server
//     that does not read its answers holds at most maxServing of the session's
//     goroutines, each blocked writing one.
//
// What a transport holds before the gate sees a message is bounded by the
// transport: one line of at most Config.MaxMessageBytes on stdio; over HTTP, the
// gate stands in the link's RoundTrip, below the go-sdk, and counts the message
// being read as well (remotegate.go).
type gate struct {
	b *budget
	// notify handles a notification the host acts on; it returns once handled.
	notify func(method string, params json.RawMessage)
	// logs says, within the server's log budget, what the gate dropped.
	logs *loglimit.Logger

	mu      sync.Mutex
	calls   map[jsonrpc.ID]context.Context // the host's requests awaiting a response
	swept   int                            // len(calls) after the last sweep
	serving map[jsonrpc.ID]*served         // the server's requests being answered
	writing int                            // answers to the server's requests being written
}

// holder is what the responses to the requests made under one context of
// gate.hold hold, until its release.
type holder struct {
	mu       sync.Mutex
	n        int64
	released bool
	// failure is the last error of the host's own a response was replaced with
	// (a *BudgetError, a *MessageTooLargeError): over HTTP the response reaches the
	// session encoded, its error as text, and the caller finds the error here.
	failure error
}

type holderKey struct{}

// hold returns a context under which the responses to the host's requests are
// held until release is called (once the host is done with them), and release.
func (g *gate) hold(ctx context.Context) (context.Context, func()) {
	h := &holder{}
	return context.WithValue(ctx, holderKey{}, h), func() {
		h.mu.Lock()
		n := h.n
		h.n, h.released = 0, true
		h.mu.Unlock()
		g.b.give(n)
	}
}

// heldFailure returns the error of the host's own that the last response to a
// request made under ctx (a context of gate.hold) was replaced with, or nil.
func heldFailure(ctx context.Context) error {
	h, ok := ctx.Value(holderKey{}).(*holder)
	if !ok {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failure
}

// served is one request of the server's being answered.
type served struct {
	n         int64 // bytes held
	cancelled bool  // its notifications/cancelled was passed on
}

// maxServing is how many of a server's requests the host answers at once: each
// waits for a person (sampling, elicitation) or is answered at once (ping).
const maxServing = 16

func newGate(server string, max int64, notify func(string, json.RawMessage), logs *loglimit.Logger) *gate {
	return &gate{
		b: &budget{server: server, max: max}, notify: notify, logs: logs,
		calls: map[jsonrpc.ID]context.Context{}, serving: map[jsonrpc.ID]*served{},
	}
}

// budget counts the bytes of a server's messages the host holds.
type budget struct {
	server string
	max    int64
	held   atomic.Int64
}

// take counts n more bytes held, or refuses them, the count unchanged, with a
// *BudgetError saying that what was refused.
func (b *budget) take(n int64, what string) error {
	if held := b.held.Add(n); held > b.max {
		b.held.Add(-n)
		return &BudgetError{Server: b.server, What: what, Size: n, Held: held - n, Limit: b.max}
	}
	return nil
}

func (b *budget) give(n int64) { b.held.Add(-n) }

// sizeOf is what a decoded message holds: its payload and a little besides.
func sizeOf(msg jsonrpc.Message) int64 {
	const overhead = 64
	switch m := msg.(type) {
	case *jsonrpc.Request:
		return int64(len(m.Method)+len(m.Params)) + overhead
	case *jsonrpc.Response:
		return int64(len(m.Result)) + overhead
	}
	return overhead
}

// sent notes a message the host is about to write, with the context it is written
// under: a request's context bounds how long its response is held; an answer to a
// request of the server's frees its id at once and ends the request's count when
// written, which the host reports by calling written.
func (g *gate) sent(ctx context.Context, msg jsonrpc.Message) (written func()) {
	written = func() {}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		if !m.IsCall() {
			return written
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		g.calls[m.ID] = ctx
		// A request given up on may never be answered: once the map has doubled,
		// forget those, so what it holds stays in proportion to the requests
		// awaiting a response.
		if len(g.calls) > 2*max(g.swept, 16) {
			for id, c := range g.calls {
				if c.Err() != nil {
					delete(g.calls, id)
				}
			}
			g.swept = len(g.calls)
		}
	case *jsonrpc.Response:
		g.mu.Lock()
		defer g.mu.Unlock()
		s := g.serving[m.ID]
		if s == nil {
			return written
		}
		delete(g.serving, m.ID)
		g.writing++
		return func() {
			g.mu.Lock()
			g.writing--
			g.mu.Unlock()
			g.b.give(s.n)
		}
	}
	return written
}

// admit decides what becomes of a message of n bytes read from the server: pass is
// what to hand the session (nil: nothing), reply what to write back to the server
// at once (nil: nothing).
func (g *gate) admit(msg jsonrpc.Message, n int64) (pass jsonrpc.Message, reply *jsonrpc.Response) {
	switch m := msg.(type) {
	case *jsonrpc.Response:
		return g.response(m, n), nil
	case *jsonrpc.Request:
		if m.IsCall() {
			return g.request(m, n)
		}
		return g.notification(m, n), nil
	}
	return nil, nil
}

func (g *gate) response(m *jsonrpc.Response, n int64) jsonrpc.Message {
	g.mu.Lock()
	ctx, ok := g.calls[m.ID]
	delete(g.calls, m.ID)
	g.mu.Unlock()
	if !ok || ctx.Err() != nil {
		return nil // nobody waits for it: the session would drop it too
	}
	h, _ := ctx.Value(holderKey{}).(*holder)
	if err := g.b.take(n, "the response to a request"); err != nil {
		m, n = &jsonrpc.Response{ID: m.ID, Error: err}, 0
	}
	var wire *jsonrpc.Error
	if h != nil && m.Error != nil && !errors.As(m.Error, &wire) {
		h.mu.Lock()
		h.failure = m.Error
		h.mu.Unlock()
	}
	if n == 0 {
		return m
	}
	if h != nil {
		h.mu.Lock()
		released := h.released
		if !released {
			h.n += n
		}
		h.mu.Unlock()
		if released {
			g.b.give(n)
			return nil
		}
		return m
	}
	context.AfterFunc(ctx, func() { g.b.give(n) })
	return m
}

func (g *gate) request(m *jsonrpc.Request, n int64) (jsonrpc.Message, *jsonrpc.Response) {
	refuse := func(err error) (jsonrpc.Message, *jsonrpc.Response) {
		return nil, &jsonrpc.Response{ID: m.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.serving[m.ID] != nil:
		return refuse(fmt.Errorf("toolhost: request id %v is already in use by a request being answered", m.ID.Raw()))
	case len(g.serving)+g.writing >= maxServing:
		return refuse(fmt.Errorf("toolhost: %d requests of this server are being answered already, the most the host answers at once; send it again once one is answered", maxServing))
	}
	if err := g.b.take(n, "a request ("+m.Method+")"); err != nil {
		return refuse(err)
	}
	g.serving[m.ID] = &served{n: n}
	return m, nil
}

// The notifications a server sends that the host acts on.
const (
	notifyProgress    = "notifications/progress"
	notifyMessage     = "notifications/message"
	notifyToolsListed = "notifications/tools/list_changed"
	notifyCancelled   = "notifications/cancelled"
)

func (g *gate) notification(m *jsonrpc.Request, n int64) jsonrpc.Message {
	switch m.Method {
	case notifyProgress, notifyMessage, notifyToolsListed:
		if err := g.b.take(n, "a notification ("+m.Method+")"); err != nil {
			g.logs.Log(hclog.Warn, "dropped a notification", "error", err)
			return nil
		}
		g.notify(m.Method, m.Params)
		g.b.give(n)
	case notifyCancelled:
		var p struct {
			RequestID any `json:"requestId"`
		}
		if json.Unmarshal(m.Params, &p) != nil {
			return nil
		}
		id, err := jsonrpc.MakeID(p.RequestID)
		if err != nil {
			return nil
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if s := g.serving[id]; s != nil && !s.cancelled {
			s.cancelled = true
			return m
		}
	}
	return nil
}

// ended releases what the server's requests held; the session is over.
func (g *gate) ended() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, s := range g.serving {
		g.b.give(s.n)
		delete(g.serving, id)
	}
}

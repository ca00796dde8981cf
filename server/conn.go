package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/stats"

	"github.com/toolhost/toolhost/registry"
)

// conn is one client transport connection: the identity Requests, calls and asks
// belong to. The server assigns it when the connection is accepted (a gRPC stats
// handler tags the connection's context), so a client cannot name or forge another
// connection's.
type conn struct {
	mu       sync.Mutex
	requests map[string]*request
	closed   bool
}

// request is a prepared registry Request held for its connection.
type request struct {
	id    string
	loc   string
	q     *registry.Request
	calls map[string]*call // in flight, by tool call id; guarded by conn.mu
}

// call is one Settle in flight.
type call struct {
	cancel context.CancelCauseFunc
}

// callKey identifies a call in flight across connections, to attribute the
// permission asks it raises.
type callKey struct {
	loc, session, callID string
}

type connKey struct{}

// connFrom returns the connection a call's context belongs to, or nil.
func connFrom(ctx context.Context) *conn {
	c, _ := ctx.Value(connKey{}).(*conn)
	return c
}

// connTagger gives every accepted connection its identity and cleans up after it.
type connTagger struct{}

func (connTagger) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &conn{requests: map[string]*request{}})
}

func (connTagger) HandleConn(ctx context.Context, st stats.ConnStats) {
	if _, end := st.(*stats.ConnEnd); !end {
		return
	}
	c := connFrom(ctx)
	if c == nil {
		return
	}
	// Its Requests go, and so do its calls (their streams are gone with it).
	c.mu.Lock()
	c.closed = true
	var cancels []context.CancelCauseFunc
	for _, r := range c.requests {
		for _, cl := range r.calls {
			cancels = append(cancels, cl.cancel)
		}
	}
	c.requests = nil
	c.mu.Unlock()
	for _, cancel := range cancels {
		cancel(errConnClosed)
	}
}

func (connTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connTagger) HandleRPC(context.Context, stats.RPCStats)                       {}

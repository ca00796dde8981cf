package server

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/registry"
)

// maxHandles bounds the client handles one connection holds at once.
const maxHandles = 1024

// maxWatches bounds the watch streams (WatchAsks, WatchInteractions,
// WatchSources) one connection has open at once, every handle's together. Each is
// a goroutine and a buffer of watcherBuffer events, and every ask or interaction
// is offered to every watcher under the Server's mu.
const maxWatches = 1024

// conn is one client transport connection. The server assigns it when the
// connection is accepted (the server's transport credentials attach it to the
// connection's auth info), so a client cannot name or forge another connection's.
// It holds the client handles opened on it: a handle is found only through the
// connection that opened it, and ends with it.
type conn struct {
	mu      sync.Mutex
	handles map[string]*handle
	closed  bool
	watches int // watch streams open (maxWatches)
}

// handle is one client handle (OpenClient): the owner of Requests, their calls and
// the permission asks those raise. Its fields are guarded by its conn's mu.
type handle struct {
	id       string
	conn     *conn
	requests map[string]*request
	closed   bool
	cause    error         // why it was closed
	done     chan struct{} // closed when the handle ends: its WatchAsks streams end
	unread   chan struct{} // closed when it ends for not reading (see unreadError)

	held atomic.Int64 // progress events its SettleStreams hold for the client (see progressSender)
}

// request is a prepared registry Request held for its handle.
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

// callKey identifies a call in flight across handles, to attribute the permission
// asks it raises.
type callKey struct {
	loc, session, callID string
}

// connFrom returns the connection a call's context belongs to, or nil.
func connFrom(ctx context.Context) *conn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	a, _ := p.AuthInfo.(connAuth)
	return a.conn
}

// watch counts one more watch stream of the call's connection, what, and returns
// the function that ends it; past maxWatches it fails with ResourceExhausted.
func watch(ctx context.Context, what string) (end func(), err error) {
	c := connFrom(ctx)
	if c == nil {
		return nil, status.Error(codes.Internal, "server: call without a connection identity")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watches >= maxWatches {
		return nil, status.Errorf(codes.ResourceExhausted, "%s refused: this connection has %d watch streams open (WatchAsks, WatchInteractions and WatchSources together), the most it may; end one you no longer read",
			what, maxWatches)
	}
	c.watches++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.watches--
			c.mu.Unlock()
		})
	}, nil
}

// open opens a new handle on c.
func (c *conn) open() (*handle, error) {
	h := &handle{id: newID("cl_"), conn: c, requests: map[string]*request{}, done: make(chan struct{}), unread: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, status.Error(codes.Canceled, "connection closed")
	case len(c.handles) >= maxHandles:
		return nil, status.Errorf(codes.ResourceExhausted, "this connection holds %d client handles, the most it may; close some (CloseClient)", len(c.handles))
	}
	c.handles[h.id] = h
	return h, nil
}

// handleFrom returns the handle id of the call's connection.
func handleFrom(ctx context.Context, id string) (*handle, error) {
	c := connFrom(ctx)
	if c == nil {
		return nil, status.Error(codes.Internal, "server: call without a connection identity")
	}
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "client_id is required: open a client handle with OpenClient")
	}
	c.mu.Lock()
	h := c.handles[id]
	c.mu.Unlock()
	if h == nil {
		return nil, status.Errorf(codes.NotFound, "no client handle %q on this connection (closed, or opened on another connection; open one with OpenClient)", id)
	}
	return h, nil
}

// close ends h: its Requests are dropped, its calls in flight cancelled with cause
// and its watchers ended. Idempotent; it reports whether this call ended it.
func (h *handle) close(cause error) bool {
	c := h.conn
	c.mu.Lock()
	if h.closed {
		c.mu.Unlock()
		return false
	}
	h.closed = true
	h.cause = cause
	delete(c.handles, h.id)
	cancels := h.cancelsLocked()
	h.requests = nil
	c.mu.Unlock()
	if _, ok := cause.(*unreadError); ok {
		close(h.unread)
	}
	close(h.done)
	for _, cancel := range cancels {
		cancel(cause)
	}
	return true
}

func (h *handle) cancelsLocked() []context.CancelCauseFunc {
	var cancels []context.CancelCauseFunc
	for _, r := range h.requests {
		for _, cl := range r.calls {
			cancels = append(cancels, cl.cancel)
		}
	}
	return cancels
}

// connCreds gives every accepted connection its identity, and ends it when gRPC
// closes the connection. (Credentials rather than a stats handler, which gRPC would
// also call for every event of every RPC.) The server speaks plain HTTP/2 over
// sockets its listeners already checked; these credentials add no security of their
// own.
type connCreds struct{}

// connAuth is the auth info of a connection: its identity.
type connAuth struct {
	credentials.CommonAuthInfo
	conn *conn
}

func (connAuth) AuthType() string { return "toolhost-conn" }

func (connCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c := &conn{handles: map[string]*handle{}}
	return &trackedConn{Conn: raw, c: c}, connAuth{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, conn: c}, nil
}

func (connCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("server: connCreds are for the server side only")
}

func (connCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "toolhost-conn"}
}

func (c connCreds) Clone() credentials.TransportCredentials { return c }

func (connCreds) OverrideServerName(string) error { return nil }

// trackedConn ends its connection's identity when it is closed. gRPC reads a
// wrapped connection, as it reads one from any credentials, through a buffer it
// keeps while the connection is idle (only for the standard library's own connection
// types does it wait for readiness first); a serve API has a few connections.
type trackedConn struct {
	net.Conn
	c    *conn
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(t.c.end)
	return t.Conn.Close()
}

// end closes the connection's handles: their Requests are dropped and their calls in
// flight cancelled (their streams are gone with the connection).
func (c *conn) end() {
	c.mu.Lock()
	c.closed = true
	handles := make([]*handle, 0, len(c.handles))
	for _, h := range c.handles {
		handles = append(handles, h)
	}
	c.mu.Unlock()
	for _, h := range handles {
		h.close(errConnClosed)
	}
}

package server

import (
	"context"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/toolhost/toolhost/registry"
)

// conn is one client transport connection: the identity Requests, calls and asks
// belong to. The server assigns it when the connection is accepted (the server's
// transport credentials attach it to the connection's auth info), so a client
// cannot name or forge another connection's.
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

// connFrom returns the connection a call's context belongs to, or nil.
func connFrom(ctx context.Context) *conn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	a, _ := p.AuthInfo.(connAuth)
	return a.conn
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
	c := &conn{requests: map[string]*request{}}
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

// end closes the connection's Requests and cancels their calls in flight (their
// streams are gone with it).
func (c *conn) end() {
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

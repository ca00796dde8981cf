package pluginpb

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// HostTokenEnv carries a per-launch secret from the host to the plugin. The host
// presents it on every connection to the plugin's server (ConnTokenVersion), or,
// to a plugin built with an older sdk, with every call; the plugin's server
// refuses connections (calls) without it. It stands in for the peer-pid check where
// that cannot tell the host apart: a plugin in its own PID namespace sees every
// process outside it, the host and other sources alike, as pid 0.
const HostTokenEnv = "TOOLHOST_HOST_TOKEN"

// ConnTokenVersion is the go-plugin application protocol version at which the host
// presents its token once per connection, before HTTP/2 begins (ConnTokenDialOptions,
// ConnTokenServerCreds). At version 1 (Handshake.ProtocolVersion), the only one a
// plugin built with an older sdk knows, it sends the token in a header on every call
// (TokenServerOptions checks it). Both ends offer both versions and go-plugin picks
// the highest they share. Per connection, the header's cost is gone from every call:
// the host's per-call credentials (about 10 allocations and 1 KB), and the header's
// encoding and decoding on both ends.
const ConnTokenVersion = 2

const (
	tokenKey = "toolhost-host-token"
	// connTokenMagic precedes the token on a connection.
	connTokenMagic = "toolhost-host-token/2 "
)

// OffersConnToken reports whether the host that launched this process offered
// ConnTokenVersion (in go-plugin's PLUGIN_PROTOCOL_VERSIONS), so that go-plugin's
// Serve picks it for a plugin that serves it.
func OffersConnToken() bool { return offered(ConnTokenVersion) }

// ConnTokenDialOptions present token on the host's connection to a plugin: once,
// when the connection opens, if perConn reports (at that moment) that the plugin
// negotiated ConnTokenVersion; otherwise in a header on every call. perConn must not
// change once a connection is open.
func ConnTokenDialOptions(token string, perConn func() bool) []grpc.DialOption {
	header := func(ctx context.Context) context.Context {
		if perConn() {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, tokenKey, token)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(connTokenClient{TransportCredentials: insecure.NewCredentials(), token: token, perConn: perConn}),
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(header(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(header(ctx), desc, cc, method, opts...)
		}),
	}
}

type connTokenClient struct {
	credentials.TransportCredentials
	token   string
	perConn func() bool
}

func (c connTokenClient) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c.perConn() {
		if d, ok := ctx.Deadline(); ok {
			_ = conn.SetWriteDeadline(d)
		}
		_, err := io.WriteString(conn, connTokenMagic+c.token)
		_ = conn.SetWriteDeadline(time.Time{})
		if err != nil {
			return nil, nil, fmt.Errorf("pluginpb: present the host token: %w", err)
		}
	}
	return c.TransportCredentials.ClientHandshake(ctx, authority, conn)
}

func (c connTokenClient) Clone() credentials.TransportCredentials { return c }

// ConnTokenServerCreds are inner's credentials, and then the token the host
// presents when the connection opens (ConnTokenDialOptions): a connection that does
// not begin with it is refused before any call.
func ConnTokenServerCreds(token string, inner credentials.TransportCredentials) credentials.TransportCredentials {
	return connTokenServer{TransportCredentials: inner, want: []byte(connTokenMagic + token)}
}

type connTokenServer struct {
	credentials.TransportCredentials
	want []byte
}

var errNotTheHost = errors.New("pluginpb: connection refused: not the host that launched this plugin")

func (c connTokenServer) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, auth, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	// Exactly the token's length: what follows is HTTP/2, gRPC's to read. gRPC's
	// connection timeout (a deadline on the connection during the handshake) bounds
	// the wait.
	got := make([]byte, len(c.want))
	_, err = io.ReadFull(conn, got)
	if err != nil || subtle.ConstantTimeCompare(got, c.want) != 1 {
		conn.Close()
		return nil, nil, errNotTheHost
	}
	return conn, auth, nil
}

func (c connTokenServer) Clone() credentials.TransportCredentials {
	return connTokenServer{TransportCredentials: c.TransportCredentials.Clone(), want: slices.Clone(c.want)}
}

// TokenServerOptions refuse every call that does not carry token in its header:
// the check for a host that negotiated version 1 (see ConnTokenVersion).
func TokenServerOptions(token string) []grpc.ServerOption {
	check := func(ctx context.Context) error {
		// ValueFromIncomingContext, not FromIncomingContext: that copies the whole
		// metadata on every call, where this reads one key.
		if v := metadata.ValueFromIncomingContext(ctx, tokenKey); len(v) == 1 && subtle.ConstantTimeCompare([]byte(v[0]), []byte(token)) == 1 {
			return nil
		}
		return status.Error(codes.PermissionDenied, "not the host that launched this plugin")
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}

// Package peercred identifies the process at the other end of a unix socket, as the
// kernel reports it (SO_PEERCRED), and turns that into gRPC transport credentials.
// Plugins run as the host's user, so file modes cannot keep one plugin away from
// another's sockets; the peer's pid can.
package peercred

import (
	"context"
	"errors"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// ErrUnsupported is returned by Of where the kernel cannot be asked (not Linux).
var ErrUnsupported = errors.New("peercred: peer credentials are not available on this system")

// Peer is the process at the other end of a connection.
type Peer struct {
	PID, UID int
}

// Creds returns gRPC server credentials that admit a connection only when allow
// accepts its peer. They add no encryption: they are for unix sockets between
// processes of one machine, where the kernel vouches for the peer. Where the kernel
// cannot be asked (not Linux), every peer is admitted and the sockets' private
// directory is the only guard.
func Creds(allow func(Peer) error) credentials.TransportCredentials {
	return creds{allow: allow}
}

type creds struct{ allow func(Peer) error }

// AuthInfo is what a handshake reports about the peer.
type AuthInfo struct {
	credentials.CommonAuthInfo
	Peer Peer
}

// AuthType implements credentials.AuthInfo.
func (AuthInfo) AuthType() string { return "peercred" }

func (c creds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	p, err := Of(conn)
	switch {
	case errors.Is(err, ErrUnsupported):
		err = nil
	case err == nil:
		err = c.allow(p)
	}
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("peercred: connection refused: %w", err)
	}
	return conn, AuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}, Peer: p}, nil
}

func (c creds) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, AuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (c creds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (c creds) Clone() credentials.TransportCredentials { return c }

func (c creds) OverrideServerName(string) error { return nil }

// Copyright IBM Corp. 2016, 2025
// SPDX-License-Identifier: MPL-2.0

package grpcmux

import (
	"io"
	"net"

	"github.com/hashicorp/yamux"
)

var _ net.Listener = (*blockedClientListener)(nil)

// blockedClientListener accepts connections for a specific gRPC broker stream
// ID on the client (host) side of the connection: the streams the muxer's
// accept loop hands it, one per knock it acknowledged for the ID.
type blockedClientListener struct {
	session *yamux.Session
	conns   chan net.Conn
	doneCh  <-chan struct{}
}

func newBlockedClientListener(session *yamux.Session, doneCh <-chan struct{}) *blockedClientListener {
	return &blockedClientListener{
		conns:   make(chan net.Conn),
		doneCh:  doneCh,
		session: session,
	}
}

func (b *blockedClientListener) Accept() (net.Conn, error) {
	select {
	case c := <-b.conns:
		return c, nil
	case <-b.doneCh:
		return nil, io.EOF
	}
}

func (b *blockedClientListener) Addr() net.Addr {
	return b.session.Addr()
}

func (b *blockedClientListener) Close() error {
	// We don't close the session, the client muxer is responsible for that.
	return nil
}

// deliver hands c to the listener's Accept, or closes it once the listener is
// done.
func (b *blockedClientListener) deliver(c net.Conn) {
	select {
	case b.conns <- c:
	case <-b.doneCh:
		_ = c.Close()
	}
}

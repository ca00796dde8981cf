// Copyright IBM Corp. 2016, 2025
// SPDX-License-Identifier: MPL-2.0

package grpcmux

import (
	"fmt"
	"net"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
)

var _ GRPCMuxer = (*GRPCClientMuxer)(nil)

// GRPCClientMuxer implements the client (host) side of the gRPC broker's
// GRPCMuxer interface for multiplexing multiple gRPC broker connections over
// a single net.Conn.
//
// The client dials the initial net.Conn eagerly, and creates a yamux.Session
// as the implementation for multiplexing any additional connections.
//
// Each net.Listener returned from Listener will block until the client receives
// a knock that matches its gRPC broker stream ID. There is no default listener
// on the client, as it is a client for the gRPC broker's control services. (See
// GRPCServerMuxer for more details).
type GRPCClientMuxer struct {
	logger  hclog.Logger
	session *yamux.Session

	acceptMutex     sync.Mutex
	acceptListeners map[uint32]*blockedClientListener
	// knocked are the listeners of the knocks acknowledged, in order, each
	// waiting for the stream the other side opens after the acknowledgement.
	knocked []*blockedClientListener
}

// maxKnocked bounds the knocks acknowledged whose streams have not come yet.
const maxKnocked = 64

func NewGRPCClientMuxer(logger hclog.Logger, addr net.Addr) (*GRPCClientMuxer, error) {
	// Eagerly establish the underlying connection as early as possible.
	logger.Debug("making new client mux initial connection", "addr", addr)
	conn, err := net.Dial(addr.Network(), addr.String())
	if err != nil {
		return nil, err
	}
	if tcpConn, ok := conn.(*net.TCPConn); ok {
		// Make sure to set keep alive so that the connection doesn't die
		_ = tcpConn.SetKeepAlive(true)
	}

	cfg := yamux.DefaultConfig()
	cfg.Logger = logger.Named("yamux").StandardLogger(&hclog.StandardLoggerOptions{
		InferLevels: true,
	})
	cfg.LogOutput = nil
	sess, err := yamux.Client(conn, cfg)
	if err != nil {
		return nil, err
	}

	logger.Debug("client muxer connected", "addr", addr)
	m := &GRPCClientMuxer{
		logger:          logger,
		session:         sess,
		acceptListeners: make(map[uint32]*blockedClientListener),
	}
	go m.acceptLoop()

	return m, nil
}

// acceptLoop hands each stream the other side opens to the listener of the
// oldest knock not yet served: the other side opens a stream only after its
// knock was acknowledged, one at a time, so streams come in the knocks' order.
// (Upstream, every knocked listener took the session's next stream itself, and
// two knocked at once could take each other's.) A stream no knock announced is
// closed. It ends with the session.
func (m *GRPCClientMuxer) acceptLoop() {
	for {
		conn, err := m.session.Accept()
		if err != nil {
			return
		}
		m.acceptMutex.Lock()
		var ln *blockedClientListener
		if len(m.knocked) > 0 {
			ln = m.knocked[0]
			m.knocked = m.knocked[1:]
		}
		m.acceptMutex.Unlock()
		if ln == nil {
			m.logger.Debug("closing a stream no knock announced")
			_ = conn.Close()
			continue
		}
		ln.deliver(conn)
	}
}

func (m *GRPCClientMuxer) Enabled() bool {
	return m != nil
}

func (m *GRPCClientMuxer) Listener(id uint32, doneCh <-chan struct{}) (net.Listener, error) {
	ln := newBlockedClientListener(m.session, doneCh)

	m.acceptMutex.Lock()
	m.acceptListeners[id] = ln
	m.acceptMutex.Unlock()

	return ln, nil
}

func (m *GRPCClientMuxer) AcceptKnock(id uint32) error {
	m.acceptMutex.Lock()
	defer m.acceptMutex.Unlock()

	ln, ok := m.acceptListeners[id]
	if !ok {
		return fmt.Errorf("no listener for id %d", id)
	}
	if len(m.knocked) >= maxKnocked {
		return fmt.Errorf("%d knocks are waiting for their connections already", len(m.knocked))
	}
	m.knocked = append(m.knocked, ln)
	return nil
}

func (m *GRPCClientMuxer) Dial() (net.Conn, error) {
	stream, err := m.session.Open()
	if err != nil {
		return nil, fmt.Errorf("error dialling new client stream: %w", err)
	}

	return stream, nil
}

func (m *GRPCClientMuxer) Close() error {
	return m.session.Close()
}

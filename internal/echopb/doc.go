// Package echopb is a bare go-plugin gRPC echo service, used only as the baseline of
// benchmarks: the cheapest plugin call go-plugin can make.
package echopb

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Handshake is the baseline plugin's handshake.
var Handshake = plugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "TOOLHOST_BENCH_ECHO", MagicCookieValue: "echo"}

// Plugin is the go-plugin plugin for the echo service; Impl is set on the plugin side.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl EchoServer
}

// GRPCServer registers Impl.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	RegisterEchoServer(s, p.Impl)
	return nil
}

// GRPCClient returns an EchoClient.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewEchoClient(c), nil
}

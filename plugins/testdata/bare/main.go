// Command bare is the benchmark baseline: a bare go-plugin gRPC plugin with one echo
// method and nothing of toolhost.
package main

import (
	"context"

	"github.com/hashicorp/go-plugin"

	"github.com/toolhost/toolhost/internal/echopb"
)

type echo struct{ echopb.UnimplementedEchoServer }

func (echo) Echo(_ context.Context, m *echopb.EchoMessage) (*echopb.EchoMessage, error) {
	return m, nil
}

func main() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: echopb.Handshake,
		Plugins:         plugin.PluginSet{"echo": &echopb.Plugin{Impl: echo{}}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}

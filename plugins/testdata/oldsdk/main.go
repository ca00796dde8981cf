// Command oldsdk is a plugin as one built with an older sdk serves: go-plugin
// protocol version 1 only, the host token checked in every call's header, the peer's
// pid on every connection, and a
// Call's result always as events, whatever the host's ActivateRequest asks for. The
// host must keep serving such plugins.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/toolhost/toolhost/internal/peercred"
	"github.com/toolhost/toolhost/internal/pluginpb"
)

type server struct {
	pluginpb.UnimplementedPluginServer
}

func (server) Activate(_ context.Context, req *pluginpb.ActivateRequest) (*pluginpb.ActivateResponse, error) {
	if !req.RegistrationsInResponse {
		return nil, errors.New("oldsdk: the host does not take registrations in the response")
	}
	return &pluginpb.ActivateResponse{Registrations: []*pluginpb.RegisterRequest{{
		Registration: 1,
		Tools: []*pluginpb.ToolDefinition{{
			Name:         "echo",
			Description:  "echoes",
			InputSchema:  []byte(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
			OutputSchema: []byte(`{"type":"string"}`),
		}},
	}}}, nil
}

func (server) Call(_ context.Context, req *pluginpb.ExecuteRequest) (*pluginpb.CallResult, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(req.Input, &in); err != nil {
		return nil, err
	}
	out, _ := json.Marshal("old: " + in.Text)
	return &pluginpb.CallResult{Events: []*pluginpb.ExecuteEvent{
		{Event: &pluginpb.ExecuteEvent_Done{Done: &pluginpb.Done{Output: out}}},
	}}, nil
}

type grpcPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterPluginServer(s, server{})
	return nil
}

func (grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("oldsdk: no client side")
}

func main() {
	var opts []grpc.ServerOption
	if token, ok := os.LookupEnv(pluginpb.HostTokenEnv); ok {
		opts = pluginpb.TokenServerOptions(token)
	}
	// An older sdk admits only its host's pid on every connection (a multiplexed
	// connection's streams have none).
	host, err := strconv.Atoi(os.Getenv("TOOLHOST_HOST_PID"))
	if err != nil {
		host = os.Getppid()
	}
	opts = append(opts, grpc.Creds(peercred.Creds(func(p peercred.Peer) error {
		if p.PID != host {
			return fmt.Errorf("peer pid %d is not the host (pid %d)", p.PID, host)
		}
		return nil
	})))
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: pluginpb.Handshake,
		Plugins:         plugin.PluginSet{pluginpb.PluginName: grpcPlugin{}},
		GRPCServer: func(o []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(o, opts...)...)
		},
	})
}

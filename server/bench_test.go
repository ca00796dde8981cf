package server_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/echopb"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/server"
)

// BenchmarkSettleRoundTrip compares, side by side, one settle of a trivial
// in-process tool
//
//   - through the serve API (client.Settle over the unix socket: the Settle stream,
//     the pipeline, the settlement encoded as JSON and decoded);
//   - directly in process (registry.Request.Settle: the pipeline alone);
//   - and a bare gRPC unary call over a unix socket (an echo service, nothing else),
//
// the target being serve-api ≤ 1.5 × (in-process + grpc-unary). Run with
//
//	go test -run '^$' -bench SettleRoundTrip -benchmem ./server/
func BenchmarkSettleRoundTrip(b *testing.B) {
	st, err := registry.OpenStorage(b.TempDir(), registry.StorageOptions{})
	if err != nil {
		b.Fatal(err)
	}
	reg, _ := registry.New(registry.Options{Storage: st})
	type in struct {
		Text string `json:"text"`
	}
	release, err := reg.Register(registry.Batch{Tools: map[string]sdk.Tool{
		"echo": sdk.NewTool("Echoes.", func(_ context.Context, _ sdk.Invocation, in in) (string, error) { return in.Text, nil }),
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	input := json.RawMessage(`{"text":"hello"}`)
	inv := sdk.Invocation{SessionID: "s", Agent: "bench", AssistantMessageID: "m", ToolCallID: "c"}

	b.Run("impl=in-process", func(b *testing.B) {
		q, _ := reg.Prepare(registry.Application)
		b.ReportAllocs()
		for b.Loop() {
			if s, err := q.Settle(context.Background(), registry.Call{Name: "echo", Input: input, Invocation: inv}); err != nil || s.Outcome != registry.Completed {
				b.Fatal(s, err)
			}
		}
	})

	sockDir, err := os.MkdirTemp("", "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(sockDir)

	b.Run("impl=grpc-unary", func(b *testing.B) {
		l, err := net.Listen("unix", filepath.Join(sockDir, "echo.sock"))
		if err != nil {
			b.Fatal(err)
		}
		s := grpc.NewServer()
		echopb.RegisterEchoServer(s, echoServer{})
		go s.Serve(l)
		defer s.Stop()
		conn, err := grpc.NewClient("unix://"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		c := echopb.NewEchoClient(conn)
		msg := &echopb.EchoMessage{Data: input}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Echo(context.Background(), msg); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("impl=serve-api", func(b *testing.B) {
		root := scope.New(context.Background())
		defer root.Close(context.Background())
		srv, err := server.New(root, server.Options{Registry: reg, Location: location.Options{StateDir: b.TempDir()}})
		if err != nil {
			b.Fatal(err)
		}
		l, err := server.ListenUnix(filepath.Join(sockDir, "toolhost.sock"), nil)
		if err != nil {
			b.Fatal(err)
		}
		go srv.Serve(l)
		defer srv.Shutdown(context.Background())
		c, err := client.Dial(context.Background(), "unix://"+l.Addr().String(), "")
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		ws, _ := location.Canonicalize(b.TempDir())
		loc, _, err := c.ActivateLocation(context.Background(), ws)
		if err != nil {
			b.Fatal(err)
		}
		req, err := c.PrepareRequest(context.Background(), loc.ID, "")
		if err != nil {
			b.Fatal(err)
		}
		call := client.Call{Name: "echo", Input: input, Invocation: inv}
		b.ReportAllocs()
		for b.Loop() {
			if s, err := c.Settle(context.Background(), req.ID, call, nil); err != nil || s.Outcome != registry.Completed {
				b.Fatal(s, err)
			}
		}
	})
}

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Echo(_ context.Context, m *echopb.EchoMessage) (*echopb.EchoMessage, error) {
	return m, nil
}

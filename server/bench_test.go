//go:build unix

package server_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

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

// BenchmarkSettleRoundTrip times each kind of round trip newRoundTrips makes, one
// sub-benchmark each; the target is serve-unary ≤ 1.2 × (in-process + grpc-unary).
// Run with
//
//	go test -run '^$' -bench SettleRoundTrip -benchmem ./server/
func BenchmarkSettleRoundTrip(b *testing.B) {
	calls := newRoundTrips(b)
	for _, name := range []string{"in-process", "grpc-unary", "serve-unary", "serve-stream"} {
		b.Run("impl="+name, func(b *testing.B) {
			call := calls[name](b)
			b.ReportAllocs()
			for b.Loop() {
				call()
			}
		})
	}
}

// BenchmarkSettleRoundTripAlternating makes the same four kinds of call in blocks
// of 100, one block of each in turn, so that drift in the machine's speed hits all
// alike, and reports each median and the ratios to the baseline,
// serve-unary / (in-process + grpc-unary) (the target: at most 1.2) and
// serve-stream / (in-process + grpc-unary).
func BenchmarkSettleRoundTripAlternating(b *testing.B) {
	setup := newRoundTrips(b)
	names := []string{"in-process", "grpc-unary", "serve-unary", "serve-stream"}
	calls := make([]func(), len(names))
	for i, name := range names {
		calls[i] = setup[name](b)
	}
	const block = 100
	times := make([][]time.Duration, len(names))
	for b.Loop() {
		for i, call := range calls {
			for range block {
				start := time.Now()
				call()
				times[i] = append(times[i], time.Since(start))
			}
		}
	}
	p50 := make([]time.Duration, len(names))
	for i, ts := range times {
		slices.Sort(ts)
		p50[i] = ts[len(ts)/2]
		b.ReportMetric(float64(p50[i].Nanoseconds()), names[i]+"-p50-ns")
	}
	b.ReportMetric(float64(p50[2])/float64(p50[0]+p50[1]), "unary-ratio")
	b.ReportMetric(float64(p50[3])/float64(p50[0]+p50[1]), "stream-ratio")
}

// newRoundTrips returns, by name, functions that set up one kind of settle round
// trip of a trivial in-process tool for the benchmark they are given, and return one
// call of it:
//
//   - serve-unary: client.Settle without a progress function over the unix socket
//     (the unary Settle: the pipeline, the typed settlement encoded and decoded);
//   - serve-stream: the same with a progress function (the SettleStream stream);
//   - in-process: registry.Request.Settle, the pipeline alone;
//   - grpc-unary: a bare gRPC unary call over a unix socket (an echo service,
//     nothing else).
func newRoundTrips(b *testing.B) map[string]func(*testing.B) func() {
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
	b.Cleanup(release)
	input := json.RawMessage(`{"text":"hello"}`)
	inv := sdk.Invocation{SessionID: "s", Agent: "bench", AssistantMessageID: "m", ToolCallID: "c"}
	sockDir, err := os.MkdirTemp("", "bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(sockDir) })

	inProcess := func(b *testing.B) func() {
		q, _ := reg.Prepare(registry.Application)
		return func() {
			if s, err := q.Settle(context.Background(), registry.Call{Name: "echo", Input: input, Invocation: inv}); err != nil || s.Outcome != registry.Completed {
				b.Fatal(s, err)
			}
		}
	}
	grpcUnary := func(b *testing.B) func() {
		l, err := net.Listen("unix", filepath.Join(sockDir, "echo.sock"))
		if err != nil {
			b.Fatal(err)
		}
		s := grpc.NewServer()
		echopb.RegisterEchoServer(s, echoServer{})
		go s.Serve(l)
		conn, err := grpc.NewClient("unix://"+l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(); s.Stop() })
		c := echopb.NewEchoClient(conn)
		msg := &echopb.EchoMessage{Data: input}
		return func() {
			if _, err := c.Echo(context.Background(), msg); err != nil {
				b.Fatal(err)
			}
		}
	}
	serveAPI := func(progress func(sdk.Progress)) func(b *testing.B) func() {
		return func(b *testing.B) func() {
			root := scope.New(context.Background())
			srv, err := server.New(root, server.Options{Registry: reg, Location: location.Options{StateDir: b.TempDir()}})
			if err != nil {
				b.Fatal(err)
			}
			l, err := server.ListenUnix(filepath.Join(sockDir, "toolhost-"+rand.Text()+".sock"), nil)
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(l)
			c, err := client.Dial(context.Background(), "unix://"+l.Addr().String(), "")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				c.Close()
				srv.Shutdown(context.Background())
				root.Close(context.Background())
			})
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
			return func() {
				if s, err := c.Settle(context.Background(), req.ID, call, progress); err != nil || s.Outcome != registry.Completed {
					b.Fatal(s, err)
				}
			}
		}
	}
	return map[string]func(*testing.B) func(){
		"in-process": inProcess, "grpc-unary": grpcUnary,
		"serve-unary": serveAPI(nil), "serve-stream": serveAPI(func(sdk.Progress) {}),
	}
}

type echoServer struct{ echopb.UnimplementedEchoServer }

func (echoServer) Echo(_ context.Context, m *echopb.EchoMessage) (*echopb.EchoMessage, error) {
	return m, nil
}

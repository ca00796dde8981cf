//go:build unix

package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/server"
)

// TestCallsInFlightAreBounded: with Options.MaxCalls calls in flight, from two
// connections, the next Settle or SettleStream, from either, is refused at once
// with ResourceExhausted naming the limit; once one call ends a call is served
// again.
func TestCallsInFlightAreBounded(t *testing.T) {
	f := start(t, func(o *server.Options) { o.MaxCalls = 2 })
	a, b := f.dial(t), f.dial(t)
	loc, reqA := f.activate(t, a)
	reqB, err := b.PrepareRequest(t.Context(), loc.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	running := blockUntilRunning(t, t.Context(), a, reqA.ID, "a1")
	otherRunning := blockUntilRunning(t, t.Context(), b, reqB.ID, "b1")

	for _, tc := range []struct {
		c        *client.Client
		req      string
		progress func(sdk.Progress)
	}{{a, reqA.ID, nil}, {b, reqB.ID, nil}, {a, reqA.ID, func(sdk.Progress) {}}} {
		_, err := tc.c.Settle(t.Context(), tc.req, client.Call{Name: "echo", Input: []byte(`{"text":"x"}`), Invocation: inv(t, "third")}, tc.progress)
		if err == nil || !strings.Contains(err.Error(), "ResourceExhausted") || !strings.Contains(err.Error(), "2 calls in flight") {
			t.Fatalf("a third call (streamed %v): %v, want ResourceExhausted naming the limit of 2", tc.progress != nil, err)
		}
	}

	if err := a.CancelCall(t.Context(), reqA.ID, "a1"); err != nil {
		t.Fatal(err)
	}
	<-running
	if s, err := b.Settle(t.Context(), reqB.ID, client.Call{Name: "echo", Input: []byte(`{"text":"x"}`), Invocation: inv(t, "b2")}, nil); err != nil || s.IsError() {
		t.Fatalf("a call once one ended: %v %v", s, err)
	}
	if err := b.CancelCall(t.Context(), reqB.ID, "b1"); err != nil {
		t.Fatal(err)
	}
	<-otherRunning
}

// TestConnectionsAreBounded: with Options.MaxConns connections open, the next is
// closed as soon as it is accepted (its call fails with Unavailable); once one
// closes, a connection is served again.
func TestConnectionsAreBounded(t *testing.T) {
	f := start(t, func(o *server.Options) { o.MaxConns = 2 })
	first, second := f.dial(t), f.dial(t)
	for _, c := range []*client.Client{first, second} {
		if _, err := c.ListLocations(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	third := f.dial(t)
	if _, err := third.ListLocations(t.Context()); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("a third connection's call: %v, want ErrUnavailable", err)
	}
	first.Close()
	proctest.Until(t, func() bool {
		c := f.dial(t)
		defer c.Close()
		_, err := c.ListLocations(t.Context())
		return err == nil
	})
}

// TestWatchStreamsAreBounded: a connection with MaxWatchesPerConn watch streams
// open (WatchAsks, WatchInteractions and WatchSources together) has its next one
// refused with ResourceExhausted naming the limit; once one ends, a watch is
// served again.
func TestWatchStreamsAreBounded(t *testing.T) {
	f := start(t, nil)
	rpc, open, loc, _ := f.narrowClient(t)
	watch := func(ctx context.Context, i int) error {
		var recv func() error
		var err error
		switch i % 3 {
		case 0:
			var st grpc.ServerStreamingClient[servepb.AskEvent]
			if st, err = rpc.WatchAsks(ctx, &servepb.WatchAsksRequest{ClientId: open.ClientId}); err == nil {
				recv = func() error { _, err := st.Recv(); return err }
			}
		case 1:
			var st grpc.ServerStreamingClient[servepb.InteractionEvent]
			if st, err = rpc.WatchInteractions(ctx, &servepb.WatchInteractionsRequest{ClientId: open.ClientId}); err == nil {
				recv = func() error { _, err := st.Recv(); return err }
			}
		default:
			var st grpc.ServerStreamingClient[servepb.SourcesEvent]
			if st, err = rpc.WatchSources(ctx, &servepb.WatchSourcesRequest{LocationId: loc.Location.Id}); err == nil {
				recv = func() error { _, err := st.Recv(); return err }
			}
		}
		if err != nil {
			return err
		}
		return recv() // its first event: the watch is served
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for i := range server.MaxWatchesPerConn {
		if err := watch(ctx, i); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	for i := range 3 {
		err := watch(t.Context(), i)
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), fmt.Sprint(server.MaxWatchesPerConn, " watch streams open")) {
			t.Fatalf("a watch past the limit: %v, want ResourceExhausted naming the limit", err)
		}
	}
	cancel() // ends them all
	proctest.Until(t, func() bool { return watch(t.Context(), 0) == nil })
}

// endObserver records how each settlement of a tool named name ended.
type endObserver struct {
	name string
	ends chan error // nil for a settlement
}

func (o *endObserver) StartSettle(ctx context.Context, _ string, call registry.Call) (context.Context, registry.Settling) {
	if call.Name != o.name {
		return ctx, nil
	}
	return ctx, endSettling{o}
}

type endSettling struct{ o *endObserver }

func (endSettling) Resolved(registry.Source) {}
func (endSettling) Step(ctx context.Context, _ registry.Step) context.Context {
	return ctx
}

func (e endSettling) End(s *registry.Settlement, err error) {
	if s != nil {
		err = nil
	} else if err == nil {
		err = errors.New("neither a settlement nor an error")
	}
	e.o.ends <- err
}

// TestDisconnectMidCallInterrupts: a runner whose connection breaks while its
// call runs (the socket closed under gRPC: no CloseClient, no GOAWAY) has the call
// interrupted: the tool's context ends, the settlement ends as an interruption
// (never a settlement), and nothing is left in flight.
func TestDisconnectMidCallInterrupts(t *testing.T) {
	obs := &endObserver{name: "block", ends: make(chan error, 1)}
	f := start(t, func(o *server.Options) { o.Registry = hosttest.Registry(t, registry.Options{Observer: obs}) })
	var mu sync.Mutex
	var raw net.Conn
	cc, err := grpc.NewClient("passthrough:///"+f.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", addr)
			mu.Lock()
			raw = c
			mu.Unlock()
			return c, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rpc := servepb.NewToolhostClient(cc)
	open, err := rpc.OpenClient(t.Context(), &servepb.OpenClientRequest{})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rpc.ActivateLocation(t.Context(), &servepb.ActivateLocationRequest{Directory: workspace(t)})
	if err != nil {
		t.Fatal(err)
	}
	prep, err := rpc.PrepareRequest(t.Context(), &servepb.PrepareRequestRequest{ClientId: open.ClientId, LocationId: loc.Location.Id})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rpc.SettleStream(t.Context(), &servepb.SettleRequest{ClientId: open.ClientId, RequestId: prep.RequestId, Name: "block", InputJson: "{}",
		Invocation: &servepb.Invocation{SessionId: "s", ToolCallId: "d1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // its progress: under way
		t.Fatal(err)
	}
	mu.Lock()
	raw.Close() // the runner goes away
	mu.Unlock()
	if err := <-obs.ends; !errors.Is(err, context.Canceled) {
		t.Errorf("the settlement of a call whose runner went away ended with %v, want an interruption", err)
	}
	proctest.Until(t, func() bool { return inFlight(f) == 0 })
}

// TestOversizeAndGarbageAreRefused: a message over MaxMessageBytes is refused
// with ResourceExhausted and the connection serves on; a connection that sends
// bytes that are not HTTP/2 is closed, and other clients are served.
func TestOversizeAndGarbageAreRefused(t *testing.T) {
	f := start(t, nil)
	cc, err := grpc.NewClient("unix://"+f.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(server.MaxMessageBytes+(2<<20))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rpc := servepb.NewToolhostClient(cc)
	open, err := rpc.OpenClient(t.Context(), &servepb.OpenClientRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rpc.Settle(t.Context(), &servepb.SettleRequest{ClientId: open.ClientId, RequestId: "r", Name: "echo",
		InputJson: strings.Repeat("x", server.MaxMessageBytes+1), Invocation: &servepb.Invocation{ToolCallId: "big"}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a message over MaxMessageBytes: %v, want ResourceExhausted", err)
	}
	if _, err := rpc.ListLocations(t.Context(), &servepb.ListLocationsRequest{}); err != nil {
		t.Fatalf("the connection after the refusal: %v", err)
	}

	raw, err := net.Dial("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + strings.Repeat("\x00\xff", 1<<10))); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, raw) // until the server closes it (a reset, with bytes unread)
	if _, err := f.dial(t).ListLocations(t.Context()); err != nil {
		t.Fatalf("another client after the garbage: %v", err)
	}
}

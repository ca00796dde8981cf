//go:build unix

package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/servepb"
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

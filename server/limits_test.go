package server_test

import (
	"errors"
	"github.com/toolhost/toolhost/internal/proctest"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/client"
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

package server

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc/peer"
)

// TestConnIdentityEndsWithTheConnection: every accepted connection gets its own
// identity, which calls find through their context; closing the connection (as gRPC
// does when the client goes) drops its Requests and cancels its calls in flight.
func TestConnIdentityEndsWithTheConnection(t *testing.T) {
	raw, other := net.Pipe()
	defer other.Close()
	wrapped, auth, err := connCreds{}.ServerHandshake(raw)
	if err != nil {
		t.Fatal(err)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: auth})
	c := connFrom(ctx)
	if c == nil {
		t.Fatal("no connection identity in a call's context")
	}
	_, auth2, _ := connCreds{}.ServerHandshake(other)
	if connFrom(peer.NewContext(context.Background(), &peer.Peer{AuthInfo: auth2})) == c {
		t.Fatal("two connections share an identity")
	}
	if connFrom(context.Background()) != nil {
		t.Fatal("a context without a peer has a connection identity")
	}

	callCtx, cancel := context.WithCancelCause(context.Background())
	c.mu.Lock()
	c.requests["r1"] = &request{id: "r1", calls: map[string]*call{"c1": {cancel: cancel}}}
	c.mu.Unlock()
	if err := wrapped.Close(); err != nil {
		t.Fatal(err)
	}
	_ = wrapped.Close() // idempotent
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed || c.requests != nil {
		t.Errorf("after close: closed = %v, %d requests kept", c.closed, len(c.requests))
	}
	if !errors.Is(context.Cause(callCtx), errConnClosed) {
		t.Errorf("call in flight: cause %v, want errConnClosed", context.Cause(callCtx))
	}
}

//go:build unix

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
// does when the client goes) ends its client handles: their Requests are dropped and
// their calls in flight cancelled.
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

	h, err := c.open()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := handleFrom(ctx, h.id); got != h || err != nil {
		t.Fatalf("handleFrom: %v, %v", got, err)
	}
	ctx2 := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: auth2})
	if _, err := handleFrom(ctx2, h.id); err == nil {
		t.Fatal("a handle was found through another connection")
	}
	callCtx, cancel := context.WithCancelCause(context.Background())
	c.mu.Lock()
	h.requests["r1"] = &request{id: "r1", calls: map[string]*call{"c1": {cancel: cancel}}}
	c.mu.Unlock()
	if err := wrapped.Close(); err != nil {
		t.Fatal(err)
	}
	_ = wrapped.Close() // idempotent
	<-h.done
	if _, err := c.open(); err == nil {
		t.Error("a closed connection opened a handle")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed || !h.closed || h.requests != nil || len(c.handles) != 0 {
		t.Errorf("after close: closed = %v, handle closed = %v, %d requests kept", c.closed, h.closed, len(h.requests))
	}

	if !errors.Is(context.Cause(callCtx), errConnClosed) {
		t.Errorf("call in flight: cause %v, want errConnClosed", context.Cause(callCtx))
	}
}

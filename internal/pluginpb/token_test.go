package pluginpb

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// headerSeen answers Call with whether the call carried the token header.
type headerSeen struct{ UnimplementedPluginServer }

func (headerSeen) Call(ctx context.Context, _ *ExecuteRequest) (*CallResult, error) {
	seen := "no header"
	if len(metadata.ValueFromIncomingContext(ctx, tokenKey)) > 0 {
		seen = "header"
	}
	return &CallResult{Output: []byte(seen)}, nil
}

// serveToken serves headerSeen with opts on a fresh unix socket and returns its
// address.
func serveToken(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	RegisterPluginServer(s, headerSeen{})
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return "unix:" + path
}

func callToken(t *testing.T, addr, token string, perConn bool) (string, error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, ConnTokenDialOptions(token, func() bool { return perConn })...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := NewPluginClient(conn).Call(t.Context(), &ExecuteRequest{})
	if err != nil {
		return "", err
	}
	return string(res.Output), nil
}

func TestConnToken(t *testing.T) {
	const token = "the-token"
	perConn := serveToken(t, grpc.Creds(ConnTokenServerCreds(token, insecure.NewCredentials())))
	perCall := serveToken(t, TokenServerOptions(token)...)

	if got, err := callToken(t, perConn, token, true); err != nil || got != "no header" {
		t.Fatalf("token per connection: %q, %v; want the call served without a header", got, err)
	}
	if _, err := callToken(t, perConn, "another", true); status.Code(err) != codes.Unavailable {
		t.Fatalf("wrong token per connection: %v, want the connection refused", err)
	}
	if _, err := callToken(t, perConn, token, false); status.Code(err) != codes.Unavailable {
		t.Fatalf("a header-only client on a per-connection server: %v, want the connection refused", err)
	}
	// A plugin that negotiated version 1 (an older sdk): the token in every call.
	if got, err := callToken(t, perCall, token, false); err != nil || got != "header" {
		t.Fatalf("token per call: %q, %v", got, err)
	}
	if _, err := callToken(t, perCall, "another", false); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("wrong token per call: %v, want PermissionDenied", err)
	}
}

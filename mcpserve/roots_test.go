package mcpserve_test

import (
	"path/filepath"
	"slices"
	"testing"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/mcpserve"
	"github.com/toolhost/toolhost/registry"
)

// TestRootsFollowTheClient: the client's file:// directory roots reach
// Options.Roots after initialization and after every roots/list_changed; other
// roots (another scheme, a missing directory) are left out.
func TestRootsFollowTheClient(t *testing.T) {
	reg := hosttest.Registry(t, registry.Options{})
	got := make(chan []string, 8)
	srv, err := mcpserve.New(mcpserve.Options{Registry: reg, Roots: func(dirs []string) { got <- dirs }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	a, _ := filepath.Abs(filepath.Join("testdata", "ws"))
	b, _ := filepath.Abs(filepath.Join("testdata", "ws2"))
	next := func(want ...string) {
		t.Helper()
		if dirs := <-got; !slices.Equal(dirs, want) {
			t.Fatalf("roots = %v, want %v", dirs, want)
		}
	}

	client := gomcp.NewClient(&gomcp.Implementation{Name: "roots", Version: "1"}, nil)
	client.AddRoots(&gomcp.Root{URI: "file://" + a}, &gomcp.Root{URI: "https://example.com/"}, &gomcp.Root{URI: "file:///no/such/dir"})
	f := &fixture{srv: srv, reg: reg}
	f.connectClient(t, client)
	next(a)
	client.AddRoots(&gomcp.Root{URI: "file://" + b})
	next(a, b)
	client.RemoveRoots("file://" + a)
	next(b)
}

package mcpserve_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
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

// TestRootsChangesAreCoalesced: while the host waits for a client's roots/list
// answer, any number of notifications/roots/list_changed make one more roots/list
// after it, not one each.
func TestRootsChangesAreCoalesced(t *testing.T) {
	got := make(chan []string, 8)
	f := startWith(t, mcpserve.Options{Roots: func(dirs []string) { got <- dirs }})
	rs := f.raw(t)
	rs.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"raw","version":"1"}}}`)
	rs.recv(t)
	rs.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// untilPing sends a ping and returns the roots/list requests that come before
	// its answer.
	untilPing := func(id int) (asks []any) {
		t.Helper()
		rs.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id))
		for {
			m := rs.next(t)
			if m["method"] == "roots/list" {
				asks = append(asks, m["id"])
			}
			if m["id"] == float64(id) && m["method"] == nil {
				return asks
			}
		}
	}
	answer := func(id any) {
		t.Helper()
		raw, _ := json.Marshal(id)
		rs.send(t, `{"jsonrpc":"2.0","id":`+string(raw)+`,"result":{"roots":[]}}`)
		<-got
	}
	var first any
	for first == nil {
		if m := rs.next(t); m["method"] == "roots/list" {
			first = m["id"]
		}
	}
	var changes strings.Builder
	for range 1000 {
		changes.WriteString(`{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}` + "\n")
	}
	rs.send(t, strings.TrimSuffix(changes.String(), "\n"))
	if asks := untilPing(100); len(asks) != 0 {
		t.Fatalf("%d roots/list sent while the first is unanswered, want none", len(asks))
	}
	answer(first)
	var second any
	for second == nil {
		if m := rs.next(t); m["method"] == "roots/list" {
			second = m["id"]
		}
	}
	answer(second)
	if asks := untilPing(101); len(asks) != 0 {
		t.Errorf("%d more roots/list after the one for 1000 changes, want none", len(asks))
	}
}

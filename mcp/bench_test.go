package mcp_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
)

// BenchmarkMCPCall compares one echo call to server-everything made directly with the
// go-sdk client (its CommandTransport) with the same call settled through toolhost
// (a Request prepared once, then registry Settle: input validation, the MCP call,
// result mapping, output validation, bounding). Each side has its own server process.
func BenchmarkMCPCall(b *testing.B) {
	path := requireNode(b)
	script := serverScript("server-everything")

	b.Run("impl=direct", func(b *testing.B) {
		cmd := exec.Command(filepath.Join(path, "node"), script, "stdio")
		cmd.Env = []string{"PATH=" + path}
		client := gomcp.NewClient(&gomcp.Implementation{Name: "bench", Version: "1"}, &gomcp.ClientOptions{Capabilities: &gomcp.ClientCapabilities{}})
		session, err := client.Connect(b.Context(), &gomcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer session.Close()
		params := &gomcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}}
		b.ResetTimer()
		for b.Loop() {
			res, err := session.CallTool(b.Context(), params)
			if err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	})

	b.Run("impl=toolhost", func(b *testing.B) {
		st, err := registry.OpenStorage(b.TempDir(), registry.StorageOptions{})
		if err != nil {
			b.Fatal(err)
		}
		reg, err := registry.New(registry.Options{Storage: st})
		if err != nil {
			b.Fatal(err)
		}
		loc := b.TempDir()
		release, err := reg.OpenLocation(loc, registry.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		defer release()
		root := scope.New(context.Background())
		defer root.Close(context.Background())
		_, err = mcp.Supervise(b.Context(), root, mcp.Config{
			Name: "everything", Command: "node", Args: []string{script, "stdio"},
			Env: map[string]string{"PATH": path}, StopGrace: time.Second,
		}, mcp.Target{Registry: reg, Location: loc})
		if err != nil {
			b.Fatal(err)
		}
		q, err := reg.Prepare(loc)
		if err != nil {
			b.Fatal(err)
		}
		call := registry.Call{Name: "everything_echo", Input: []byte(`{"message":"hello"}`)}
		b.ResetTimer()
		for b.Loop() {
			s, err := q.Settle(b.Context(), call)
			if err != nil || s.Outcome != registry.Completed {
				b.Fatal(err, s)
			}
		}
	})
}

package mcp_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
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
	b.Run("impl=direct", func(b *testing.B) {
		call := directCall(b)
		b.ResetTimer()
		for b.Loop() {
			call()
		}
	})
	b.Run("impl=toolhost", func(b *testing.B) {
		call := toolhostCall(b)
		b.ResetTimer()
		for b.Loop() {
			call()
		}
	})
}

// BenchmarkMCPCallAlternating makes the same calls in blocks of 100, a direct block
// and a toolhost block in turn, so that drift in the machine's speed hits both alike,
// and reports each side's median and their ratio (toolhost / direct).
func BenchmarkMCPCallAlternating(b *testing.B) {
	direct, toolhost := directCall(b), toolhostCall(b)
	const block = 100
	var d, t []time.Duration
	timed := func(call func(), into *[]time.Duration) {
		for range block {
			start := time.Now()
			call()
			*into = append(*into, time.Since(start))
		}
	}
	for b.Loop() {
		timed(direct, &d)
		timed(toolhost, &t)
	}
	slices.Sort(d)
	slices.Sort(t)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds()), "direct-p50-ns")
	b.ReportMetric(float64(t[len(t)/2].Nanoseconds()), "toolhost-p50-ns")
	b.ReportMetric(float64(t[len(t)/2])/float64(d[len(d)/2]), "p50-ratio")
}

// directCall starts server-everything under the go-sdk client and returns one echo
// call made with it.
func directCall(b *testing.B) func() {
	path := requireNode(b)
	cmd := exec.Command(filepath.Join(path, "node"), serverScript("server-everything"), "stdio")
	cmd.Env = []string{"PATH=" + path}
	client := gomcp.NewClient(&gomcp.Implementation{Name: "bench", Version: "1"}, &gomcp.ClientOptions{Capabilities: &gomcp.ClientCapabilities{}})
	session, err := client.Connect(b.Context(), &gomcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { session.Close() })
	params := &gomcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "hello"}}
	return func() {
		res, err := session.CallTool(b.Context(), params)
		if err != nil || res.IsError {
			b.Fatal(err, res)
		}
	}
}

// toolhostCall supervises server-everything in a Location and returns one echo call
// settled through a Request prepared once.
func toolhostCall(b *testing.B) func() {
	path := requireNode(b)
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
	root := scope.New(context.Background())
	b.Cleanup(func() {
		root.Close(context.Background())
		release()
	})
	_, err = mcp.Supervise(b.Context(), root, mcp.Config{
		Name: "everything", Command: "node", Args: []string{serverScript("server-everything"), "stdio"},
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
	return func() {
		s, err := q.Settle(b.Context(), call)
		if err != nil || s.Outcome != registry.Completed {
			b.Fatal(err, s)
		}
	}
}

package registry_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// BenchmarkSettle measures the whole in-process pipeline for a trivial typed tool:
// resolve, validate input, execute, validate output, project, bound, no hooks.
// The plugin benchmarks (./plugins) put a bare go-plugin round trip beside it.
func BenchmarkSettle(b *testing.B) {
	r := newRegistry(b)
	register(b, r, registry.Batch{Tools: map[string]sdk.Tool{"echo": sdk.NewTool("echo",
		func(_ context.Context, _ sdk.Invocation, in echoIn) (string, error) { return in.Text, nil })}})
	q, err := r.Prepare(registry.Application)
	if err != nil {
		b.Fatal(err)
	}
	input, _ := json.Marshal(echoIn{Text: strings.Repeat("a", 64)})
	call := registry.Call{Name: "echo", Input: input, Invocation: sdk.Invocation{ToolCallID: "c"}}
	b.ReportAllocs()
	for b.Loop() {
		s, err := q.Settle(context.Background(), call)
		if err != nil || s.Outcome != registry.Completed {
			b.Fatal(s, err)
		}
	}
}

// BenchmarkPrepare measures taking a Request snapshot with 50 registered tools.
func BenchmarkPrepare(b *testing.B) {
	r := newRegistry(b)
	tools := map[string]sdk.Tool{}
	for i := range 50 {
		tools[string(rune('a'+i%26))+strings.Repeat("x", i)] = constTool("x")
	}
	register(b, r, registry.Batch{Tools: tools})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Prepare(registry.Application); err != nil {
			b.Fatal(err)
		}
	}
}

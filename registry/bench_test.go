package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// BenchmarkSettle measures the whole in-process pipeline for a trivial typed tool:
// resolve, validate input, execute, validate output, project, bound, no hooks.
// The plugin benchmarks (./plugins) put a bare go-plugin round trip beside it.
func BenchmarkSettle(b *testing.B) {
	r := hosttest.Registry(b, registry.Options{})
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
	r := hosttest.Registry(b, registry.Options{})
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

// BenchmarkRegister measures registering one typed tool: with schemas the registry
// has compiled before (a plugin's restart or reload registers the same ones), and
// with schemas it has not.
func BenchmarkRegister(b *testing.B) {
	r := hosttest.Registry(b, registry.Options{})
	tool := sdk.NewTool("echo", func(_ context.Context, _ sdk.Invocation, in echoIn) (string, error) { return in.Text, nil })
	b.Run("schemas=cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			release := register(b, r, registry.Batch{Tools: map[string]sdk.Tool{"echo": tool}})
			release()
		}
	})
	b.Run("schemas=new", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			t := tool
			t.InputSchema = json.RawMessage(fmt.Sprintf(`{"type":"object","description":"%d","properties":{"text":{"type":"string"}}}`, i))
			t.OutputSchema = json.RawMessage(fmt.Sprintf(`{"type":"string","description":"%d"}`, i))
			release := register(b, r, registry.Batch{Tools: map[string]sdk.Tool{"echo": t}})
			release()
		}
	})
}

package mcpserve_test

import (
	"context"
	"testing"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// TestTraceparentInMetaReachesTheTool: a tools/call whose _meta carries a W3C
// traceparent settles under that trace, so the host's spans and a plugin's join it.
func TestTraceparentInMetaReachesTheTool(t *testing.T) {
	f := start(t, "ws")
	seen := make(chan trace.SpanContext, 1)
	release, err := f.reg.Register(registry.Batch{Tools: map[string]sdk.Tool{"traceprobe": sdk.NewTool("Reports nothing.",
		func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
			seen <- trace.SpanContextFromContext(ctx)
			return "ok", nil
		})}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	cs := f.connect(t, nil)
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{
		Name: "traceprobe", Arguments: map[string]any{},
		Meta: gomcp.Meta{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"},
	})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	if sc := <-seen; sc.TraceID().String() != traceID || !sc.IsRemote() {
		t.Errorf("the tool ran under span context %+v, want the client's trace %s", sc, traceID)
	}
}

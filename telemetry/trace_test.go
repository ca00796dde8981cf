package telemetry_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/server"
	"github.com/toolhost/toolhost/telemetry"
)

// TestTraceFromAServeClientThroughAPluginToOneSettlement follows one trace: it starts
// in a serve API client (its traceparent in the call's metadata), becomes one
// settlement span in the host with a child per step, a client span for the plugin
// call, and inside the plugin process a span of the plugin's own; all of it reaches
// a real OTLP receiver, and so do the call metrics.
func TestTraceFromAServeClientThroughAPluginToOneSettlement(t *testing.T) {
	rcv := startReceiver(t)
	env := otlpEnv(t, rcv.addr)
	tel, err := telemetry.Start(t.Context(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	shut := false
	shutdown := func() {
		if !shut {
			shut = true
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		}
	}
	defer shutdown()
	reg := newRegistry(t, tel.Observer())
	tel.SetStorage(reg.Storage())

	root := scope.New(context.Background())
	srv, err := server.New(root, server.Options{
		Registry:   reg,
		Location:   location.Options{StateDir: t.TempDir(), ObservePermission: tel.ObservePermission()},
		OnActivate: tel.Watch,
	})
	if err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "tel")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	socket := filepath.Join(sockDir, "s.sock")
	lis, err := server.ListenUnix(socket, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
		<-served
		root.Close(ctx)
	}()

	// A trusted plugin: it is not confined, so it reaches the receiver over TCP.
	envJSON := `, "trusted": true, "env": {`
	first := true
	for k, v := range env {
		if !first {
			envJSON += ", "
		}
		first = false
		envJSON += `"` + k + `": "` + v + `"`
	}
	envJSON += "}"
	dir := workspace(t, envJSON, `[{"action": "*", "resource": "*", "effect": "allow"}]`)

	c, err := client.Dial(t.Context(), "unix://"+socket, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	loc, _, err := c.ActivateLocation(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	req, err := c.PrepareRequest(t.Context(), loc.ID, "")
	if err != nil {
		t.Fatal(err)
	}

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	const runnerSpan = "00f067aa0ba902b7"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "traceparent", "00-"+traceID+"-"+runnerSpan+"-01")
	s, err := c.Settle(ctx, req.ID, client.Call{
		Name: "traced", Input: []byte(`{"text":"secret input"}`),
		Invocation: sdk.Invocation{SessionID: "s1", Agent: "tester", ToolCallID: "call-1"},
	}, nil)
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("settle: %v %v", s, err)
	}
	// The plugin exported its span before it returned; the host's are flushed now.
	shutdown()

	spans := rcv.spansOf(traceID)
	byName := map[string][]*tracepb.Span{}
	for _, sp := range spans {
		byName[sp.Name] = append(byName[sp.Name], sp)
	}
	if n := len(byName["toolhost.settle"]); n != 1 {
		t.Fatalf("%d settlement spans in the trace, want 1; spans: %v", n, names(spans))
	}
	settle := byName["toolhost.settle"][0]
	if got := hex.EncodeToString(settle.ParentSpanId); got != runnerSpan {
		t.Errorf("the settlement's parent is %s, want the runner's span %s", got, runnerSpan)
	}
	attrs := attributes(settle)
	for k, want := range map[string]string{
		"toolhost.tool": "traced", "toolhost.source": "plugin:test", "toolhost.location": loc.ID, "toolhost.outcome": "completed",
	} {
		if attrs[k] != want {
			t.Errorf("settlement attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	for _, sp := range spans {
		for _, kv := range sp.Attributes {
			if v := kv.Value.GetStringValue(); v != "" && strings.Contains(v, "secret input") {
				t.Errorf("span %s carries the call's input in %s", sp.Name, kv.Key)
			}
		}
	}
	// No hook steps: the Location has no hooks.
	for _, step := range []string{"validate_input", "execute", "validate_output", "project", "bound"} {
		sps := byName["toolhost."+step]
		if len(sps) != 1 || string(sps[0].ParentSpanId) != string(settle.SpanId) {
			t.Errorf("step %s: %d spans, want 1 under the settlement", step, len(sps))
		}
	}
	exec := byName["toolhost.execute"]
	call := byName["plugin.call"]
	if len(call) != 1 || len(exec) != 1 || string(call[0].ParentSpanId) != string(exec[0].SpanId) {
		t.Fatalf("want one plugin.call span under the execute step; spans: %v", names(spans))
	}
	if a := attributes(call[0]); call[0].Kind != tracepb.Span_SPAN_KIND_CLIENT || len(a) != 2 || a["toolhost.source"] != "plugin:test" || a["toolhost.tool"] != "traced" {
		t.Errorf("plugin.call: kind %v, attributes %v; want a client span with the source and tool", call[0].Kind, a)
	}
	work := byName["plugin.work"]
	if len(work) != 1 || string(work[0].ParentSpanId) != string(call[0].SpanId) {
		t.Fatalf("want the plugin's own span under plugin.call; spans: %v", names(spans))
	}

	if n := callCount(rcv.metricsSnapshot(), "completed", "traced"); n != 1 {
		t.Errorf("toolhost.calls{outcome=completed,tool=traced} = %d, want 1", n)
	}
	if n, unit := durationCount(rcv.metricsSnapshot(), "completed", "traced"); n != 1 || unit != "s" {
		t.Errorf("toolhost.call.duration{outcome=completed,tool=traced}: count %d, unit %q; want 1, \"s\"", n, unit)
	}
}

func names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

func attributes(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value.GetStringValue()
	}
	return m
}

func (r *receiver) metricsSnapshot() []*colmetricspb.ExportMetricsServiceRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*colmetricspb.ExportMetricsServiceRequest(nil), r.metrics...)
}

// eachPoint calls f with every exported point of the metric name (a sum's or a
// histogram's, by its index) whose attributes have the outcome and tool, in export
// order.
func eachPoint(reqs []*colmetricspb.ExportMetricsServiceRequest, name, outcome, tool string, f func(m *metricspb.Metric, i int)) {
	for _, req := range reqs {
		for _, rm := range req.ResourceMetrics {
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if m.Name != name {
						continue
					}
					var points [][]*commonpb.KeyValue
					for _, dp := range m.GetSum().GetDataPoints() {
						points = append(points, dp.Attributes)
					}
					for _, dp := range m.GetHistogram().GetDataPoints() {
						points = append(points, dp.Attributes)
					}
					for i, attrs := range points {
						a := map[string]string{}
						for _, kv := range attrs {
							a[kv.Key] = kv.Value.GetStringValue()
						}
						if a["toolhost.outcome"] == outcome && a["toolhost.tool"] == tool {
							f(m, i)
						}
					}
				}
			}
		}
	}
}

// callCount is the last exported value of toolhost.calls with the outcome and tool.
func callCount(reqs []*colmetricspb.ExportMetricsServiceRequest, outcome, tool string) (n int64) {
	eachPoint(reqs, "toolhost.calls", outcome, tool, func(m *metricspb.Metric, i int) {
		n = m.GetSum().GetDataPoints()[i].GetAsInt()
	})
	return n
}

// durationCount is the count and unit of the last exported toolhost.call.duration
// point with the outcome and tool.
func durationCount(reqs []*colmetricspb.ExportMetricsServiceRequest, outcome, tool string) (n uint64, unit string) {
	eachPoint(reqs, "toolhost.call.duration", outcome, tool, func(m *metricspb.Metric, i int) {
		n, unit = m.GetHistogram().GetDataPoints()[i].GetCount(), m.Unit
	})
	return n, unit
}

// TestMCPCallCarriesTheSettlementsTrace settles a call of a real MCP server's tool
// (testdata/mcpserver, which answers with the traceparent its tools/call request
// carried in _meta): the server received the trace of the settlement, with the
// host's mcp.call span, under the execute step, as the parent, and the OTLP
// receiver got that same trace.
func TestMCPCallCarriesTheSettlementsTrace(t *testing.T) {
	rcv := startReceiver(t)
	otlpEnv(t, rcv.addr)
	tel, err := telemetry.Start(t.Context(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	shut := false
	shutdown := func() {
		if !shut {
			shut = true
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		}
	}
	defer shutdown()
	reg := newRegistry(t, tel.Observer())
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	dir, err := location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"mcp_servers": [{"name": "m", "command": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, mcpServerBin)
	if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, location.ConfigPath), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	loc, err := location.Activate(t.Context(), root, dir, location.Options{Registry: reg, StateDir: t.TempDir(), ObservePermission: tel.ObservePermission()})
	if err != nil {
		t.Fatal(err)
	}
	q, err := loc.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	name, err := mcp.ToolName("m", "meta")
	if err != nil {
		t.Fatal(err)
	}
	s, err := q.Settle(t.Context(), registry.Call{Name: name, Input: []byte(`{}`), Invocation: sdk.Invocation{SessionID: "s1", ToolCallID: "call-1"}})
	if err != nil || s.Outcome != registry.Completed || len(s.Content) != 1 {
		t.Fatalf("settle: %+v %v", s, err)
	}
	shutdown()

	got := s.Content[0].Text
	parts := strings.Split(got, "-")
	if len(parts) != 4 || len(parts[1]) != 32 || len(parts[2]) != 16 {
		t.Fatalf("the MCP server received _meta.traceparent %q, want a W3C traceparent", got)
	}
	traceID, parent := parts[1], parts[2]
	spans := rcv.spansOf(traceID)
	byName := map[string][]*tracepb.Span{}
	for _, sp := range spans {
		byName[sp.Name] = append(byName[sp.Name], sp)
	}
	if len(byName["toolhost.settle"]) != 1 {
		t.Fatalf("the receiver has no settlement span in the trace %s the MCP server received; its spans: %v", traceID, names(spans))
	}
	call, exec := byName["mcp.call"], byName["toolhost.execute"]
	if len(call) != 1 || len(exec) != 1 {
		t.Fatalf("want one mcp.call and one execute span in the trace; spans: %v", names(spans))
	}
	if id := hex.EncodeToString(call[0].SpanId); id != parent {
		t.Errorf("the MCP server's parent span is %s, want the host's mcp.call span %s", parent, id)
	}
	if string(call[0].ParentSpanId) != string(exec[0].SpanId) {
		t.Error("the mcp.call span is not under the execute step")
	}
	if a := attributes(call[0]); a["toolhost.source"] != "mcp:m" || a["toolhost.tool"] != "meta" {
		t.Errorf("mcp.call attributes %v, want source mcp:m and tool meta", a)
	}
}

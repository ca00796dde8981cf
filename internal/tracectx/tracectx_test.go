package tracectx_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/toolhost/toolhost/internal/tracectx"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestTraceContextCrossesMetadataAndMeta(t *testing.T) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tracectx.Traceparent, parent))
	ctx := tracectx.FromIncoming(in)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsSampled() {
		t.Fatalf("span context from metadata: %+v", sc)
	}

	out := tracectx.Outgoing(ctx)
	md, _ := metadata.FromOutgoingContext(out)
	if got := md.Get(tracectx.Traceparent); len(got) != 1 || got[0] != parent {
		t.Errorf("outgoing traceparent %q, want %q", got, parent)
	}

	meta := tracectx.ToMeta(ctx, map[string]any{"progressToken": "1"})
	if meta[tracectx.Traceparent] != parent || meta["progressToken"] != "1" {
		t.Errorf("_meta %v", meta)
	}
	back := trace.SpanContextFromContext(tracectx.FromMeta(context.Background(), meta))
	if !back.Equal(sc) {
		t.Errorf("span context from _meta %+v, want %+v", back, sc)
	}
}

func TestWithoutTraceContextNothingChanges(t *testing.T) {
	ctx := context.Background()
	if tracectx.FromIncoming(ctx) != ctx || tracectx.Outgoing(ctx) != ctx || tracectx.FromMeta(ctx, nil) != ctx {
		t.Error("a context without trace context was replaced")
	}
	if m := tracectx.ToMeta(ctx, nil); m != nil {
		t.Errorf("ToMeta without a span context made %v", m)
	}
	bad := metadata.NewIncomingContext(ctx, metadata.Pairs(tracectx.Traceparent, "00-garbage"))
	if trace.SpanContextFromContext(tracectx.FromIncoming(bad)).IsValid() {
		t.Error("an invalid traceparent made a span context")
	}
	allocs := testing.AllocsPerRun(100, func() {
		c, span := tracectx.StartPluginCall(ctx, "p", "t")
		span.End()
		_ = tracectx.FromIncoming(c)
	})
	if allocs != 0 {
		t.Errorf("a plugin call without tracing allocates %v times for tracing, want 0", allocs)
	}
}

// TestOutgoingWritesWhatTheW3CPropagatorWrites compares Outgoing's metadata with
// propagation.TraceContext's Inject for span contexts sampled or not, with the
// random flag and with a tracestate.
func TestOutgoingWritesWhatTheW3CPropagatorWrites(t *testing.T) {
	ts, err := trace.ParseTraceState("vendor=x,other=y")
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	for _, cfg := range []trace.SpanContextConfig{
		{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled},
		{TraceID: tid, SpanID: sid},
		{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled | trace.FlagsRandom | 0x80},
		{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts},
	} {
		ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(cfg))
		want := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, want)
		md, _ := metadata.FromOutgoingContext(tracectx.Outgoing(ctx))
		for _, k := range []string{tracectx.Traceparent, tracectx.Tracestate} {
			got := md.Get(k)
			if w := want[k]; (w == "" && len(got) != 0) || (w != "" && (len(got) != 1 || got[0] != w)) {
				t.Errorf("flags %v, tracestate %q: %s %q, want %q", cfg.TraceFlags, cfg.TraceState.String(), k, got, w)
			}
		}
	}
}

// BenchmarkFromIncoming is what a plugin's sdk pays on each traced call to take the
// host's trace context from the call's metadata (allocs/op).
func BenchmarkFromIncoming(b *testing.B) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tracectx.Traceparent, parent))
	b.ReportAllocs()
	for b.Loop() {
		if !trace.SpanContextFromContext(tracectx.FromIncoming(in)).IsValid() {
			b.Fatal("no span context")
		}
	}
}

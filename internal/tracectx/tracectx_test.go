package tracectx_test

import (
	"context"
	"fmt"
	"strings"
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

	b, state := tracectx.AppendBinary(nil, ctx)
	if got := trace.SpanContextFromContext(tracectx.FromBinary(context.Background(), b, state)); !got.Equal(sc) {
		t.Errorf("span context through binary %+v, want %+v", got, sc)
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
	if tracectx.FromIncoming(ctx) != ctx || tracectx.FromMeta(ctx, nil) != ctx || tracectx.FromBinary(ctx, nil, "") != ctx {
		t.Error("a context without trace context was replaced")
	}
	if b, state := tracectx.AppendBinary(nil, ctx); b != nil || state != "" {
		t.Errorf("AppendBinary without a span context wrote %x, %q", b, state)
	}
	for _, b := range [][]byte{make([]byte, tracectx.BinaryLen), make([]byte, tracectx.BinaryLen-1), append(make([]byte, 16), 1, 2, 3, 4, 5, 6, 7, 8, 1)} {
		if tracectx.FromBinary(ctx, b, "") != ctx {
			t.Errorf("FromBinary(%x) made a span context", b)
		}
	}
	if m := tracectx.ToMeta(ctx, nil); m != nil {
		t.Errorf("ToMeta without a span context made %v", m)
	}
	bad := metadata.NewIncomingContext(ctx, metadata.Pairs(tracectx.Traceparent, "00-garbage"))
	if trace.SpanContextFromContext(tracectx.FromIncoming(bad)).IsValid() {
		t.Error("an invalid traceparent made a span context")
	}
	var buf [tracectx.BinaryLen]byte
	allocs := testing.AllocsPerRun(100, func() {
		c, span := tracectx.StartPluginCall(ctx, "p", "t")
		span.End()
		b, state := tracectx.AppendBinary(buf[:0], c)
		_ = tracectx.FromBinary(tracectx.FromIncoming(c), b, state)
	})
	if allocs != 0 {
		t.Errorf("a plugin call without tracing allocates %v times for tracing, want 0", allocs)
	}
}

// TestBinaryCarriesWhatTheW3CPropagatorCarries sends span contexts, sampled or
// not, with the random flag, other flags and a tracestate, through W3C headers and
// through AppendBinary and FromBinary, and compares what arrives.
func TestBinaryCarriesWhatTheW3CPropagatorCarries(t *testing.T) {
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
		headers := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, headers)
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headers))
		b, state := tracectx.AppendBinary(nil, ctx)
		if got := trace.SpanContextFromContext(tracectx.FromBinary(context.Background(), b, state)); !got.Equal(want) {
			t.Errorf("flags %v, tracestate %q: through binary %+v, through headers %+v", cfg.TraceFlags, cfg.TraceState.String(), got, want)
		}
	}
	// A tracestate that does not parse is dropped, the span context kept.
	b, _ := tracectx.AppendBinary(nil, trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})))
	if got := trace.SpanContextFromContext(tracectx.FromBinary(context.Background(), b, "=,,bad")); !got.IsValid() || got.TraceState().Len() != 0 {
		t.Errorf("with a bad tracestate: %+v", got)
	}
}

// BenchmarkFromIncoming is what a plugin's sdk pays on a traced call of an older
// host, which sends the trace context as metadata, to take it (allocs/op).
func BenchmarkFromIncoming(b *testing.B) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(tracectx.Traceparent, parent))
	b.ReportAllocs()
	for b.Loop() {
		if !trace.SpanContextFromContext(tracectx.FromIncoming(in)).IsValid() {
			b.Fatal("no span context")
		}
	}
}

// BenchmarkFromBinary is what a plugin's sdk pays on each traced call to take the
// host's trace context from the call's request (allocs/op).
func BenchmarkFromBinary(b *testing.B) {
	in := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{tracectx.Traceparent: parent})
	tc, state := tracectx.AppendBinary(nil, in)
	b.ReportAllocs()
	for b.Loop() {
		if !trace.SpanContextFromContext(tracectx.FromBinary(context.Background(), tc, state)).IsValid() {
			b.Fatal("no span context")
		}
	}
}

// TestALongTracestateIsCutFromTheEnd: a runner's tracestate over MaxTraceState
// (the format allows 32 entries of 256 bytes) arrives cut to it, entries dropped
// from the end, the first kept in order; one within it arrives whole.
func TestALongTracestateIsCutFromTheEnd(t *testing.T) {
	var entries []string
	for i := range 32 {
		entries = append(entries, fmt.Sprintf("v%02d=%s", i, strings.Repeat("x", 250)))
	}
	long := strings.Join(entries, ",")
	const tp = parent
	for name, ctx := range map[string]context.Context{
		"metadata": tracectx.FromIncoming(metadata.NewIncomingContext(context.Background(), metadata.Pairs(tracectx.Traceparent, tp, tracectx.Tracestate, long))),
		"_meta":    tracectx.FromMeta(context.Background(), map[string]any{tracectx.Traceparent: tp, tracectx.Tracestate: long}),
	} {
		sc := trace.SpanContextFromContext(ctx)
		got := sc.TraceState().String()
		if !sc.IsValid() || !sc.IsRemote() || len(got) > tracectx.MaxTraceState || got != strings.Join(entries[:len(got)/254], ",") || len(got) < tracectx.MaxTraceState-260 {
			t.Errorf("%s: a tracestate of %d bytes arrived as %d bytes (%.40q…), valid %v", name, len(long), len(got), got, sc.IsValid())
		}
	}
	short := "a=1,b=2"
	ctx := tracectx.FromMeta(context.Background(), map[string]any{tracectx.Traceparent: tp, tracectx.Tracestate: short})
	if got := trace.SpanContextFromContext(ctx).TraceState().String(); got != short {
		t.Errorf("a short tracestate arrived as %q, want %q", got, short)
	}
}

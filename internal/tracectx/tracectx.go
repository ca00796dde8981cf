// Package tracectx carries W3C trace context (traceparent, tracestate) across
// toolhost's process boundaries: in from a runner's gRPC metadata or an MCP
// request's _meta, out to a plugin's call request (in binary) or an MCP server's
// _meta. It also starts the client spans of plugin and MCP calls under the span a
// settlement runs in.
//
// It uses OpenTelemetry's API only (trace and propagation), never its SDK: the sdk
// imports it, and a plugin must not link an exporter it did not ask for. Without a
// span context in ctx, or a traceparent in what arrives, every function returns what
// it was given after a lookup, allocating nothing.
package tracectx

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// The W3C Trace Context keys, as gRPC metadata and _meta carry them.
const (
	Traceparent = "traceparent"
	Tracestate  = "tracestate"
)

// Scope is the instrumentation scope of toolhost's spans and metrics.
const Scope = "github.com/toolhost/toolhost"

var w3c propagation.TraceContext

// FromIncoming returns ctx carrying the remote span context of the traceparent in
// ctx's incoming gRPC metadata, or ctx itself when there is none or it is invalid.
func FromIncoming(ctx context.Context) context.Context {
	tp := metadata.ValueFromIncomingContext(ctx, Traceparent)
	if len(tp) == 0 {
		return ctx
	}
	c := propagation.MapCarrier{Traceparent: tp[0]}
	if ts := metadata.ValueFromIncomingContext(ctx, Tracestate); len(ts) > 0 {
		c[Tracestate] = ts[0]
	}
	return bounded(w3c.Extract(ctx, c))
}

// MaxTraceState is the longest tracestate toolhost carries on, in bytes as the
// header writes it: the W3C Trace Context's 512, which every vendor must pass on.
// A runner's longer one (the format allows 32 entries of 256 bytes each) would
// otherwise ride on every span and plugin call of the settlement.
const MaxTraceState = 512

// bounded returns ctx with its remote span context's tracestate cut to
// MaxTraceState by dropping entries from the end, as the W3C Trace Context says a
// vendor may, or ctx itself when it is within.
func bounded(ctx context.Context) context.Context {
	sc := trace.SpanContextFromContext(ctx)
	ts := sc.TraceState()
	if ts.Len() == 0 || len(ts.String()) <= MaxTraceState {
		return ctx
	}
	var keys []string
	ts.Walk(func(key, _ string) bool { keys = append(keys, key); return true })
	for i := len(keys) - 1; i >= 0 && len(ts.String()) > MaxTraceState; i-- {
		ts = ts.Delete(keys[i])
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc.WithTraceState(ts))
}

// BinaryLen is the length of a span context in binary (see AppendBinary).
const BinaryLen = 25

// AppendBinary appends ctx's span context to b in binary, the traceparent's fields
// in its order without the version: 16 bytes of trace ID, 8 of span ID and 1 of
// flags (sampled and random only). It returns b unchanged when ctx has no valid span
// context, and the span context's tracestate header ("" when it has none).
//
// A plugin call carries its trace context this way, in its request message, rather
// than as traceparent metadata: a traceparent differs on every call, so as a header
// it would be added to both sides' HPACK tables on every call and soon evict the
// headers that repeat.
func AppendBinary(b []byte, ctx context.Context) (_ []byte, tracestate string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return b, ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	b = append(b, tid[:]...)
	b = append(b, sid[:]...)
	b = append(b, byte(sc.TraceFlags()&(trace.FlagsSampled|trace.FlagsRandom)))
	return b, sc.TraceState().String()
}

// FromBinary returns ctx carrying the remote span context that AppendBinary wrote in
// b, with tracestate, or ctx itself when b is not one (empty, of another length, or
// with an invalid trace or span ID). A tracestate that does not parse is dropped, as
// the W3C propagator drops it.
func FromBinary(ctx context.Context, b []byte, tracestate string) context.Context {
	if len(b) != BinaryLen {
		return ctx
	}
	cfg := trace.SpanContextConfig{
		TraceID:    trace.TraceID(b[:16]),
		SpanID:     trace.SpanID(b[16:24]),
		TraceFlags: trace.TraceFlags(b[24]) & (trace.FlagsSampled | trace.FlagsRandom),
		Remote:     true,
	}
	if tracestate != "" {
		if ts, err := trace.ParseTraceState(tracestate); err == nil {
			cfg.TraceState = ts
		}
	}
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// FromMeta returns ctx carrying the remote span context of the "traceparent" (and
// "tracestate") string members of an MCP request's _meta, or ctx itself when there
// is none or it is invalid.
func FromMeta(ctx context.Context, meta map[string]any) context.Context {
	tp, _ := meta[Traceparent].(string)
	if tp == "" {
		return ctx
	}
	c := propagation.MapCarrier{Traceparent: tp}
	if ts, _ := meta[Tracestate].(string); ts != "" {
		c[Tracestate] = ts
	}
	return bounded(w3c.Extract(ctx, c))
}

// ToMeta sets the "traceparent" (and "tracestate") members of an MCP request's
// _meta from ctx's span context and returns meta, made when nil; without a valid
// span context it returns meta unchanged.
func ToMeta(ctx context.Context, meta map[string]any) map[string]any {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return meta
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	if meta == nil {
		meta = map[string]any{}
	}
	for k, v := range c {
		meta[k] = v
	}
	return meta
}

// StartPluginCall starts the client span of a call of a plugin's tool when ctx's span
// is recording (the settlement's execute step, when tracing is on), and returns ctx
// with it. Otherwise it returns ctx and ctx's span, so that a trace continues
// through a host that does not record it: the caller sends ctx's span context along
// (see AppendBinary). source is the plugin's source ID ("plugin:NAME",
// registry.Source.ID), made once by the caller rather than on every call. End the
// returned span.
func StartPluginCall(ctx context.Context, source, tool string) (context.Context, trace.Span) {
	return startClient(ctx, "plugin.call", source, tool)
}

// StartMCPCall is StartPluginCall for a tools/call to an MCP server, named by its
// server name; the caller puts the trace context into the request's _meta (see
// ToMeta).
func StartMCPCall(ctx context.Context, server, tool string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return startClient(ctx, "mcp.call", "mcp:"+server, tool)
}

// The attributes of a plugin or MCP call's client span.
const (
	SourceKey = attribute.Key("toolhost.source")
	ToolKey   = attribute.Key("toolhost.tool")
)

// ClientStarter is a TracerProvider that starts the client span of a plugin or MCP
// call itself (telemetry's, under a settlement's step), sparing the call the
// allocations of a tracer's options. StartClient returns a nil span when ctx's span
// is not one it starts children under; a tracer then starts it.
type ClientStarter interface {
	StartClient(ctx context.Context, name, source, tool string) (context.Context, trace.Span)
}

func startClient(ctx context.Context, name, source, tool string) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	tp := parent.TracerProvider()
	if cs, ok := tp.(ClientStarter); ok {
		if cctx, span := cs.StartClient(ctx, name, source, tool); span != nil {
			return cctx, span
		}
	}
	return tp.Tracer(Scope).Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(SourceKey.String(source), ToolKey.String(tool)))
}

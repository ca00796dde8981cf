// Package tracectx carries W3C trace context (traceparent, tracestate) across
// toolhost's process boundaries: in from a runner's gRPC metadata or an MCP request's
// _meta, out to a plugin's gRPC metadata or an MCP server's _meta. It also starts the
// client spans of plugin and MCP calls under the span a settlement runs in.
//
// It uses OpenTelemetry's API only (trace and propagation), never its SDK: the sdk
// imports it, and a plugin must not link an exporter it did not ask for. Without a
// span context in ctx, or a traceparent in what arrives, every function returns what
// it was given after a lookup, allocating nothing.
package tracectx

import (
	"context"
	"encoding/hex"

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
	return w3c.Extract(ctx, c)
}

// Outgoing returns ctx with the traceparent (and tracestate) of its span context
// appended to its outgoing gRPC metadata, or ctx itself when it has no valid span
// context.
func Outgoing(ctx context.Context) context.Context {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ctx
	}
	if ts := sc.TraceState().String(); ts != "" {
		return metadata.AppendToOutgoingContext(ctx, Traceparent, traceparent(sc), Tracestate, ts)
	}
	return metadata.AppendToOutgoingContext(ctx, Traceparent, traceparent(sc))
}

// traceparent is the W3C traceparent of sc (version 00, the sampled and random
// flags), as propagation.TraceContext's Inject writes it, without the map Inject
// needs: every traced plugin call sends one.
func traceparent(sc trace.SpanContext) string {
	var b [55]byte // "00-" 32 hex "-" 16 hex "-" 2 hex
	tid, sid := sc.TraceID(), sc.SpanID()
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	return string(b[:])
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
	return w3c.Extract(ctx, c)
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
// with the span and its traceparent in the outgoing gRPC metadata. Otherwise it
// returns ctx with ctx's span context (if any) in the metadata, so that a trace
// continues through a host that does not record it. End the returned span.
func StartPluginCall(ctx context.Context, plugin, tool string) (context.Context, trace.Span) {
	return startClient(ctx, "plugin.call", "plugin", plugin, tool, true)
}

// StartMCPCall is StartPluginCall for a tools/call to an MCP server; the caller
// puts the trace context into the request's _meta (see ToMeta).
func StartMCPCall(ctx context.Context, server, tool string) (context.Context, trace.Span) {
	return startClient(ctx, "mcp.call", "mcp", server, tool, false)
}

func startClient(ctx context.Context, name, kind, source, tool string, metadata bool) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		if metadata {
			ctx = Outgoing(ctx)
		}
		return ctx, parent
	}
	ctx, span := parent.TracerProvider().Tracer(Scope).Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("toolhost.source", kind+":"+source),
			attribute.String("toolhost.tool", tool),
		))
	if metadata {
		ctx = Outgoing(ctx)
	}
	return ctx, span
}

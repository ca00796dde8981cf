package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// otlpUpload converts batches of spans to OTLP messages and uploads them with its
// client. It converts as the OTLP exporter does (its tracetransform package), but
// into messages it keeps from one batch to the next, where the exporter makes each
// span's message, IDs, status, key-values and values anew. Only the exporting
// goroutine uses it; a client's UploadTraces keeps nothing of the messages once it
// returns.
type otlpUpload struct {
	client otlptrace.Client

	// Reused from one batch to the next; grown, never shrunk. attrs holds the
	// batch's attributes, span i's ending at attrEnd[i].
	attrs   []attribute.KeyValue
	attrEnd []int
	spans   []tracepb.Span
	ptrs    []*tracepb.Span
	ids     []spanIDs
	status  []tracepb.Status
	kvs     []commonpb.KeyValue
	kvptrs  []*commonpb.KeyValue
	values  []commonpb.AnyValue
	strs    []commonpb.AnyValue_StringValue
	ints    []commonpb.AnyValue_IntValue

	// The resources and scopes met so far, converted once.
	resources map[*resource.Resource]*resourcepb.Resource
	scopes    map[instrumentation.Scope]*commonpb.InstrumentationScope

	// The request's messages that group spans, reused: out is the batch's
	// resources, each once, with their scopes, each once, with their spans.
	out           []*tracepb.ResourceSpans
	resourceSpans map[*resource.Resource]*tracepb.ResourceSpans
	scopeSpans    map[scopeKey]*tracepb.ScopeSpans
	last          *tracepb.ScopeSpans // scopeSpansOf's last answer, for lastKey
	lastKey       scopeKey
}

type scopeKey struct {
	res   *resource.Resource
	scope instrumentation.Scope
}

// scopeSpansOf returns the message that holds the batch's spans of res and scope,
// adding it to its resource's in u.out when the batch has none of them yet. The
// messages of a batch are emptied once it is uploaded, so an empty one is one the
// batch has not used yet.
func (u *otlpUpload) scopeSpansOf(res *resource.Resource, scope instrumentation.Scope) *tracepb.ScopeSpans {
	k := scopeKey{res, scope}
	if u.last == nil || len(u.last.Spans) == 0 || u.lastKey != k { // most spans are the previous one's
		u.last, u.lastKey = u.scopeSpansFor(k), k
	}
	return u.last
}

func (u *otlpUpload) scopeSpansFor(k scopeKey) *tracepb.ScopeSpans {
	res, scope := k.res, k.scope
	ss := u.scopeSpans[k]
	if ss == nil {
		ss = &tracepb.ScopeSpans{Scope: u.scope(scope), SchemaUrl: scope.SchemaURL}
		if u.scopeSpans == nil {
			u.scopeSpans = map[scopeKey]*tracepb.ScopeSpans{}
		}
		u.scopeSpans[k] = ss
	}
	if len(ss.Spans) > 0 {
		return ss
	}
	rs := u.resourceSpans[res]
	if rs == nil {
		rs = &tracepb.ResourceSpans{Resource: u.resource(res), SchemaUrl: res.SchemaURL()}
		if u.resourceSpans == nil {
			u.resourceSpans = map[*resource.Resource]*tracepb.ResourceSpans{}
		}
		u.resourceSpans[res] = rs
	}
	if len(rs.ScopeSpans) == 0 {
		u.out = append(u.out, rs)
	}
	rs.ScopeSpans = append(rs.ScopeSpans, ss)
	return ss
}

type spanIDs struct {
	trace        trace.TraceID
	span, parent trace.SpanID
}

// export converts batch and uploads it within ctx.
func (u *otlpUpload) export(ctx context.Context, batch []sdktrace.ReadOnlySpan) error {
	u.attrs = u.attrs[:0]
	u.attrEnd = grow(u.attrEnd, len(batch))
	for i, s := range batch {
		if st, ok := s.(*stepSpan); ok {
			u.attrs = st.appendAttributes(u.attrs) // without a slice of its own
		} else {
			u.attrs = append(u.attrs, s.Attributes()...)
		}
		u.attrEnd[i] = len(u.attrs)
	}
	nattrs := len(u.attrs)
	u.spans = grow(u.spans, len(batch))
	u.ptrs = grow(u.ptrs, len(batch))
	u.ids = grow(u.ids, len(batch))
	u.status = grow(u.status, len(batch))
	u.kvs = grow(u.kvs, nattrs)
	u.kvptrs = grow(u.kvptrs, nattrs)
	u.values = grow(u.values, nattrs)
	u.strs = grow(u.strs, nattrs)
	u.ints = grow(u.ints, nattrs)

	if len(u.scopeSpans) >= 64 { // kept bounded, between batches only (see scopeSpansOf)
		u.scopeSpans, u.resourceSpans = nil, nil
	}
	kv := 0
	for i, s := range batch {
		ss := u.scopeSpansOf(s.Resource(), s.InstrumentationScope())
		ss.Spans = append(ss.Spans, u.span(i, s, &kv))
	}
	err := u.client.UploadTraces(ctx, u.out)
	for _, rs := range u.out { // emptied for the next batch, their arrays kept
		for _, ss := range rs.ScopeSpans {
			clear(ss.Spans)
			ss.Spans = ss.Spans[:0]
		}
		clear(rs.ScopeSpans)
		rs.ScopeSpans = rs.ScopeSpans[:0]
	}
	clear(u.out)
	u.out = u.out[:0]
	clear(u.ptrs) // the spans may be collected; the messages stay for the next batch
	clear(u.kvptrs)
	clear(u.attrs)
	return err
}

// grow returns s with room for n, its contents zero.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, max(n, 2*cap(s)))
	}
	s = s[:n]
	clear(s)
	return s
}

// span converts s, the batch's i-th span, into the i-th reused message, its
// attributes (u.attrs) into the reused key-values from *kv on.
func (u *otlpUpload) span(i int, s sdktrace.ReadOnlySpan, kv *int) *tracepb.Span {
	sc, parent := s.SpanContext(), s.Parent()
	ids := &u.ids[i]
	ids.trace, ids.span, ids.parent = sc.TraceID(), sc.SpanID(), parent.SpanID()
	sp := &u.spans[i]
	// An unset status is left out, as proto3 lets it be (the exporter sends an
	// empty message, which a receiver decodes into a message of its own per span).
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		status := &u.status[i]
		switch st.Code {
		case codes.Ok:
			status.Code = tracepb.Status_STATUS_CODE_OK
		case codes.Error:
			status.Code = tracepb.Status_STATUS_CODE_ERROR
		}
		status.Message = st.Description
		sp.Status = status
	}
	sp.TraceId, sp.SpanId = ids.trace[:], ids.span[:]
	if ids.parent.IsValid() {
		sp.ParentSpanId = ids.parent[:]
	}
	sp.TraceState = sc.TraceState().String()
	sp.Flags = spanFlags(sc.TraceFlags(), parent)
	sp.Name = s.Name()
	sp.Kind = spanKind(s.SpanKind())
	sp.StartTimeUnixNano = uint64(max(0, s.StartTime().UnixNano()))
	sp.EndTimeUnixNano = uint64(max(0, s.EndTime().UnixNano()))
	from := 0
	if i > 0 {
		from = u.attrEnd[i-1]
	}
	if attrs := u.attrs[from:u.attrEnd[i]]; len(attrs) > 0 {
		start := *kv
		for _, a := range attrs {
			u.kvptrs[*kv] = u.keyValue(*kv, a)
			*kv++
		}
		sp.Attributes = u.kvptrs[start:*kv:*kv]
	}
	sp.DroppedAttributesCount = clampUint32(s.DroppedAttributes())
	sp.Events = events(s.Events())
	sp.DroppedEventsCount = clampUint32(s.DroppedEvents())
	sp.Links = links(s.Links())
	sp.DroppedLinksCount = clampUint32(s.DroppedLinks())
	u.ptrs[i] = sp
	return sp
}

// keyValue converts a into the k-th reused key-value; a string or an integer value
// into a reused value too.
func (u *otlpUpload) keyValue(k int, a attribute.KeyValue) *commonpb.KeyValue {
	out := &u.kvs[k]
	out.Key = string(a.Key)
	switch a.Value.Type() {
	case attribute.STRING:
		v := &u.strs[k]
		v.StringValue = a.Value.AsString()
		u.values[k].Value = v
		out.Value = &u.values[k]
	case attribute.INT64:
		v := &u.ints[k]
		v.IntValue = a.Value.AsInt64()
		u.values[k].Value = v
		out.Value = &u.values[k]
	default:
		out.Value = anyValue(a.Value)
	}
	return out
}

// The rest converts what spans rarely have, allocating as the exporter does.

func (u *otlpUpload) resource(r *resource.Resource) *resourcepb.Resource {
	if pb, ok := u.resources[r]; ok {
		return pb
	}
	pb := &resourcepb.Resource{}
	if r != nil {
		pb.Attributes = keyValues(r.Attributes())
	}
	if u.resources == nil || len(u.resources) >= 64 {
		u.resources = map[*resource.Resource]*resourcepb.Resource{}
	}
	u.resources[r] = pb
	return pb
}

func (u *otlpUpload) scope(s instrumentation.Scope) *commonpb.InstrumentationScope {
	if pb, ok := u.scopes[s]; ok {
		return pb
	}
	pb := &commonpb.InstrumentationScope{Name: s.Name, Version: s.Version, Attributes: keyValues(s.Attributes.ToSlice())}
	if u.scopes == nil || len(u.scopes) >= 64 {
		u.scopes = map[instrumentation.Scope]*commonpb.InstrumentationScope{}
	}
	u.scopes[s] = pb
	return pb
}

func keyValues(attrs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(attrs))
	for i, a := range attrs {
		out[i] = &commonpb.KeyValue{Key: string(a.Key), Value: anyValue(a.Value)}
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	av := &commonpb.AnyValue{}
	switch v.Type() {
	case attribute.BOOL:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}
	case attribute.INT64:
		av.Value = &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}
	case attribute.FLOAT64:
		av.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}
	case attribute.STRING:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: v.AsString()}
	case attribute.BYTESLICE:
		av.Value = &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}
	case attribute.BOOLSLICE:
		av.Value = array(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		av.Value = array(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		av.Value = array(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		av.Value = array(v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		av.Value = array(v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		av.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: keyValues(v.AsMap())}}
	case attribute.EMPTY:
	default:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: "INVALID"}
	}
	return av
}

func array[T any](vals []T, value func(T) attribute.Value) *commonpb.AnyValue_ArrayValue {
	out := make([]*commonpb.AnyValue, len(vals))
	for i, v := range vals {
		out[i] = anyValue(value(v))
	}
	return &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: out}}
}

func events(es []sdktrace.Event) []*tracepb.Span_Event {
	if len(es) == 0 {
		return nil
	}
	out := make([]*tracepb.Span_Event, len(es))
	for i, e := range es {
		out[i] = &tracepb.Span_Event{
			Name:                   e.Name,
			TimeUnixNano:           uint64(max(0, e.Time.UnixNano())),
			Attributes:             keyValues(e.Attributes),
			DroppedAttributesCount: clampUint32(e.DroppedAttributeCount),
		}
	}
	return out
}

func links(ls []sdktrace.Link) []*tracepb.Span_Link {
	if len(ls) == 0 {
		return nil
	}
	out := make([]*tracepb.Span_Link, len(ls))
	for i, l := range ls {
		tid, sid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		out[i] = &tracepb.Span_Link{
			TraceId:                tid[:],
			SpanId:                 sid[:],
			Attributes:             keyValues(l.Attributes),
			DroppedAttributesCount: clampUint32(l.DroppedAttributeCount),
			Flags:                  spanFlags(l.SpanContext.TraceFlags(), l.SpanContext),
		}
	}
	return out
}

// spanFlags are the W3C trace flags and whether the parent is remote, known.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	flags := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if parent.IsRemote() {
		flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return flags
}

func spanKind(k trace.SpanKind) tracepb.Span_SpanKind {
	switch k {
	case trace.SpanKindInternal:
		return tracepb.Span_SPAN_KIND_INTERNAL
	case trace.SpanKindClient:
		return tracepb.Span_SPAN_KIND_CLIENT
	case trace.SpanKindServer:
		return tracepb.Span_SPAN_KIND_SERVER
	case trace.SpanKindProducer:
		return tracepb.Span_SPAN_KIND_PRODUCER
	case trace.SpanKindConsumer:
		return tracepb.Span_SPAN_KIND_CONSUMER
	}
	return tracepb.Span_SPAN_KIND_UNSPECIFIED
}

func clampUint32(v int) uint32 { return uint32(min(max(v, 0), 1<<32-1)) }

package telemetry

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TestOTLPWireWritesWhatProtoMarshalWrites: for an export request with every field
// of every message set (every kind of value, nested arrays and lists, zero values
// in oneofs, negative numbers, messages of every length class), otlpCodec writes
// the bytes proto.Marshal writes, and they decode to the request.
func TestOTLPWireWritesWhatProtoMarshalWrites(t *testing.T) {
	for _, req := range []*coltracepb.ExportTraceServiceRequest{
		{},
		{ResourceSpans: []*tracepb.ResourceSpans{{}}},
		{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{}}}}}}},
		fullRequest(),
	} {
		want, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := newOTLPCodec(maxExportRequest).Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if b := got.Materialize(); !bytes.Equal(b, want) {
			var back coltracepb.ExportTraceServiceRequest
			err := proto.Unmarshal(b, &back)
			t.Fatalf("otlpCodec wrote %d bytes, proto.Marshal %d; equal after decoding: %v (%v)", len(b), len(want), err == nil && proto.Equal(&back, req), err)
		}
	}
	// Any other message goes to the proto codec.
	other := &coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 3, ErrorMessage: "x"}}
	got, err := newOTLPCodec(maxExportRequest).Marshal(other)
	if want, _ := proto.Marshal(other); err != nil || !bytes.Equal(got.Materialize(), want) {
		t.Errorf("a response: %x, %v; want %x", got.Materialize(), err, want)
	}
}

// TestOTLPWireKnowsEveryField fails when a message the codec writes gains a field
// in a newer OTLP module, which the codec would silently leave out.
func TestOTLPWireKnowsEveryField(t *testing.T) {
	written := map[protoreflect.FullName][]protoreflect.FieldNumber{
		"opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest": {1},
		"opentelemetry.proto.trace.v1.ResourceSpans":                       {1, 2, 3},
		"opentelemetry.proto.resource.v1.Resource":                         {1, 2, 3},
		"opentelemetry.proto.common.v1.EntityRef":                          {1, 2, 3, 4},
		"opentelemetry.proto.trace.v1.ScopeSpans":                          {1, 2, 3},
		"opentelemetry.proto.common.v1.InstrumentationScope":               {1, 2, 3, 4},
		"opentelemetry.proto.trace.v1.Span":                                {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		"opentelemetry.proto.trace.v1.Span.Event":                          {1, 2, 3, 4},
		"opentelemetry.proto.trace.v1.Span.Link":                           {1, 2, 3, 4, 5, 6},
		"opentelemetry.proto.trace.v1.Status":                              {2, 3},
		"opentelemetry.proto.common.v1.KeyValue":                           {1, 2, 3},
		"opentelemetry.proto.common.v1.AnyValue":                           {1, 2, 3, 4, 5, 6, 7, 8},
		"opentelemetry.proto.common.v1.ArrayValue":                         {1},
		"opentelemetry.proto.common.v1.KeyValueList":                       {1},
	}
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor)
	walk = func(md protoreflect.MessageDescriptor) {
		if seen[md.FullName()] {
			return
		}
		seen[md.FullName()] = true
		nums, ok := written[md.FullName()]
		if !ok {
			t.Errorf("the export request holds %s, which otlpCodec does not write", md.FullName())
			return
		}
		fields := md.Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			if !slices.Contains(nums, f.Number()) {
				t.Errorf("%s has field %d (%s), which otlpCodec does not write", md.FullName(), f.Number(), f.Name())
			}
			if f.Message() != nil {
				walk(f.Message())
			}
		}
	}
	walk((&coltracepb.ExportTraceServiceRequest{}).ProtoReflect().Descriptor())
}

func fullRequest() *coltracepb.ExportTraceServiceRequest {
	str := func(s string) *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
	}
	values := []*commonpb.AnyValue{
		str(""), str("text"), str(strings.Repeat("long ", 40)),
		{Value: &commonpb.AnyValue_BoolValue{BoolValue: false}},
		{Value: &commonpb.AnyValue_BoolValue{BoolValue: true}},
		{Value: &commonpb.AnyValue_IntValue{IntValue: 0}},
		{Value: &commonpb.AnyValue_IntValue{IntValue: -7}},
		{Value: &commonpb.AnyValue_IntValue{IntValue: math.MaxInt64}},
		{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0}},
		{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: -1.5}},
		{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{}}},
		{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 2}}},
		{Value: &commonpb.AnyValue_StringValueStrindex{StringValueStrindex: -3}},
		{Value: &commonpb.AnyValue_StringValueStrindex{StringValueStrindex: 9}},
		{},
	}
	values = append(values,
		&commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{}}},
		&commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: slices.Clone(values)}}},
		&commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{}}},
	)
	kvs := func(prefix string) []*commonpb.KeyValue {
		var out []*commonpb.KeyValue
		for i, v := range values {
			out = append(out, &commonpb.KeyValue{Key: prefix + strings.Repeat("k", i), Value: v, KeyStrindex: int32(i - 2)})
		}
		out = append(out, &commonpb.KeyValue{}, &commonpb.KeyValue{Key: "list", Value: &commonpb.AnyValue{
			Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: slices.Clone(out)}}}})
		return out
	}
	id := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	span := func(name string, attrs []*commonpb.KeyValue) *tracepb.Span {
		return &tracepb.Span{
			TraceId: id(16, 1), SpanId: id(8, 2), TraceState: "vendor=x", ParentSpanId: id(8, 3), Flags: 0x301,
			Name: name, Kind: tracepb.Span_SPAN_KIND_CLIENT, StartTimeUnixNano: 1, EndTimeUnixNano: math.MaxUint64,
			Attributes: attrs, DroppedAttributesCount: 4,
			Events:             []*tracepb.Span_Event{{}, {TimeUnixNano: 5, Name: "exception", Attributes: kvs("e"), DroppedAttributesCount: 1}},
			DroppedEventsCount: 300,
			Links: []*tracepb.Span_Link{{}, {TraceId: id(16, 4), SpanId: id(8, 5), TraceState: "a=b", Attributes: kvs("l"),
				DroppedAttributesCount: 2, Flags: 0x100}},
			DroppedLinksCount: 1 << 31,
			Status:            &tracepb.Status{Message: "failed", Code: tracepb.Status_STATUS_CODE_ERROR},
		}
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{
			Resource: &resourcepb.Resource{Attributes: kvs("r"), DroppedAttributesCount: 1,
				EntityRefs: []*commonpb.EntityRef{{}, {SchemaUrl: "s", Type: "service", IdKeys: []string{"a", ""}, DescriptionKeys: []string{"d"}}}},
			ScopeSpans: []*tracepb.ScopeSpans{
				{
					Scope: &commonpb.InstrumentationScope{Name: "github.com/toolhost/toolhost", Version: "1", Attributes: kvs("s"), DroppedAttributesCount: 2},
					Spans: []*tracepb.Span{
						{Name: "small", Status: &tracepb.Status{}, Kind: tracepb.Span_SpanKind(-1)},
						span("medium", kvs("a")),
						span("large", append(kvs("a"), &commonpb.KeyValue{Key: "big", Value: str(strings.Repeat("x", 70000))})),
					},
					SchemaUrl: "https://opentelemetry.io/schemas/1.26.0",
				},
				{},
			},
			SchemaUrl: "https://opentelemetry.io/schemas/1.26.0",
		},
		{Resource: &resourcepb.Resource{}},
	}}
}

// TestOTLPWireRefusesARequestOverTheLimit: the codec holds requests to the limit
// the exporter would have (its own check is turned off, see newSpanExporter), and
// sends one at the limit.
func TestOTLPWireRefusesARequestOverTheLimit(t *testing.T) {
	req := fullRequest()
	n := proto.Size(req)
	if _, err := newOTLPCodec(n).Marshal(req); err != nil {
		t.Errorf("a request of %d bytes, the limit: %v", n, err)
	}
	_, err := newOTLPCodec(n - 1).Marshal(req)
	if want := fmt.Sprintf("request message too large: exceeded %d bytes", n-1); err == nil || err.Error() != want {
		t.Errorf("a request of %d bytes over a limit of %d: %v, want %q", n, n-1, err, want)
	}
}

package telemetry

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// otlpCodec is the gRPC codec of the OTLP trace exporter's connection. It writes an
// ExportTraceServiceRequest's protobuf encoding itself (appendExportRequest: the
// bytes proto.Marshal writes, without the reflection that made proto.Size and
// Marshal most of an export's cost) and leaves every other message, and every
// reply, to gRPC's proto codec. It is named "proto", as that codec is, so the
// content type on the wire is unchanged.
//
// It refuses to send a request of more than max bytes, with the error the
// exporter gives for it, in the exporter's stead (see newSpanExporter).
type otlpCodec struct {
	proto encoding.CodecV2
	max   int
	last  atomic.Int64 // the size of the last request, the next one's first guess
	bufs  bufferPool   // requests' buffers, back from gRPC once written
}

// bufferPool keeps the buffers of requests gRPC has written, for the next ones: a
// batch's request is tens of kilobytes, written every few milliseconds under load,
// and a new buffer for each made most of what an export left to the collector.
type bufferPool struct{ sync.Pool }

var _ mem.BufferPool = (*bufferPool)(nil)

// Get returns a buffer of length bytes (its capacity may be larger).
func (p *bufferPool) Get(length int) *[]byte {
	if b, ok := p.Pool.Get().(*[]byte); ok && cap(*b) >= length {
		*b = (*b)[:length]
		return b
	}
	b := make([]byte, length)
	return &b
}

// Put keeps b for a later Get.
func (p *bufferPool) Put(b *[]byte) { p.Pool.Put(b) }

// maxExportRequest is the OTLP exporter's default limit on an export request's
// encoded size, 64 MiB (otlptracegrpc.WithMaxRequestSize).
const maxExportRequest = 64 << 20

func newOTLPCodec(max int) *otlpCodec {
	return &otlpCodec{proto: encoding.GetCodecV2("proto"), max: max}
}

func (*otlpCodec) Name() string { return "proto" }

func (c *otlpCodec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*coltracepb.ExportTraceServiceRequest)
	if !ok {
		return c.proto.Marshal(v)
	}
	buf := c.bufs.Get(int(c.last.Load()))
	b := appendExportRequest((*buf)[:0], req)
	if len(b) > c.max {
		c.bufs.Put(buf)
		return nil, fmt.Errorf("request message too large: exceeded %d bytes", c.max)
	}
	c.last.Store(int64(len(b)))
	*buf = b // grown, if it had to: the larger array goes back to the pool
	return mem.BufferSlice{mem.NewBuffer(buf, &c.bufs)}, nil
}

func (c *otlpCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// The append functions write each field in field-number order, as proto.Marshal
// does, skipping a scalar at its zero value and a nil message; a oneof member is
// written whenever it is set. TestOTLPWireWritesWhatProtoMarshalWrites fails when a
// message type gains a field they do not write.

func appendExportRequest(b []byte, m *coltracepb.ExportTraceServiceRequest) []byte {
	for _, rs := range m.ResourceSpans {
		b = appendMessage(b, 1, rs != nil, func(b []byte) []byte { return appendResourceSpans(b, rs) })
	}
	return b
}

func appendResourceSpans(b []byte, m *tracepb.ResourceSpans) []byte {
	b = appendMessage(b, 1, m.Resource != nil, func(b []byte) []byte { return appendResource(b, m.Resource) })
	for _, ss := range m.ScopeSpans {
		b = appendMessage(b, 2, ss != nil, func(b []byte) []byte { return appendScopeSpans(b, ss) })
	}
	return appendString(b, 3, m.SchemaUrl)
}

func appendResource(b []byte, m *resourcepb.Resource) []byte {
	b = appendKeyValues(b, 1, m.Attributes)
	b = appendUvarint(b, 2, uint64(m.DroppedAttributesCount))
	for _, e := range m.EntityRefs {
		b = appendMessage(b, 3, e != nil, func(b []byte) []byte {
			b = appendString(b, 1, e.SchemaUrl)
			b = appendString(b, 2, e.Type)
			for _, k := range e.IdKeys {
				b = appendAlways(b, 3, k)
			}
			for _, k := range e.DescriptionKeys {
				b = appendAlways(b, 4, k)
			}
			return b
		})
	}
	return b
}

func appendScopeSpans(b []byte, m *tracepb.ScopeSpans) []byte {
	b = appendMessage(b, 1, m.Scope != nil, func(b []byte) []byte {
		b = appendString(b, 1, m.Scope.Name)
		b = appendString(b, 2, m.Scope.Version)
		b = appendKeyValues(b, 3, m.Scope.Attributes)
		return appendUvarint(b, 4, uint64(m.Scope.DroppedAttributesCount))
	})
	for _, s := range m.Spans {
		b = appendMessage(b, 2, s != nil, func(b []byte) []byte { return appendSpan(b, s) })
	}
	return appendString(b, 3, m.SchemaUrl)
}

func appendSpan(b []byte, m *tracepb.Span) []byte {
	b = appendBytes(b, 1, m.TraceId)
	b = appendBytes(b, 2, m.SpanId)
	b = appendString(b, 3, m.TraceState)
	b = appendBytes(b, 4, m.ParentSpanId)
	b = appendString(b, 5, m.Name)
	b = appendUvarint(b, 6, uint64(int64(m.Kind)))
	b = appendFixed64(b, 7, m.StartTimeUnixNano)
	b = appendFixed64(b, 8, m.EndTimeUnixNano)
	b = appendKeyValues(b, 9, m.Attributes)
	b = appendUvarint(b, 10, uint64(m.DroppedAttributesCount))
	for _, e := range m.Events {
		b = appendMessage(b, 11, e != nil, func(b []byte) []byte {
			b = appendFixed64(b, 1, e.TimeUnixNano)
			b = appendString(b, 2, e.Name)
			b = appendKeyValues(b, 3, e.Attributes)
			return appendUvarint(b, 4, uint64(e.DroppedAttributesCount))
		})
	}
	b = appendUvarint(b, 12, uint64(m.DroppedEventsCount))
	for _, l := range m.Links {
		b = appendMessage(b, 13, l != nil, func(b []byte) []byte {
			b = appendBytes(b, 1, l.TraceId)
			b = appendBytes(b, 2, l.SpanId)
			b = appendString(b, 3, l.TraceState)
			b = appendKeyValues(b, 4, l.Attributes)
			b = appendUvarint(b, 5, uint64(l.DroppedAttributesCount))
			return appendFixed32(b, 6, l.Flags)
		})
	}
	b = appendUvarint(b, 14, uint64(m.DroppedLinksCount))
	b = appendMessage(b, 15, m.Status != nil, func(b []byte) []byte {
		b = appendString(b, 2, m.Status.Message)
		return appendUvarint(b, 3, uint64(int64(m.Status.Code)))
	})
	return appendFixed32(b, 16, m.Flags)
}

func appendKeyValues(b []byte, num protowire.Number, kvs []*commonpb.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMessage(b, num, kv != nil, func(b []byte) []byte {
			b = appendString(b, 1, kv.Key)
			b = appendMessage(b, 2, kv.Value != nil, func(b []byte) []byte { return appendAnyValue(b, kv.Value) })
			return appendUvarint(b, 3, uint64(int64(kv.KeyStrindex)))
		})
	}
	return b
}

func appendAnyValue(b []byte, m *commonpb.AnyValue) []byte {
	switch v := m.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		b = appendAlways(b, 1, v.StringValue)
	case *commonpb.AnyValue_BoolValue:
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.BoolValue))
	case *commonpb.AnyValue_IntValue:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.IntValue))
	case *commonpb.AnyValue_DoubleValue:
		b = protowire.AppendTag(b, 4, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.DoubleValue))
	case *commonpb.AnyValue_ArrayValue:
		b = appendMessage(b, 5, true, func(b []byte) []byte {
			if v.ArrayValue == nil {
				return b
			}
			for _, e := range v.ArrayValue.Values {
				b = appendMessage(b, 1, e != nil, func(b []byte) []byte { return appendAnyValue(b, e) })
			}
			return b
		})
	case *commonpb.AnyValue_KvlistValue:
		b = appendMessage(b, 6, true, func(b []byte) []byte {
			if v.KvlistValue == nil {
				return b
			}
			return appendKeyValues(b, 1, v.KvlistValue.Values)
		})
	case *commonpb.AnyValue_BytesValue:
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendBytes(b, v.BytesValue)
	case *commonpb.AnyValue_StringValueStrindex:
		b = protowire.AppendTag(b, 8, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(int64(v.StringValueStrindex)))
	}
	return b
}

// appendMessage appends field num holding the message that body appends, when
// present, with its length before it: one byte is kept for the length, and the
// body is moved when its length needs more.
func appendMessage(b []byte, num protowire.Number, present bool, body func([]byte) []byte) []byte {
	if !present {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	at := len(b)
	b = body(append(b, 0))
	n := len(b) - at - 1
	if n < 0x80 {
		b[at] = byte(n)
		return b
	}
	w := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, w-1)...)
	copy(b[at+w:], b[at+1:at+1+n])
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendAlways(b, num, s)
}

func appendAlways(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendUvarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

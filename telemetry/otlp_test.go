package telemetry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// keepClient is an otlptrace.Client that keeps a copy of every upload.
type keepClient struct {
	mu      sync.Mutex
	uploads [][]*tracepb.ResourceSpans
}

func (c *keepClient) Start(context.Context) error { return nil }
func (c *keepClient) Stop(context.Context) error  { return nil }
func (c *keepClient) UploadTraces(_ context.Context, rss []*tracepb.ResourceSpans) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := make([]*tracepb.ResourceSpans, len(rss))
	for i, rs := range rss {
		cp[i] = proto.Clone(rs).(*tracepb.ResourceSpans)
	}
	c.uploads = append(c.uploads, cp)
	return nil
}

// TestOTLPUploadSendsWhatTheExporterSends converts the same spans with the OTLP
// exporter and with otlpUpload, twice in a row (the second time on the messages of
// the first), and requires identical messages but for an unset status, which
// otlpUpload leaves out where the exporter sends an empty one (the same to a
// receiver: proto3 reads an absent message as an empty one): what a collector
// receives does not change. The spans carry every kind of attribute value, events,
// links, statuses, a remote parent, a trace state, and two instrumentation scopes.
func TestOTLPUploadSendsWhatTheExporterSends(t *testing.T) {
	res := resource.NewSchemaless(attribute.String("service.name", "toolhost"), attribute.Int("n", 1))
	ts, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	tid := trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sc := func(id byte, remote bool) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: trace.SpanID{id, 1}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: remote})
	}
	start := time.Unix(1700000000, 123)
	scope := instrumentation.Scope{Name: "github.com/toolhost/toolhost"}
	other := instrumentation.Scope{Name: "other", Version: "v1", SchemaURL: "https://example.com/s", Attributes: attribute.NewSet(attribute.Bool("x", true))}
	stubs := []tracetest.SpanStub{
		{Name: "toolhost.settle", SpanContext: sc(1, false), Parent: sc(9, true), SpanKind: trace.SpanKindInternal,
			StartTime: start, EndTime: start.Add(time.Millisecond), Resource: res, InstrumentationScope: scope,
			Attributes: []attribute.KeyValue{
				attribute.String("s", "v"), attribute.Int("i", -3), attribute.Bool("b", true), attribute.Float64("f", 1.5),
				attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2}),
				attribute.BoolSlice("bs", []bool{true}), attribute.Float64Slice("fs", []float64{0.5}),
			},
			Status: sdktrace.Status{Code: codes.Error, Description: "interrupted"}, DroppedAttributes: 2},
		{Name: "toolhost.execute", SpanContext: sc(2, false), Parent: sc(1, false), SpanKind: trace.SpanKindInternal,
			StartTime: start, EndTime: start.Add(time.Microsecond), Resource: res, InstrumentationScope: scope,
			Events: []sdktrace.Event{{Name: "exception", Time: start, Attributes: []attribute.KeyValue{attribute.String("exception.message", "m")}}},
			Links:  []sdktrace.Link{{SpanContext: sc(7, true), Attributes: []attribute.KeyValue{attribute.Int("l", 1)}}},
			Status: sdktrace.Status{Code: codes.Ok}},
		{Name: "plugin.call", SpanContext: sc(3, false), Parent: sc(2, false), SpanKind: trace.SpanKindClient,
			StartTime: start, EndTime: start, Resource: res, InstrumentationScope: other,
			Attributes: []attribute.KeyValue{attribute.String("toolhost.source", "plugin:p")}},
		{Name: "root", SpanContext: sc(4, false), SpanKind: trace.SpanKindServer,
			StartTime: start, EndTime: start, Resource: res, InstrumentationScope: scope},
	}
	spans := tracetest.SpanStubs(stubs).Snapshots()

	want := &keepClient{}
	exp, err := otlptrace.New(context.Background(), want)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	unset := 0
	for _, rs := range want.uploads[0] {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				if proto.Equal(sp.Status, &tracepb.Status{}) {
					sp.Status = nil
					unset++
				}
			}
		}
	}
	if unset != 2 {
		t.Fatalf("the exporter sent %d empty statuses, want 2 (the spans without one)", unset)
	}
	got := &keepClient{}
	u := &otlpUpload{client: got}
	for range 2 {
		if err := u.export(context.Background(), spans); err != nil {
			t.Fatal(err)
		}
	}
	for i, up := range got.uploads {
		if len(up) != len(want.uploads[0]) {
			t.Fatalf("upload %d: %d resource spans, want %d", i, len(up), len(want.uploads[0]))
		}
		for j := range up {
			if !proto.Equal(up[j], want.uploads[0][j]) {
				t.Errorf("upload %d, resource spans %d:\n%v\nwant (the OTLP exporter's)\n%v", i, j, up[j], want.uploads[0][j])
			}
		}
	}
}

// TestOTLPUploadReportsTheClientsError: an upload's error is export's.
func TestOTLPUploadReportsTheClientsError(t *testing.T) {
	boom := errors.New("collector unreachable")
	u := &otlpUpload{client: failClient{boom}}
	span := tracetest.SpanStub{Name: "s", SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})}.Snapshot()
	if err := u.export(context.Background(), []sdktrace.ReadOnlySpan{span}); !errors.Is(err, boom) {
		t.Errorf("export: %v, want the client's error", err)
	}
}

type failClient struct{ err error }

func (failClient) Start(context.Context) error { return nil }
func (failClient) Stop(context.Context) error  { return nil }
func (c failClient) UploadTraces(context.Context, []*tracepb.ResourceSpans) error {
	return c.err
}

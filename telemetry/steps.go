package telemetry

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/toolhost/toolhost/internal/tracectx"
)

// maxSteps is how many step spans a settlement records: one for each registry.Step.
const maxSteps = 7

// stepSpan is the span of a sampled settlement (settling.spans[0]) or of one of its
// steps, kept in its settling rather than made by the SDK, whose span is a
// recording span, its context and a snapshot at End for a step that mostly lasts
// microseconds. Starting one takes a clock reading and a random span ID; a step's
// span is a child of the settlement span, sampled with it, of kind internal, with
// the settlement span's trace state, resource and instrumentation scope, so an
// exporter and a collector see what an SDK span would have been (but
// ChildSpanCount, which OTLP does not carry: 0).
//
// It is a trace.Span while its step runs (the step's code starts child spans under
// it, and may set attributes, events, links and a status as on an SDK span, within
// no limits but memory), and the sdktrace.ReadOnlySpan the batcher exports once it
// has ended: the settling goroutine hands a step's span over when the settlement
// ends, a child's End hands it over, and neither is written after that.
type stepSpan struct {
	embedded.Span         // the trace.Span API's marker
	sdktrace.ReadOnlySpan // always nil: the SDK's marker, as tracetest's snapshots carry it

	s          *settling
	name       string
	id, parent trace.SpanID // parent: the settlement's, or a step's for a child
	start, fin int64        // Unix nanoseconds (see settling.at)
	extra      *stepExtra   // guarded by s.mu; nil unless the step's code set something
	ended      atomic.Bool
	kind       uint8 // a trace.SpanKind, in a byte: a settlement holds 8 stepSpans
	child      bool  // a span started under a step (see stepTracer), ended by End
}

// childSpan is a stepSpan started under a step, with room for what it starts with:
// a client span's two attributes (see StartClient) need no allocation of their own.
type childSpan struct {
	stepSpan
	x  stepExtra
	kv [2]attribute.KeyValue
}

// stepExtra is what a step's code set on its span.
type stepExtra struct {
	attrs  []attribute.KeyValue
	events []sdktrace.Event
	links  []sdktrace.Link
	status sdktrace.Status
	name   string
}

var (
	_ trace.Span            = (*stepSpan)(nil)
	_ sdktrace.ReadOnlySpan = (*stepSpan)(nil)
)

// newTraceID is a random, valid trace ID, as the SDK's ID generator makes them.
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}

// newSpanID is a random, valid span ID, as the SDK's ID generator makes them.
func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// end ends the span at t; called by the settling goroutine only.
func (st *stepSpan) end(t time.Time) {
	st.s.mu.Lock()
	st.fin = st.s.at(t)
	st.ended.Store(true)
	st.s.mu.Unlock()
}

// change runs f on the span's extras unless the span has ended.
func (st *stepSpan) change(f func(x *stepExtra)) {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	if st.ended.Load() {
		return
	}
	if st.extra == nil {
		st.extra = &stepExtra{}
	}
	f(st.extra)
}

// The trace.Span API, used by the step's code.

// End ends a child span and queues it for export. It does nothing to a step's
// span: a step ends where the next one begins, or with its settlement.
func (st *stepSpan) End(options ...trace.SpanEndOption) {
	if !st.child {
		return
	}
	fin := time.Now()
	if len(options) > 0 {
		if c := trace.NewSpanEndConfig(options...); !c.Timestamp().IsZero() {
			fin = c.Timestamp()
		}
	}
	st.s.mu.Lock()
	if st.ended.Load() {
		st.s.mu.Unlock()
		return
	}
	st.fin = st.s.at(fin)
	st.ended.Store(true)
	st.s.mu.Unlock()
	st.s.t.batch.OnEnd(st)
}

func (st *stepSpan) IsRecording() bool { return !st.ended.Load() }

func (st *stepSpan) SpanContext() trace.SpanContext { return st.s.sc.WithSpanID(st.id) }

func (st *stepSpan) TracerProvider() trace.TracerProvider { return &st.s.provider }

func (st *stepSpan) SetName(name string) { st.change(func(x *stepExtra) { x.name = name }) }

func (st *stepSpan) SetAttributes(kv ...attribute.KeyValue) {
	st.change(func(x *stepExtra) {
		for _, a := range kv {
			if !a.Valid() {
				continue
			}
			replaced := false
			for i := range x.attrs {
				if x.attrs[i].Key == a.Key {
					x.attrs[i], replaced = a, true
					break
				}
			}
			if !replaced {
				x.attrs = append(x.attrs, a)
			}
		}
	})
}

// SetStatus follows the SDK: Ok is final, Unset changes nothing, and only Error
// keeps a description.
func (st *stepSpan) SetStatus(code codes.Code, description string) {
	if code == codes.Unset {
		return
	}
	st.change(func(x *stepExtra) {
		if x.status.Code == codes.Ok {
			return
		}
		x.status = sdktrace.Status{Code: code}
		if code == codes.Error {
			x.status.Description = description
		}
	})
}

func (st *stepSpan) AddEvent(name string, options ...trace.EventOption) {
	c := trace.NewEventConfig(options...)
	st.change(func(x *stepExtra) {
		x.events = append(x.events, sdktrace.Event{Name: name, Attributes: c.Attributes(), Time: c.Timestamp()})
	})
}

// RecordError adds an "exception" event, as the SDK does (without the stack trace
// option).
func (st *stepSpan) RecordError(err error, options ...trace.EventOption) {
	if err == nil {
		return
	}
	options = append(options, trace.WithAttributes(
		attribute.String("exception.type", errorType(err)),
		attribute.String("exception.message", err.Error()),
	))
	st.AddEvent("exception", options...)
}

func errorType(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String() // a pointer, say
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

func (st *stepSpan) AddLink(l trace.Link) {
	if !l.SpanContext.IsValid() && len(l.Attributes) == 0 {
		return
	}
	st.change(func(x *stepExtra) {
		x.links = append(x.links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes})
	})
}

// The sdktrace.ReadOnlySpan API, used by the exporter once the settlement has
// ended. What a step's code set is read without a lock: the span had ended, under
// s.mu, before the settling goroutine handed it to the batcher.

func (st *stepSpan) Name() string {
	if st.extra != nil && st.extra.name != "" {
		return st.extra.name
	}
	return st.name
}

func (st *stepSpan) Parent() trace.SpanContext {
	if st == &st.s.spans[0] {
		return st.s.parent // the settlement's: the runner's, or none
	}
	return st.s.sc.WithSpanID(st.parent)
}

func (st *stepSpan) SpanKind() trace.SpanKind { return trace.SpanKind(st.kind) }
func (st *stepSpan) StartTime() time.Time     { return time.Unix(0, st.start) }
func (st *stepSpan) EndTime() time.Time       { return time.Unix(0, st.fin) }

func (st *stepSpan) Attributes() []attribute.KeyValue {
	if st == &st.s.spans[0] {
		return st.s.appendRootAttributes(nil)
	}
	if st.extra == nil {
		return nil
	}
	return st.extra.attrs
}

// appendAttributes appends Attributes to attrs, which the exporter reuses.
func (st *stepSpan) appendAttributes(attrs []attribute.KeyValue) []attribute.KeyValue {
	if st == &st.s.spans[0] {
		return st.s.appendRootAttributes(attrs)
	}
	if st.extra == nil {
		return attrs
	}
	return append(attrs, st.extra.attrs...)
}

func (st *stepSpan) Links() []sdktrace.Link {
	if st.extra == nil {
		return nil
	}
	return st.extra.links
}

func (st *stepSpan) Events() []sdktrace.Event {
	if st.extra == nil {
		return nil
	}
	return st.extra.events
}

func (st *stepSpan) Status() sdktrace.Status {
	if st.extra == nil {
		return sdktrace.Status{}
	}
	return st.extra.status
}

func (st *stepSpan) InstrumentationScope() instrumentation.Scope { return st.s.t.scope }

//nolint:staticcheck // part of the interface
func (st *stepSpan) InstrumentationLibrary() instrumentation.Library { return st.s.t.scope }

func (st *stepSpan) Resource() *resource.Resource { return st.s.t.spanRes }
func (st *stepSpan) DroppedAttributes() int       { return 0 }
func (st *stepSpan) DroppedLinks() int            { return 0 }
func (st *stepSpan) DroppedEvents() int           { return 0 }
func (st *stepSpan) ChildSpanCount() int          { return 0 }

// stepProvider is the TracerProvider of a settlement's step spans: its tracer of
// toolhost's scope starts a span under a step as a childSpan, which costs one
// allocation, rather than as an SDK span; every other tracer is the SDK's.
type stepProvider struct {
	embedded.TracerProvider
	s      *settling
	tracer stepTracer
}

func (p *stepProvider) Tracer(name string, options ...trace.TracerOption) trace.Tracer {
	if name != tracectx.Scope || len(options) > 0 {
		return p.s.t.tp.Tracer(name, options...)
	}
	return &p.tracer
}

type stepTracer struct {
	embedded.Tracer
	s *settling
}

// Start starts a childSpan under the step span in ctx while that step runs, with
// the options' attributes, links, kind and start time; anything else (another
// parent, a new root) is the SDK's span.
func (tr *stepTracer) Start(ctx context.Context, name string, options ...trace.SpanStartOption) (context.Context, trace.Span) {
	p, ok := trace.SpanFromContext(ctx).(*stepSpan)
	c := trace.NewSpanStartConfig(options...)
	if !ok || p.s != tr.s || !p.IsRecording() || c.NewRoot() {
		return tr.s.t.tracer.Start(ctx, name, options...)
	}
	start := c.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	sp := newChild(p, name, trace.ValidateSpanKind(c.SpanKind()), start)
	sp.x.attrs = c.Attributes()
	for _, l := range c.Links() {
		if l.SpanContext.IsValid() || len(l.Attributes) > 0 {
			sp.x.links = append(sp.x.links, sdktrace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes})
		}
	}
	return trace.ContextWithSpan(ctx, &sp.stepSpan), &sp.stepSpan
}

func newChild(p *stepSpan, name string, kind trace.SpanKind, start time.Time) *childSpan {
	sp := &childSpan{stepSpan: stepSpan{s: p.s, name: name, id: newSpanID(), parent: p.id, kind: uint8(kind), child: true, start: p.s.at(start)}}
	sp.extra = &sp.x
	return sp
}

var _ tracectx.ClientStarter = (*stepProvider)(nil)

// StartClient starts a plugin or MCP call's client span as Start would, with its
// attributes in the span's own room.
func (p *stepProvider) StartClient(ctx context.Context, name, source, tool string) (context.Context, trace.Span) {
	parent, ok := trace.SpanFromContext(ctx).(*stepSpan)
	if !ok || parent.s != p.s || !parent.IsRecording() {
		return ctx, nil
	}
	sp := newChild(parent, name, trace.SpanKindClient, time.Now())
	sp.kv = [2]attribute.KeyValue{tracectx.SourceKey.String(source), tracectx.ToolKey.String(tool)}
	sp.x.attrs = sp.kv[:]
	return trace.ContextWithSpan(ctx, &sp.stepSpan), &sp.stepSpan
}

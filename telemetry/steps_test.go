package telemetry_test

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolhost/toolhost/internal/tracectx"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/telemetry"
)

// settleTraced settles one call of an in-process tool run by work through a
// registry observed by telemetry exporting to a real OTLP receiver, with the
// sampler named, and returns the spans the receiver got once telemetry shut down.
func settleTraced(t *testing.T, sampler string, work func(ctx context.Context, tel *telemetry.Telemetry)) []*tracepb.Span {
	t.Helper()
	return settleTracedUnder(t, t.Context(), sampler, "", work)
}

// settleTracedUnder is settleTraced with the call settled under ctx (which may
// carry a runner's span context) and OTEL_TRACES_SAMPLER_ARG set to arg.
func settleTracedUnder(t *testing.T, ctx context.Context, sampler, arg string, work func(ctx context.Context, tel *telemetry.Telemetry)) []*tracepb.Span {
	t.Helper()
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", arg)
	rcv := startReceiver(t)
	otlpEnv(t, rcv.addr)
	t.Setenv("OTEL_TRACES_SAMPLER", sampler)
	tel, err := telemetry.Start(t.Context(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	type in struct {
		Text string `json:"text"`
	}
	tool := sdk.NewTool("Works.", func(ctx context.Context, _ sdk.Invocation, in in) (string, error) {
		work(ctx, tel)
		return in.Text, nil
	})
	reg := newRegistry(t, tel.Observer())
	release, err := reg.Register(registry.Batch{Location: registry.Application, Source: registry.Source{Kind: "plugin", Name: "test"},
		Tools: map[string]sdk.Tool{"work": tool}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	q, err := reg.Prepare(registry.Application)
	if err != nil {
		t.Fatal(err)
	}
	s, err := q.Settle(ctx, registry.Call{Name: "work", Input: []byte(`{"text":"x"}`),
		Invocation: sdk.Invocation{SessionID: "s", ToolCallID: "c"}})
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("settle: %v %v", s, err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return append([]*tracepb.Span(nil), rcv.spans...)
}

// TestStepSpansAreSpansToTheStepsCode: a step's span is what an SDK span would be
// to the code that runs under it and to a collector: the tool's attributes, events
// and status reach the execute span, a span the tool starts with the SDK's tracer
// and one started through the step span's own provider are children of it, and
// every step lies within its settlement, one after another, in one trace.
func TestStepSpansAreSpansToTheStepsCode(t *testing.T) {
	spans := settleTraced(t, "always_on", func(ctx context.Context, tel *telemetry.Telemetry) {
		step := trace.SpanFromContext(ctx)
		if !step.IsRecording() {
			t.Error("the execute step's span is not recording while the tool runs")
		}
		step.SetAttributes(attribute.String("work.note", "first"), attribute.Int("work.n", 1))
		step.SetAttributes(attribute.String("work.note", "second"))
		step.RecordError(errors.New("a recoverable thing"))
		step.SetStatus(codes.Error, "the tool says so")
		_, own := tel.Tracer().Start(ctx, "work.sdk")
		own.End()
		_, cheap := step.TracerProvider().Tracer(tracectx.Scope).Start(ctx, "work.cheap",
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("work.kind", "client")))
		cheap.SetAttributes(attribute.Bool("work.done", true))
		cheap.End()
		cheap.SetAttributes(attribute.Bool("work.late", true)) // ended: ignored, as by the SDK
	})
	byName := map[string]*tracepb.Span{}
	for _, sp := range spans {
		if byName[sp.Name] != nil {
			t.Fatalf("two spans named %s", sp.Name)
		}
		byName[sp.Name] = sp
	}
	settle := byName["toolhost.settle"]
	if settle == nil {
		t.Fatalf("no settlement span; spans: %v", names(spans))
	}
	if a := attributes(settle); a["toolhost.tool"] != "work" || a["toolhost.outcome"] != "completed" || a["toolhost.source"] != "plugin:test" ||
		a["toolhost.session"] != "s" || a["toolhost.tool_call_id"] != "c" || a["toolhost.location"] != registry.Application || len(settle.Attributes) != 8 {
		t.Errorf("settlement attributes %v", settle.Attributes)
	}
	for _, kv := range settle.Attributes {
		if want := map[string]int64{"toolhost.input.bytes": 12, "toolhost.output.bytes": 1}[kv.Key]; want != 0 && kv.Value.GetIntValue() != want {
			t.Errorf("settlement attribute %s = %v, want %d", kv.Key, kv.Value, want)
		}
	}
	var prevEnd uint64
	for _, name := range []string{"validate_input", "execute", "validate_output", "project", "bound"} {
		sp := byName["toolhost."+name]
		switch {
		case sp == nil:
			t.Fatalf("no span for step %s; spans: %v", name, names(spans))
		case string(sp.TraceId) != string(settle.TraceId) || string(sp.ParentSpanId) != string(settle.SpanId):
			t.Errorf("step %s is not a child of the settlement span", name)
		case len(sp.SpanId) != 8 || string(sp.SpanId) == string(settle.SpanId) || hex.EncodeToString(sp.SpanId) == "0000000000000000":
			t.Errorf("step %s has span ID %x", name, sp.SpanId)
		case sp.Kind != tracepb.Span_SPAN_KIND_INTERNAL:
			t.Errorf("step %s is of kind %v, want internal", name, sp.Kind)
		case sp.StartTimeUnixNano < settle.StartTimeUnixNano || sp.EndTimeUnixNano > settle.EndTimeUnixNano || sp.StartTimeUnixNano > sp.EndTimeUnixNano:
			t.Errorf("step %s [%d, %d] does not lie within its settlement [%d, %d]", name,
				sp.StartTimeUnixNano, sp.EndTimeUnixNano, settle.StartTimeUnixNano, settle.EndTimeUnixNano)
		case sp.StartTimeUnixNano < prevEnd:
			t.Errorf("step %s starts before the previous step ended", name)
		}
		prevEnd = sp.EndTimeUnixNano
	}
	exec := byName["toolhost.execute"]
	if a := attributes(exec); a["work.note"] != "second" || len(exec.Attributes) != 2 {
		t.Errorf("execute span attributes %v, want work.note=second and work.n", exec.Attributes)
	}
	if len(exec.Events) != 1 || exec.Events[0].Name != "exception" {
		t.Errorf("execute span events %v, want the recorded error", exec.Events)
	}
	if exec.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || exec.Status.GetMessage() != "the tool says so" {
		t.Errorf("execute span status %v, want the tool's error", exec.Status)
	}
	for _, name := range []string{"work.sdk", "work.cheap"} {
		if sp := byName[name]; sp == nil || string(sp.ParentSpanId) != string(exec.SpanId) || string(sp.TraceId) != string(exec.TraceId) {
			t.Errorf("the tool's span %s is not a child of the execute step; spans: %v", name, names(spans))
		}
	}
	cheap := byName["work.cheap"]
	if a := attributes(cheap); cheap.Kind != tracepb.Span_SPAN_KIND_CLIENT || a["work.kind"] != "client" || len(cheap.Attributes) != 2 {
		t.Errorf("work.cheap: kind %v, attributes %v; want client, work.kind and work.done only", cheap.Kind, cheap.Attributes)
	}
}

// TestUnsampledSettlementHasNoStepSpans: a settlement its sampler drops exports no
// span at all, and its tool runs under a span that does not record.
func TestUnsampledSettlementHasNoStepSpans(t *testing.T) {
	spans := settleTraced(t, "always_off", func(ctx context.Context, _ *telemetry.Telemetry) {
		if trace.SpanFromContext(ctx).IsRecording() {
			t.Error("the tool of an unsampled settlement runs under a recording span")
		}
	})
	if len(spans) != 0 {
		t.Errorf("the receiver got spans %v of an unsampled settlement", names(spans))
	}
}

// TestSettlementSpanIsSampledAsTheSDKSamples: the settlement span, which telemetry
// records itself, follows the sampler the OTEL_* variables name and the runner's
// span context as an SDK span would: a child of the runner's span in its trace,
// with its tracestate and its flags; dropped when a parent-based sampler's parent
// was not sampled, or a ratio of 0 says so, its span context still reaching the
// tool; and an unknown sampler is parent based, always on, as in the SDK.
func TestSettlementSpanIsSampledAsTheSDKSamples(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	state, err := trace.ParseTraceState("vendor=x")
	if err != nil {
		t.Fatal(err)
	}
	runner := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithRemoteSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tid, SpanID: sid, TraceFlags: flags, TraceState: state, Remote: true}))
	}
	inRunnersTrace := func(t *testing.T) func(context.Context, *telemetry.Telemetry) {
		return func(ctx context.Context, _ *telemetry.Telemetry) {
			if got := trace.SpanContextFromContext(ctx); got.TraceID() != tid || got.SpanID() == sid || got.TraceState().Get("vendor") != "x" {
				t.Errorf("the tool runs under span context %v, want one of the runner's trace with its tracestate", got)
			}
		}
	}
	for _, tc := range []struct {
		name, sampler, arg string
		parent             trace.TraceFlags
		sampled            bool
	}{
		{"ParentBasedWithASampledParent", "parentbased_always_on", "", trace.FlagsSampled, true},
		{"ParentBasedWithAnUnsampledParent", "parentbased_always_on", "", 0, false},
		{"AlwaysOnWithAnUnsampledParent", "always_on", "", 0, true},
		{"RatioZero", "traceidratio", "0", trace.FlagsSampled, false},
		{"ParentBasedRatioZeroWithASampledParent", "parentbased_traceidratio", "0", trace.FlagsSampled, true},
		{"UnknownSamplerIsParentBasedAlwaysOn", "nonesuch", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := settleTracedUnder(t, runner(tc.parent), tc.sampler, tc.arg, inRunnersTrace(t))
			if !tc.sampled {
				if len(spans) != 0 {
					t.Errorf("exported %v, want nothing", names(spans))
				}
				return
			}
			var settle *tracepb.Span
			for _, sp := range spans {
				if sp.Name == "toolhost.settle" {
					settle = sp
				}
			}
			switch {
			case settle == nil:
				t.Fatalf("no settlement span among %v", names(spans))
			case string(settle.TraceId) != string(tid[:]) || string(settle.ParentSpanId) != string(sid[:]):
				t.Errorf("settlement span in trace %x under %x, want the runner's %s under %s", settle.TraceId, settle.ParentSpanId, tid, sid)
			case settle.TraceState != "vendor=x":
				t.Errorf("settlement span's tracestate %q, want the runner's", settle.TraceState)
			case settle.Flags&0x300 != 0x300: // the parent is known and remote
				t.Errorf("settlement span's flags %#x, want its parent remote", settle.Flags)
			case len(spans) != 6:
				t.Errorf("exported %v, want the settlement and its 5 steps", names(spans))
			}
		})
	}
	t.Run("ARootOfItsOwn", func(t *testing.T) {
		spans := settleTracedUnder(t, t.Context(), "parentbased_always_on", "", func(context.Context, *telemetry.Telemetry) {})
		for _, sp := range spans {
			if sp.Name == "toolhost.settle" && (len(sp.ParentSpanId) != 0 || len(sp.TraceId) != 16 || sp.Flags&0x100 == 0 || sp.Flags&0x200 != 0) {
				t.Errorf("a settlement without a runner's trace: parent %x, trace %x, flags %#x; want a root", sp.ParentSpanId, sp.TraceId, sp.Flags)
			}
		}
		if len(spans) != 6 {
			t.Errorf("exported %v, want the settlement and its 5 steps", names(spans))
		}
	})
}

// TestSpansReachAnHTTPCollector: with OTLP over HTTP (the protocol's default), a
// settlement's spans reach a collector's /v1/traces as a protobuf export request.
func TestSpansReachAnHTTPCollector(t *testing.T) {
	var mu sync.Mutex
	var got []*tracepb.Span
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("collector: %s %s: %v", r.Method, r.URL.Path, err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				got = append(got, ss.Spans...)
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer srv.Close()
	for k, v := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_METRICS_EXPORTER":       "none",
		"OTEL_TRACES_SAMPLER":         "always_on",
	} {
		t.Setenv(k, v)
	}
	tel, err := telemetry.Start(t.Context(), telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	settleEcho(t, tel)
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"toolhost.settle", "toolhost.validate_input", "toolhost.execute", "toolhost.validate_output", "toolhost.project", "toolhost.bound"}
	if n := names(got); !sameSet(n, want) {
		t.Errorf("the collector got spans %v, want %v", n, want)
	}
}

// settleEcho settles one call of an in-process echo tool, of the source
// plugin:test, through a registry tel observes.
func settleEcho(t *testing.T, tel *telemetry.Telemetry) {
	t.Helper()
	settleEchoes(t, tel, 1)
}

// settleEchoes settles n calls of an in-process echo tool through a registry
// observed by tel.
func settleEchoes(t *testing.T, tel *telemetry.Telemetry, n int) {
	t.Helper()
	echo := sdk.NewTool("Echoes.", func(_ context.Context, _ sdk.Invocation, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	reg := newRegistry(t, tel.Observer())
	release, err := reg.Register(registry.Batch{Location: registry.Application, Source: registry.Source{Kind: "plugin", Name: "test"},
		Tools: map[string]sdk.Tool{"echo": echo}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	q, err := reg.Prepare(registry.Application)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if s, err := q.Settle(t.Context(), registry.Call{Name: "echo", Input: []byte(`{"text":"x"}`)}); err != nil || s.Outcome != registry.Completed {
			t.Fatalf("settle: %v %v", s, err)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

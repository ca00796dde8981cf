package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
)

// observer is the registry.Observer of a Telemetry.
type observer struct{ t *Telemetry }

// callKey identifies a settlement in flight, as a permission request names it.
type callKey struct{ location, session, call string }

// settling is one settlement being observed.
type settling struct {
	t           *Telemetry
	key         callKey
	tool        string
	agent       string
	start       time.Time
	startNano   int64 // start in Unix nanoseconds, for recorded spans' times (see at)
	inputBytes  int
	inputSHA256 [sha256.Size]byte // only with an audit trail

	source      registry.Source // set by Resolved; its ID is made only when exported or written
	span        trace.Span      // the settlement's, nil when traces are off
	outcome     string          // set by End
	outputBytes int             // set by End; -1: no Settlement

	// A sampled settlement (sampled set) records its span and its steps' in
	// spans (see stepSpan): spans[0] is the settlement's, with the span context
	// sc and the parent span context parent; spans[1:1+nsteps] are the steps',
	// cur the current one.
	sampled  bool
	sc       trace.SpanContext
	parent   trace.SpanContext
	spans    *[1 + maxSteps]stepSpan // a recordedSettling's, when sampled
	provider stepProvider            // the spans' TracerProvider
	nsteps   int
	cur      *stepSpan

	mu        sync.Mutex // decisions, and what a step's code sets on its span
	decisions []auditDecision
}

// Outcomes of settlements that ended with an error rather than a Settlement.
const (
	outcomeInterrupted = "interrupted"
	outcomeDefect      = "defect"
	outcomeOperational = "operational_failure"
)

// recordedSettling is a sampled settlement with its span records, in one
// allocation.
type recordedSettling struct {
	settling
	spans [1 + maxSteps]stepSpan
}

func (o observer) StartSettle(ctx context.Context, location string, call registry.Call) (context.Context, registry.Settling) {
	t := o.t
	var smp sampling
	if t.tracer != nil {
		smp = t.sample(ctx)
	}
	var s *settling
	if smp.res.Decision == sdktrace.RecordAndSample {
		r := new(recordedSettling)
		s = &r.settling
		s.spans = &r.spans
	} else {
		s = new(settling)
	}
	s.t = t
	s.key = callKey{location, call.Invocation.SessionID, call.Invocation.ToolCallID}
	s.tool, s.agent = call.Name, call.Invocation.Agent
	s.start = time.Now()
	s.inputBytes = len(call.Input)
	if t.tracer != nil {
		ctx = s.startSpan(ctx, smp)
	}
	if t.audit != nil {
		s.inputSHA256 = sha256.Sum256(call.Input)
		t.mu.Lock()
		t.inflight[s.key] = s
		t.mu.Unlock()
	}
	return ctx, s
}

// settleSpanName is the name of a settlement's span.
const settleSpanName = "toolhost.settle"

// sampling is the sampler's decision on a settlement's span, and what it was made
// from.
type sampling struct {
	parent trace.SpanContext // ctx's: the runner's, or none
	tid    trace.TraceID     // the parent's trace, or a new one
	res    sdktrace.SamplingResult
}

// sample decides a settlement's span under ctx's span context as the SDK would
// decide it, by the same sampler (Telemetry.sampler), and before the span's
// attributes are known: none of the samplers toolhost configures reads them.
func (t *Telemetry) sample(ctx context.Context) sampling {
	parent := trace.SpanContextFromContext(ctx)
	tid := parent.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: settleSpanName, Kind: trace.SpanKindInternal})
	return sampling{parent, tid, res}
}

// startSpan starts the settlement's span as smp decided and returns ctx with it. A
// sampled one is recorded in place (spans[0], made with the settling), as its
// steps are: what the SDK would do for it (a recording span, its context, a
// snapshot at End) costs more than all the steps. A dropped one is a non-recording
// span that carries its span context on. Its attributes are set at End, all at
// once.
func (s *settling) startSpan(ctx context.Context, smp sampling) context.Context {
	t, parent, tid, res := s.t, smp.parent, smp.tid, smp.res
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceState: res.Tracestate}
	switch res.Decision {
	case sdktrace.Drop:
		cfg.TraceFlags = parent.TraceFlags() &^ trace.FlagsSampled
		ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(cfg))
		s.span = trace.SpanFromContext(ctx)
		return ctx
	case sdktrace.RecordOnly: // no sampler of the environment decides it
		ctx, s.span = t.tracer.Start(ctx, settleSpanName)
		return ctx
	}
	cfg.TraceFlags = parent.TraceFlags() | trace.FlagsSampled
	s.sampled, s.sc, s.parent = true, trace.NewSpanContext(cfg), parent
	s.provider.s, s.provider.tracer.s = s, s
	root := &s.spans[0]
	s.startNano = s.start.UnixNano()
	root.s, root.name, root.id, root.kind, root.start = s, settleSpanName, cfg.SpanID, uint8(trace.SpanKindInternal), s.startNano
	if len(res.Attributes) > 0 {
		root.extra = &stepExtra{attrs: res.Attributes}
	}
	s.span = root
	return trace.ContextWithSpan(ctx, root)
}

// at is t in Unix nanoseconds, measured from the settlement's start on the
// monotonic clock when t has a reading of it, so that a step's times follow the
// settlement's whatever the wall clock does meanwhile.
func (s *settling) at(t time.Time) int64 { return s.startNano + int64(t.Sub(s.start)) }

// Resolved keeps the source for End, which sets it on the span with the other
// attributes known only then.
func (s *settling) Resolved(src registry.Source) { s.source = src }

// stepNames are the span names of the steps, made once.
var stepNames = map[registry.Step]string{}

func init() {
	for _, st := range []registry.Step{registry.StepBeforeHooks, registry.StepValidateInput, registry.StepExecute,
		registry.StepValidateOutput, registry.StepProject, registry.StepBound, registry.StepAfterHooks} {
		stepNames[st] = "toolhost." + string(st)
	}
}

// runsOthersCode reports whether step runs code other than the registry's (a tool,
// a hook), which may start spans under the step's: the registry uses the context
// Step returns for those steps only.
func runsOthersCode(step registry.Step) bool {
	switch step {
	case registry.StepValidateInput, registry.StepValidateOutput, registry.StepProject, registry.StepBound:
		return false
	}
	return true
}

// Step ends the current step's span and begins step's, a child of the settlement
// span, in the returned context. A sampled settlement records its steps in place
// (stepSpan) and hands them to the batcher when it ends; an unsampled one has no
// step spans, and its steps run under the settlement span.
func (s *settling) Step(ctx context.Context, step registry.Step) context.Context {
	if s.span == nil {
		return ctx
	}
	now := time.Now()
	if s.cur != nil {
		s.cur.end(now)
	}
	if !s.sampled {
		return ctx // StartSettle's, with the settlement span: no step replaced it
	}
	if s.nsteps == maxSteps { // a step more than the registry has: it runs under the settlement
		s.cur = nil
		return trace.ContextWithSpan(ctx, s.span)
	}
	name, ok := stepNames[step]
	if !ok {
		name = "toolhost." + string(step)
	}
	s.nsteps++
	st := &s.spans[s.nsteps]
	st.s, st.name, st.id, st.parent, st.kind, st.start = s, name, newSpanID(), s.sc.SpanID(), uint8(trace.SpanKindInternal), s.at(now)
	s.cur = st
	if !runsOthersCode(step) {
		return ctx // the registry does not use it (see registry.Settling)
	}
	return trace.ContextWithSpan(ctx, st)
}

func (s *settling) End(st *registry.Settlement, err error) {
	t := s.t
	now := time.Now()
	elapsed := now.Sub(s.start)
	outcome := outcomeOf(st, err)
	if s.cur != nil {
		s.cur.end(now)
	}
	if s.span != nil {
		s.outcome, s.outputBytes = outcome, -1
		if st != nil {
			s.outputBytes = outputBytes(st)
		}
		if s.sampled {
			// The attributes are made when the span is exported (appendRootAttributes).
			root := &s.spans[0]
			if err != nil {
				root.SetStatus(codes.Error, outcome)
			}
			root.end(now)
			t.batch.onEndSteps(s.spans[:1+s.nsteps])
		} else if s.span.IsRecording() { // the SDK's, recorded but not sampled
			s.span.SetAttributes(s.appendAttributes(nil)...)
			if err != nil {
				s.span.SetStatus(codes.Error, outcome)
			}
			s.span.End()
		}
	}
	if t.inst != nil {
		opts := t.inst.callAttrs.get(callAttrKey{s.key.location, s.source.Kind, s.source.Name, s.tool, outcome})
		opts.calls.Add(1)
		opts.duration.record(elapsed.Seconds(), t.inst.callAttrs.interval)
	}
	if t.audit != nil {
		t.mu.Lock()
		if t.inflight[s.key] == s {
			delete(t.inflight, s.key)
		}
		t.mu.Unlock()
		line := auditSettlement{
			auditHead:   auditHead{Time: s.start.UTC(), Event: "settlement", Location: s.key.location},
			Session:     s.key.session,
			Agent:       s.agent,
			ToolCallID:  s.key.call,
			Source:      s.sourceID(),
			Tool:        s.tool,
			Outcome:     outcome,
			DurationMS:  float64(elapsed.Microseconds()) / 1000,
			InputBytes:  s.inputBytes,
			InputSHA256: hex.EncodeToString(s.inputSHA256[:]),
		}
		if st != nil {
			line.OutputBytes, line.OutputSHA256 = outputDigest(st)
			line.Managed = len(st.ManagedPaths)
		}
		if s.span != nil {
			line.TraceID = s.span.SpanContext().TraceID().String()
		}
		s.mu.Lock()
		line.Permission = s.decisions
		s.mu.Unlock()
		t.audit.write(line)
	}
}

// sourceID is the ID of the source that ran the call, or "" when none was
// resolved.
func (s *settling) sourceID() string {
	if s.source.Kind == "" {
		return ""
	}
	return s.source.ID()
}

// appendAttributes appends the settlement span's attributes, known once it ended.
func (s *settling) appendAttributes(attrs []attribute.KeyValue) []attribute.KeyValue {
	attrs = append(attrs,
		attribute.String("toolhost.location", s.key.location),
		attribute.String("toolhost.tool", s.tool),
		attribute.String("toolhost.session", s.key.session),
		attribute.String("toolhost.tool_call_id", s.key.call),
		attribute.Int("toolhost.input.bytes", s.inputBytes),
		attribute.String("toolhost.outcome", s.outcome))
	if id := s.sourceID(); id != "" {
		attrs = append(attrs, attribute.String("toolhost.source", id))
	}
	if s.outputBytes >= 0 {
		attrs = append(attrs, attribute.Int("toolhost.output.bytes", s.outputBytes))
	}
	return attrs
}

// appendRootAttributes appends the recorded settlement span's attributes, made
// for its exporter: those the settlement sets at its end, then any others set on
// it (by its sampler, or through the span) under keys of their own, as
// SetAttributes would leave them.
func (s *settling) appendRootAttributes(attrs []attribute.KeyValue) []attribute.KeyValue {
	from := len(attrs)
	attrs = s.appendAttributes(attrs)
	if x := s.spans[0].extra; x != nil {
		own := attrs[from:len(attrs):len(attrs)]
		for _, a := range x.attrs {
			if !slices.ContainsFunc(own, func(b attribute.KeyValue) bool { return b.Key == a.Key }) {
				attrs = append(attrs, a)
			}
		}
	}
	return attrs
}

// outcomeOf is the Settlement's outcome, or the kind of error that ended the call.
func outcomeOf(st *registry.Settlement, err error) string {
	switch {
	case err == nil:
		return string(st.Outcome)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeInterrupted
	case isDefect(err):
		return outcomeDefect
	}
	return outcomeOperational
}

// isDefect is apart from outcomeOf so that a settlement without an error does not
// allocate the target errors.As needs.
func isDefect(err error) bool {
	var defect *registry.DefectError
	return errors.As(err, &defect)
}

// outputBytes is the size of what a settlement publishes: its parts' text and data
// and its structured output.
func outputBytes(st *registry.Settlement) int {
	n := len(st.Structured)
	for _, p := range st.Content {
		n += len(p.Text) + len(p.Data)
	}
	return n
}

// outputDigest is outputBytes and the SHA-256 of those bytes in order (each part's
// text, then its data, then the structured output).
func outputDigest(st *registry.Settlement) (int, string) {
	h := sha256.New()
	for _, p := range st.Content {
		h.Write([]byte(p.Text))
		h.Write(p.Data)
	}
	h.Write(st.Structured)
	return outputBytes(st), hex.EncodeToString(h.Sum(nil))
}

// decided receives a permission decision of the Location loc: it counts it, adds
// spans for it (and for the person's ask) under the span it was made in, or else
// under its settlement's current step, and adds it to its settlement's audit line.
func (t *Telemetry) decided(ctx context.Context, loc string, d permission.Decision) {
	end := time.Now()
	t.mu.Lock()
	s := t.inflight[callKey{loc, d.Request.SessionID, d.Request.Source.CallID}]
	l := t.locations[loc]
	t.mu.Unlock()
	if t.inst != nil {
		t.inst.decisions.Add(context.Background(), 1, metric.WithAttributes(
			attribute.String("toolhost.location", loc),
			attribute.String("toolhost.effect", string(d.Effect)),
			attribute.Bool("toolhost.asked", d.Asked),
			attribute.Bool("toolhost.allowed", d.Allowed),
		))
	}
	if t.tracer != nil {
		parent := trace.SpanFromContext(ctx)
		if !parent.IsRecording() && s != nil {
			if cur := s.cur; cur != nil {
				parent = cur // a trusted plugin's request arrives on a context of its own
			} else if s.span != nil {
				parent = s.span
			}
		}
		if parent.IsRecording() {
			pctx := trace.ContextWithSpan(context.Background(), parent)
			attrs := []attribute.KeyValue{
				attribute.String("toolhost.permission.action", d.Request.Action),
				attribute.String("toolhost.effect", string(d.Effect)),
				attribute.Int("toolhost.permission.rule", d.Rule),
				attribute.Bool("toolhost.asked", d.Asked),
				attribute.Bool("toolhost.allowed", d.Allowed),
			}
			if d.Asked {
				attrs = append(attrs, attribute.String("toolhost.permission.reply", string(d.Reply)))
			}
			dctx, span := t.tracer.Start(pctx, "toolhost.permission", trace.WithTimestamp(d.Start), trace.WithAttributes(attrs...))
			if d.Asked {
				_, ask := t.tracer.Start(dctx, "toolhost.permission.ask", trace.WithTimestamp(d.Start))
				ask.End(trace.WithTimestamp(d.Start.Add(d.Waited)))
			}
			span.End(trace.WithTimestamp(end))
		}
	}
	if t.audit != nil && s != nil {
		ad := auditDecision{
			Action:    d.Request.Action,
			Resources: len(d.Request.Resources),
			Effect:    string(d.Effect),
			Approved:  d.Approved,
			Asked:     d.Asked,
			Reply:     string(d.Reply),
			Saved:     d.Saved,
			Allowed:   d.Allowed,
		}
		if d.Asked {
			ad.WaitMS = float64(d.Waited.Microseconds()) / 1000
		}
		if d.Rule >= 0 {
			ad.Rule = &auditRule{Index: d.Rule}
			if l != nil && d.Rule < len(l.Config().Permission) {
				r := l.Config().Permission[d.Rule]
				ad.Rule.Action, ad.Rule.Resource, ad.Rule.Effect, ad.Rule.Source = r.Action, r.Resource, string(r.Effect), r.Source
			}
		}
		s.mu.Lock()
		s.decisions = append(s.decisions, ad)
		s.mu.Unlock()
	}
}

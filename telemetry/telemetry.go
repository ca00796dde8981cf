package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolhost/toolhost/internal/tracectx"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
)

// Options configure Start.
type Options struct {
	// Getenv reads the OTEL_* variables that decide whether and where traces and
	// metrics are exported: the exporter, the OTLP protocol, the prometheus
	// exporter's host and port, the sampler (the OTLP exporters read their
	// endpoint, headers and TLS settings from the process environment). Default:
	// os.Getenv.
	Getenv func(string) string
	// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME (or
	// OTEL_RESOURCE_ATTRIBUTES) sets one; default "toolhost".
	ServiceName string
	// Prometheus makes Handler serve the metrics as Prometheus text (whatever
	// OTEL_METRICS_EXPORTER says).
	Prometheus bool
	// AuditDir, if set, is where the audit trail is written (see AuditDir); it is
	// made, mode 0700, if missing.
	AuditDir string
	// AuditMaxBytes is the size at which audit.jsonl is rotated; default 16 MiB.
	// AuditKeep is how many rotated files are kept; default 8.
	AuditMaxBytes int64
	AuditKeep     int
	// Logger receives, as warnings, what telemetry could not do while it runs
	// (spans or metrics not exported, and why), each kind at most once a minute.
	// Default: standard error.
	Logger hclog.Logger
}

// Telemetry is what Start configured: the tracer and meter providers, the
// reader of the Prometheus endpoint and the audit trail, any of which may be off. Its methods are
// safe for concurrent use. Shutdown flushes and closes it.
type Telemetry struct {
	tp     *sdktrace.TracerProvider // nil: traces off
	tracer trace.Tracer             // nil: traces off
	batch  *batcher                 // tp's span processor; nil: traces off

	// With traces on: tp's sampler, and the resource and scope of toolhost's
	// spans, for the spans telemetry records itself (see stepSpan).
	sampler sdktrace.Sampler
	spanRes *resource.Resource
	scope   instrumentation.Scope

	mp *sdkmetric.MeterProvider // nil: metrics off
	// metricsEndpoint is where OTLP metrics go; "" when they do not.
	metricsEndpoint string
	inst            *instruments            // nil: metrics off
	prom            *sdkmetric.ManualReader // nil: no Prometheus endpoint
	audit           *auditLog               // nil: no audit trail

	storage atomic.Pointer[registry.Storage]

	mu        sync.Mutex
	locations map[string]*location.Location // watched, for metrics and rule texts
	inflight  map[callKey]*settling         // settlements in flight, for their permission decisions
}

// Start configures telemetry from opts and the environment. It fails when an
// exporter variable names an unknown exporter or protocol, the prometheus
// exporter cannot listen on its address, or the audit directory cannot be made or is refused (others may write it, or a link stands in place of its files). The returned Telemetry must be shut down (Shutdown) to flush
// what is buffered.
func Start(ctx context.Context, opts Options) (*Telemetry, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if opts.ServiceName == "" {
		opts.ServiceName = "toolhost"
	}
	t := &Telemetry{locations: map[string]*location.Location{}, inflight: map[callKey]*settling{}}
	reports.setLogger(opts.Logger)
	traces, metrics := exporting(getenv, "TRACES"), exporting(getenv, "METRICS")
	var res *resource.Resource
	if traces || metrics || opts.Prometheus {
		var err error
		res, err = resource.New(ctx,
			resource.WithAttributes(attribute.String("service.name", opts.ServiceName)),
			resource.WithFromEnv(), resource.WithTelemetrySDK())
		if err != nil && res == nil {
			return nil, fmt.Errorf("telemetry: resource: %w", err)
		}
	}
	if traces {
		exp, client, endpoint, err := newSpanExporter(ctx, getenv)
		if err != nil {
			return nil, fmt.Errorf("telemetry: traces: %w", err)
		}
		sampler, err := samplerFromEnv(getenv)
		if err != nil {
			otel.Handle(err)
		}
		// The resource the SDK gives its spans (it merges the environment's under
		// the one it is given): the settlement and step spans carry it too.
		spanRes, err := resource.Merge(resource.Environment(), res)
		if err != nil {
			spanRes = res
		}
		t.sampler, t.spanRes, t.scope = sampler, spanRes, instrumentation.Scope{Name: tracectx.Scope}
		t.batch = newBatcher(exp, client, endpoint, getenv)
		reports.quietly(func() {
			t.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(t.batch), sdktrace.WithResource(spanRes), sdktrace.WithSampler(sampler))
		})
		t.tracer = t.tp.Tracer(tracectx.Scope)
	}
	var readers []sdkmetric.Option
	calls := &attrCache{}
	if metrics {
		r, endpoint, err := newMetricReader(ctx, getenv, calls)
		if err != nil {
			t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: metrics: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(r))
		t.metricsEndpoint = endpoint
	}
	if opts.Prometheus {
		t.prom = sdkmetric.NewManualReader(sdkmetric.WithProducer(producerFor(calls, sdkmetric.DefaultTemporalitySelector)))
		readers = append(readers, sdkmetric.WithReader(t.prom))
	}
	if len(readers) > 0 {
		t.mp = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		inst, err := newInstruments(t.mp.Meter(tracectx.Scope), t, calls)
		if err != nil {
			t.Shutdown(ctx)
			return nil, err
		}
		t.inst = inst
	}
	if opts.AuditDir != "" {
		a, err := openAudit(opts.AuditDir, opts.AuditMaxBytes, opts.AuditKeep)
		if err != nil {
			t.Shutdown(ctx)
			return nil, err
		}
		t.audit = a
	}
	return t, nil
}

// exporting reports whether the OTEL_* variables ask for signal ("TRACES",
// "METRICS") to be exported: OTEL_<signal>_EXPORTER names an exporter other than
// "none", or is unset while an OTLP endpoint is configured; never when
// OTEL_SDK_DISABLED is "true".
func exporting(getenv func(string) string, signal string) bool {
	if getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	if v := getenv("OTEL_" + signal + "_EXPORTER"); v != "" {
		return v != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// on reports whether anything observes settlements.
func (t *Telemetry) on() bool { return t.tracer != nil || t.inst != nil || t.audit != nil }

// Observer returns the registry.Observer of settlements (registry.Options.Observer),
// or nil when traces, metrics and the audit trail are all off.
func (t *Telemetry) Observer() registry.Observer {
	if t == nil || !t.on() {
		return nil
	}
	return observer{t}
}

// ObservePermission returns the receiver of permission decisions
// (location.Options.ObservePermission), or nil when everything is off.
func (t *Telemetry) ObservePermission() func(context.Context, string, permission.Decision) {
	if t == nil || !t.on() {
		return nil
	}
	return t.decided
}

// SetStorage names the managed storage whose bytes per Location the
// toolhost.storage.bytes metric reports.
func (t *Telemetry) SetStorage(st *registry.Storage) { t.storage.Store(st) }

// Tracer returns the tracer of toolhost's spans; a no-op one when traces are off.
// A plugin that starts telemetry uses it for spans of its own: under a tool's
// context they join the host's trace.
func (t *Telemetry) Tracer() trace.Tracer {
	if t == nil || t.tracer == nil {
		return noop.NewTracerProvider().Tracer(tracectx.Scope)
	}
	return t.tracer
}

// Handler serves the metrics as Prometheus text, or is nil without
// Options.Prometheus. It is for a listener on loopback: it refuses requests whose
// Host or Origin names anything else (see promHandler).
func (t *Telemetry) Handler() http.Handler {
	if t.prom == nil {
		return nil
	}
	return promHandler{r: t.prom, local: true}
}

// Shutdown exports what is buffered, stops the exporters and closes the audit
// trail, within ctx. What could not be exported is an *ExportError among its
// errors. It is idempotent only in that later calls do nothing useful; call it
// once.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	var add func(error)
	add = func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, err := range joined.Unwrap() {
				add(err)
			}
			return
		}
		if ee := (*ExportError)(nil); errors.As(err, &ee) {
			errs = append(errs, ee) // it says what was lost and why
		} else if err != nil {
			errs = append(errs, fmt.Errorf("telemetry: shut down: %w", err))
		}
	}
	// Traces and metrics flush at once, each within ctx: an unreachable collector
	// costs the caller ctx once, and neither starves the other of its time.
	var metricsErr error
	var wg sync.WaitGroup
	if t.mp != nil {
		wg.Go(func() {
			metricsErr = t.mp.Shutdown(ctx)
			if ee := (*ExportError)(nil); metricsErr != nil && !errors.As(metricsErr, &ee) && ctx.Err() != nil && t.metricsEndpoint != "" {
				// The reader gave up before its last export.
				metricsErr = &ExportError{Signal: "METRICS", Endpoint: t.metricsEndpoint, Err: ctx.Err()}
			}
		})
	}
	if t.tp != nil {
		add(t.tp.Shutdown(ctx))
	}
	wg.Wait()
	add(metricsErr)
	if t.audit != nil {
		add(t.audit.Close())
	}
	return errors.Join(errs...)
}

// instruments are the metrics toolhost records.
// The toolhost.call.duration histogram is not among them: its readers' producers
// report it (see durationProducer).
type instruments struct {
	decisions metric.Int64Counter
	callAttrs *attrCache // of toolhost.calls and toolhost.call.duration
}

func newInstruments(m metric.Meter, t *Telemetry, callAttrs *attrCache) (*instruments, error) {
	in := instruments{callAttrs: callAttrs}
	var errs [7]error
	calls, e0 := m.Int64ObservableCounter("toolhost.calls", metric.WithUnit("{call}"),
		metric.WithDescription("Settled calls, by Location, source, tool and outcome."))
	errs[0] = e0
	in.decisions, errs[2] = m.Int64Counter("toolhost.permission.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Permission decisions, by Location, the policy's effect (allow, deny, ask), whether a person was asked and whether the request was allowed."))
	sourceState, e3 := m.Int64ObservableGauge("toolhost.source.state", metric.WithUnit("{source}"),
		metric.WithDescription("1 for each source of a watched Location in its current state (starting, running, restarting, failed, stopped)."))
	sourceRestarts, e4 := m.Int64ObservableCounter("toolhost.source.restarts", metric.WithUnit("{restart}"),
		metric.WithDescription("Generations of a source started again after a crash or failed start, since its last restart by hand."))
	sourceContained, e5 := m.Int64ObservableGauge("toolhost.source.containment", metric.WithUnit("{source}"),
		metric.WithDescription("1 for each running source process, by how its process tree is held (namespace, cgroup, subreaper, none) and whether Landlock confines it."))
	storageBytes, e6 := m.Int64ObservableGauge("toolhost.storage.bytes", metric.WithUnit("By"),
		metric.WithDescription("Bytes of managed storage (oversized output) retained for each Location."))
	errs[3], errs[4], errs[5], errs[6] = e3, e4, e5, e6
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		in.callAttrs.observeCalls(ctx, o, calls)
		t.observeSources(o, sourceState, sourceRestarts, sourceContained, storageBytes)
		return nil
	}, calls, sourceState, sourceRestarts, sourceContained, storageBytes)
	if err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	return &in, nil
}

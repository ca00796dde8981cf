package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ExportError is spans or metrics that could not be delivered to the OTLP
// endpoint the OTEL_* variables name. It says where they were going and why they
// did not arrive, in words rather than the exporter's error chain (gRPC codes,
// transport internals), which stays reachable through Unwrap.
type ExportError struct {
	Signal   string // "TRACES" or "METRICS", as in OTEL_TRACES_EXPORTER
	Spans    int    // how many spans were lost; 0 when not known, or for metrics
	Endpoint string // where they were sent; "" when not over OTLP
	Err      error
}

func (e *ExportError) Error() string {
	what := "metrics"
	switch {
	case e.Signal == "TRACES" && e.Spans == 1:
		what = "1 span"
	case e.Signal == "TRACES" && e.Spans > 1:
		what = fmt.Sprintf("%d spans", e.Spans)
	case e.Signal == "TRACES":
		what = "spans"
	}
	if e.Endpoint == "" { // not OTLP: the console
		return fmt.Sprintf("telemetry: %s not exported: %s", what, exportReason(e.Err))
	}
	if errors.As(e.Err, new(queueFullError)) { // the receiver answers, more slowly than spans end
		return fmt.Sprintf("telemetry: %s not exported to %s: %s; raise OTEL_BSP_MAX_QUEUE_SIZE, sample fewer traces (OTEL_TRACES_SAMPLER), or check that the receiver keeps up",
			what, e.Endpoint, exportReason(e.Err))
	}
	return fmt.Sprintf("telemetry: %s not exported to %s: %s; check that an OTLP receiver listens there (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL), or set OTEL_%s_EXPORTER=none",
		what, e.Endpoint, exportReason(e.Err), e.Signal)
}

func (e *ExportError) Unwrap() error { return e.Err }

// exportReason says why an export failed, for a person.
func exportReason(err error) string {
	var grpcErr interface{ GRPCStatus() *status.Status }
	if errors.As(err, &grpcErr) {
		st := grpcErr.GRPCStatus()
		detail := lastCause(st.Message())
		switch st.Code() {
		case codes.Unavailable:
			return "it could not be reached (" + detail + ")"
		case codes.DeadlineExceeded:
			return "it did not answer in time"
		case codes.Canceled:
			return "the export was cancelled"
		case codes.Unauthenticated, codes.PermissionDenied:
			return "it refused the credentials (" + detail + "); check OTEL_EXPORTER_OTLP_HEADERS"
		case codes.ResourceExhausted:
			return "it refused them as over its limits (" + detail + ")"
		case codes.Unimplemented:
			return "it does not serve OTLP over gRPC there (" + detail + ")"
		}
		return detail
	}
	var opErr *net.OpError
	switch {
	case errors.As(err, &opErr):
		return "it could not be reached (" + lastCause(opErr.Err.Error()) + ")"
	case errors.Is(err, context.DeadlineExceeded):
		return "it did not answer in time"
	case errors.Is(err, context.Canceled):
		return "the export was cancelled"
	}
	return err.Error()
}

// lastCause is the innermost part of an error message that wraps with ": ", quotes
// trimmed: "connection refused" of `connection error: desc = "transport: ...: connect:
// connection refused"`.
func lastCause(msg string) string {
	msg = strings.Trim(msg, `"`)
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return strings.Trim(msg, `"`)
}

// otlpEndpointOf is where the OTLP exporter of signal sends, as it reads the
// variables: the signal's endpoint, else the general one (with the signal's path,
// over HTTP), else the protocol's default.
func otlpEndpointOf(getenv func(string) string, signal, protocol string) string {
	if v := getenv("OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"); v != "" {
		return v
	}
	base := getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	if protocol == "grpc" {
		if base == "" {
			return "localhost:4317"
		}
		return base
	}
	if base == "" {
		base = "http://localhost:4318"
	}
	return strings.TrimSuffix(base, "/") + "/v1/" + strings.ToLower(signal)
}

// reportEvery is how often one kind of telemetry failure is reported while it
// keeps happening: an unreachable collector fails every export, every few seconds.
const reportEvery = time.Minute

// reporter is OpenTelemetry's error handler while telemetry runs (errors its SDK,
// the exporters and the batcher pass to otel.Handle): it writes each as a warning,
// at most once per reportEvery for each kind (the signal of an ExportError, else
// the message), counting the ones it held back.
type reporter struct {
	muted   atomic.Bool // see quietly
	mu      sync.Mutex
	log     hclog.Logger
	now     func() time.Time
	last    map[string]time.Time
	skipped map[string]int
}

// maxReportKinds bounds the kinds of failure the reporter remembers.
const maxReportKinds = 64

var reports = &reporter{now: time.Now}

func init() { otel.SetErrorHandler(reports) }

// setLogger makes log the reporter's output; nil writes to standard error.
func (r *reporter) setLogger(log hclog.Logger) {
	if log == nil {
		log = hclog.New(&hclog.LoggerOptions{Name: "toolhost", Level: hclog.Warn})
	}
	r.mu.Lock()
	r.log = log
	r.mu.Unlock()
}

// quietly runs f with the reporter silent: the SDK's TracerProvider reports the
// sampler variables' errors, in its words, after Start has reported them in its
// own (samplerFromEnv).
func (r *reporter) quietly(f func()) {
	r.muted.Store(true)
	defer r.muted.Store(false)
	f()
}

func (r *reporter) Handle(err error) {
	if err == nil || r.muted.Load() {
		return
	}
	kind := err.Error()
	if ee := (*ExportError)(nil); errors.As(err, &ee) {
		kind = ee.Signal
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if t, ok := r.last[kind]; ok && now.Sub(t) < reportEvery {
		r.skipped[kind]++
		return
	}
	if r.last == nil || len(r.last) >= maxReportKinds {
		// Kinds are messages, which may differ without end (a count in them): the
		// reporter forgets them rather than grow, and may then say one again early.
		r.last, r.skipped = map[string]time.Time{}, map[string]int{}
	}
	r.last[kind] = now
	msg := err.Error()
	if n := r.skipped[kind]; n > 0 {
		msg += fmt.Sprintf(" (and %d more times since the last report)", n)
		r.skipped[kind] = 0
	}
	log := r.log
	if log == nil {
		log = hclog.New(&hclog.LoggerOptions{Name: "toolhost", Level: hclog.Warn})
	}
	log.Warn(msg)
}

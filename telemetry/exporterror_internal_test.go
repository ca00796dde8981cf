package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestReporterSaysEachKindOnceAMinute: a collector that stays down fails every
// export; its failures are written once, then once a minute with how many were
// held back, each signal apart from the other.
func TestReporterSaysEachKindOnceAMinute(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1700000000, 0)
	r := &reporter{now: func() time.Time { return now }}
	r.setLogger(hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Warn}))
	down := status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:9: connect: connection refused"`)
	spans := &ExportError{Signal: "TRACES", Spans: 512, Endpoint: "localhost:4317", Err: down}
	metrics := &ExportError{Signal: "METRICS", Endpoint: "localhost:4317", Err: down}
	for range 3 {
		r.Handle(spans)
		r.Handle(metrics)
		now = now.Add(10 * time.Second)
	}
	now = now.Add(reportEvery)
	r.Handle(spans)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("wrote %d lines, want 3 (spans, metrics, spans again a minute on):\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[0], "512 spans not exported to localhost:4317: it could not be reached (connection refused)") ||
		!strings.Contains(lines[1], "metrics not exported") ||
		!strings.Contains(lines[2], "(and 2 more times since the last report)") {
		t.Errorf("lines:\n%s", out.String())
	}
}

// TestExportReasonsAreWords: the exporter's errors, as a person reads them.
func TestExportReasonsAreWords(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:9: connect: connection refused"`), "it could not be reached (connection refused)"},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), "it did not answer in time"},
		{status.Error(codes.Unauthenticated, "missing api key"), "it refused the credentials (missing api key); check OTEL_EXPORTER_OTLP_HEADERS"},
		{errors.Join(errors.New("exporter export timeout"), status.Error(codes.Unimplemented, "unknown service opentelemetry.proto.collector.trace.v1.TraceService")), "it does not serve OTLP over gRPC there (unknown service opentelemetry.proto.collector.trace.v1.TraceService)"},
	} {
		if got := exportReason(c.err); got != c.want {
			t.Errorf("exportReason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestReporterForgetsRatherThanGrows: failures whose messages all differ (a count
// in each) do not grow the reporter without end.
func TestReporterForgetsRatherThanGrows(t *testing.T) {
	now := time.Unix(1700000000, 0)
	r := &reporter{now: func() time.Time { return now }}
	r.setLogger(hclog.NewNullLogger())
	for i := range 10 * maxReportKinds {
		r.Handle(fmt.Errorf("OTLP partial success: %d spans rejected", i))
	}
	if len(r.last) > maxReportKinds || len(r.skipped) > maxReportKinds {
		t.Errorf("the reporter remembers %d kinds, want at most %d", len(r.last), maxReportKinds)
	}
}

// TestABadSamplerIsSaidOnceInWords: an OTEL_TRACES_SAMPLER toolhost does not know
// is reported once, by Start, saying what it uses instead; the SDK's own report of
// the same variable, in its words ("unsupported sampler"), is not written too.
func TestABadSamplerIsSaidOnceInWords(t *testing.T) {
	var out syncBuffer
	reports.mu.Lock()
	reports.last, reports.skipped = nil, nil // what earlier tests said
	reports.mu.Unlock()
	t.Setenv("OTEL_TRACES_SAMPLER", "bogus") // the SDK reads the process's
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")
	tel, err := Start(t.Context(), Options{Logger: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(t.Context())
	got := out.String()
	if n := strings.Count(got, `OTEL_TRACES_SAMPLER "bogus" is not a sampler toolhost knows`); n != 1 {
		t.Errorf("the bad sampler was said %d times, want once:\n%s", n, got)
	}
	if strings.Contains(got, "unsupported sampler") {
		t.Errorf("the SDK's report was written too:\n%s", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

package telemetry_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	colmetricspb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
)

// pluginBin is testdata/plugin, receiverBin testdata/receiver and mcpServerBin
// testdata/mcpserver, built once.
var pluginBin, receiverBin, mcpServerBin string

func TestMain(m *testing.M) {
	hosttest.Main(m, map[string]*string{"./testdata/plugin": &pluginBin, "./testdata/receiver": &receiverBin, "./testdata/mcpserver": &mcpServerBin})
}

// receiver is an OTLP/gRPC receiver: the protocol's own collector services, keeping
// every span and metric export it is sent.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer

	addr string

	mu      sync.Mutex
	spans   []*tracepb.Span
	metrics []*colmetricspb.ExportMetricsServiceRequest
}

func startReceiver(t testing.TB) *receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: lis.Addr().String()}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, r)
	colmetricspb.RegisterMetricsServiceServer(s, metricsService{r: r})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return r
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// metricsService adapts the receiver to the metrics service, whose method has the
// same name as the trace service's.
type metricsService struct {
	colmetricspb.UnimplementedMetricsServiceServer
	r *receiver
}

func (m metricsService) Export(_ context.Context, req *colmetricspb.ExportMetricsServiceRequest) (*colmetricspb.ExportMetricsServiceResponse, error) {
	m.r.mu.Lock()
	m.r.metrics = append(m.r.metrics, req)
	m.r.mu.Unlock()
	return &colmetricspb.ExportMetricsServiceResponse{}, nil
}

// spansOf returns the spans received so far of the trace id.
func (r *receiver) spansOf(traceID string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			out = append(out, s)
		}
	}
	return out
}

// otlpEnv points the OTEL_* variables at the receiver at addr, for the test (so
// it cannot run in parallel), and returns them as a plugin's config env.
func otlpEnv(t testing.TB, addr string) map[string]string {
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_TRACES_EXPORTER":        "otlp",
		"OTEL_METRICS_EXPORTER":       "otlp",
		"OTEL_TRACES_SAMPLER":         "parentbased_always_on",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	return env
}

// workspace writes a Location config running the test plugin with the given extra
// plugin fields and permission rules, and returns its directory.
func workspace(t testing.TB, pluginFields, rules string) string {
	t.Helper()
	dir, err := location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "stop_grace": "2s"%s}], "permission": %s}`, pluginBin, pluginFields, rules)
	if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, location.ConfigPath), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newRegistry(t testing.TB, obs registry.Observer) *registry.Registry {
	t.Helper()
	return hosttest.Registry(t, registry.Options{Observer: obs})
}

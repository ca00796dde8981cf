package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
)

// The exporters are chosen here from the standard variables, as the OpenTelemetry
// specification defines them, rather than by the contrib autoexport package: that
// one links every exporter it knows (logs, the client_golang Prometheus stack) and
// their package initialisation is paid by every toolhost command at start, whether
// or not telemetry is on.

// exporterName returns OTEL_<signal>_EXPORTER, or "otlp" when it is unset (Start
// asks only for the signals exporting reports).
func exporterName(getenv func(string) string, signal string) string {
	if v := getenv("OTEL_" + signal + "_EXPORTER"); v != "" {
		return v
	}
	return "otlp"
}

// otlpProtocol returns the OTLP protocol of signal: OTEL_EXPORTER_OTLP_<signal>_PROTOCOL,
// else OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf (the specification's default).
func otlpProtocol(getenv func(string) string, signal string) (string, error) {
	name := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	p := getenv(name)
	if p == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		p = getenv(name)
	}
	switch p {
	case "":
		return "http/protobuf", nil
	case "grpc", "http/protobuf":
		return p, nil
	}
	return "", fmt.Errorf("%s=%q is not an OTLP protocol toolhost speaks; set grpc or http/protobuf", name, p)
}

// newSpanExporter returns the span exporter OTEL_TRACES_EXPORTER names: otlp (over
// the protocol otlpProtocol says; its client reads the endpoint, headers and other
// settings from the process environment), with its started client for the
// batcher's own uploads and the endpoint it sends to, or console (stdout), with no
// client.
func newSpanExporter(ctx context.Context, getenv func(string) string) (_ sdktrace.SpanExporter, _ otlptrace.Client, endpoint string, _ error) {
	switch name := exporterName(getenv, "TRACES"); name {
	case "otlp":
		proto, err := otlpProtocol(getenv, "TRACES")
		if err != nil {
			return nil, nil, "", err
		}
		if err := checkOTLPEnv(getenv, "TRACES", proto); err != nil {
			return nil, nil, "", err
		}
		var c otlptrace.Client = otlptracehttp.NewClient()
		if proto == "grpc" {
			// The export requests are encoded by otlpCodec, without reflection, and
			// held by it to the exporter's request-size limit: the exporter's own
			// check measures each request with proto.Size, by reflection, which
			// cost a third of an export.
			codec := grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newOTLPCodec(maxExportRequest)))
			c = otlptracegrpc.NewClient(otlptracegrpc.WithDialOption(codec), otlptracegrpc.WithMaxRequestSize(0))
		}
		exp, err := otlptrace.New(ctx, c)
		if err != nil {
			return nil, nil, "", err
		}
		return exp, c, otlpEndpointOf(getenv, "TRACES", proto), nil
	case "console":
		exp, err := stdouttrace.New()
		return exp, nil, "", err
	default:
		return nil, nil, "", fmt.Errorf("OTEL_TRACES_EXPORTER=%q names no exporter toolhost has; set otlp, console or none", name)
	}
}

// newMetricReader returns the metric reader OTEL_METRICS_EXPORTER names: otlp or
// console, pushed periodically (OTEL_METRIC_EXPORT_INTERVAL, read by the SDK), or
// prometheus, a pull endpoint at http://OTEL_EXPORTER_PROMETHEUS_HOST:OTEL_EXPORTER_PROMETHEUS_PORT/metrics
// (default localhost:9464) that the returned reader's Shutdown closes. With otlp,
// it also returns the endpoint the metrics go to.
func newMetricReader(ctx context.Context, getenv func(string) string, calls *attrCache) (_ sdkmetric.Reader, otlpEndpoint string, _ error) {
	switch name := exporterName(getenv, "METRICS"); name {
	case "otlp":
		proto, err := otlpProtocol(getenv, "METRICS")
		if err != nil {
			return nil, "", err
		}
		if err := checkOTLPEnv(getenv, "METRICS", proto); err != nil {
			return nil, "", err
		}
		var exp sdkmetric.Exporter
		if proto == "grpc" {
			exp, err = otlpmetricgrpc.New(ctx)
		} else {
			exp, err = otlpmetrichttp.New(ctx)
		}
		if err != nil {
			return nil, "", err
		}
		endpoint := otlpEndpointOf(getenv, "METRICS", proto)
		return sdkmetric.NewPeriodicReader(metricExporter{exp, endpoint}, sdkmetric.WithProducer(producerFor(calls, exp.Temporality))), endpoint, nil
	case "console":
		exp, err := stdoutmetric.New()
		if err != nil {
			return nil, "", err
		}
		return sdkmetric.NewPeriodicReader(exp, sdkmetric.WithProducer(producerFor(calls, exp.Temporality))), "", nil
	case "prometheus":
		r, err := servePrometheus(ctx, getenv, calls)
		if err != nil {
			return nil, "", err
		}
		return r, "", nil
	default:
		return nil, "", fmt.Errorf("OTEL_METRICS_EXPORTER=%q names no exporter toolhost has; set otlp, prometheus, console or none", name)
	}
}

// metricExporter is an OTLP metric exporter whose failed exports are an
// *ExportError naming its endpoint.
type metricExporter struct {
	sdkmetric.Exporter
	endpoint string
}

func (e metricExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	if err := e.Exporter.Export(ctx, rm); err != nil {
		return &ExportError{Signal: "METRICS", Endpoint: e.endpoint, Err: err}
	}
	return nil
}

// promServer is the reader behind OTEL_METRICS_EXPORTER=prometheus: a manual
// reader whose metrics an HTTP server of its own serves as Prometheus text.
type promServer struct {
	*sdkmetric.ManualReader
	srv    *http.Server
	served chan struct{} // closed when Serve has returned
}

// servePrometheus listens on OTEL_EXPORTER_PROMETHEUS_HOST:PORT and serves a new
// manual reader's metrics at /metrics.
func servePrometheus(ctx context.Context, getenv func(string) string, calls *attrCache) (*promServer, error) {
	host, port := getenv("OTEL_EXPORTER_PROMETHEUS_HOST"), getenv("OTEL_EXPORTER_PROMETHEUS_PORT")
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		port = "9464"
	}
	addr := net.JoinHostPort(host, port)
	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("OTEL_METRICS_EXPORTER=prometheus: listen on %s (OTEL_EXPORTER_PROMETHEUS_HOST, OTEL_EXPORTER_PROMETHEUS_PORT): %w", addr, err)
	}
	r := sdkmetric.NewManualReader(sdkmetric.WithProducer(producerFor(calls, sdkmetric.DefaultTemporalitySelector)))
	mux := http.NewServeMux()
	local := false
	if a, ok := lis.Addr().(*net.TCPAddr); ok {
		local = a.IP.IsLoopback()
	}
	mux.Handle("/metrics", promHandler{r: r, local: local})
	p := &promServer{ManualReader: r, served: make(chan struct{}), srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}}
	go func() {
		defer close(p.served)
		if err := p.srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			otel.Handle(fmt.Errorf("telemetry: the Prometheus endpoint on %s stopped: %w", lis.Addr(), err))
		}
	}()
	return p, nil
}

// Shutdown stops the HTTP server, waiting for its requests within ctx, and the
// reader.
func (p *promServer) Shutdown(ctx context.Context) error {
	err := p.srv.Shutdown(ctx)
	<-p.served
	return errors.Join(err, p.ManualReader.Shutdown(ctx))
}

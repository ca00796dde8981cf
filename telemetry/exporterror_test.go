package telemetry_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolhost/toolhost/telemetry"
)

// TestAnUnreachableCollectorIsSaidInWords: with the OTLP endpoint refusing
// connections, over either protocol, a settlement still completes, and Shutdown
// returns within its context one *ExportError per signal that names what was lost,
// where it was going and why, in words: no gRPC status codes, no transport
// internals.
func TestAnUnreachableCollectorIsSaidInWords(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now: connections are refused
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
			t.Setenv("OTEL_METRICS_EXPORTER", "otlp")
			t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
			tel, err := telemetry.Start(t.Context(), telemetry.Options{})
			if err != nil {
				t.Fatal(err)
			}
			settleEcho(t, tel) // completes with the collector down
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = tel.Shutdown(ctx)
			if err == nil {
				t.Fatal("Shutdown reported every span and metric exported to a closed port")
			}
			signals := map[string]bool{}
			for _, err := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ee *telemetry.ExportError
				if !errors.As(err, &ee) {
					t.Errorf("Shutdown: %v, want an *ExportError", err)
					continue
				}
				signals[ee.Signal] = true
				msg := err.Error()
				for _, want := range []string{addr, "OTEL_" + ee.Signal + "_EXPORTER=none"} {
					if !strings.Contains(msg, want) {
						t.Errorf("%q does not say %q", msg, want)
					}
				}
				// The exporter retries a refused connection until the deadline, which
				// may fall during an attempt rather than between two.
				if !strings.Contains(msg, "could not be reached (connection refused)") && !strings.Contains(msg, "did not answer in time") {
					t.Errorf("%q does not say why in words", msg)
				}
				for _, internal := range []string{"rpc error", "code =", "desc =", "transport:"} {
					if strings.Contains(msg, internal) {
						t.Errorf("%q shows the exporter's internals (%q)", msg, internal)
					}
				}
			}
			if !signals["TRACES"] || !signals["METRICS"] {
				t.Errorf("Shutdown reported the signals %v, want TRACES and METRICS", signals)
			}
		})
	}
}

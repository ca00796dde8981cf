package telemetry_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
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

// TestAStalledCollectorStallsNoCall: a receiver that accepts connections and then
// never reads or answers (a hung collector, a full socket buffer) holds up only the
// exporter. Settlements go on, every one of them, while export after export waits;
// spans beyond the queue are dropped; and Shutdown returns within its context,
// having cancelled the export under way, with every span lost accounted for and
// why.
func TestAStalledCollectorStallsNoCall(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	conns := make(chan net.Conn, 64)
	held.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns <- c // held open, never read
		}
	})
	t.Cleanup(func() {
		lis.Close()
		held.Wait()
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
			t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
			t.Setenv("OTEL_METRICS_EXPORTER", "none")
			t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
			t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16") // an export waits after every two calls' spans
			t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
			tel, err := telemetry.Start(t.Context(), telemetry.Options{})
			if err != nil {
				t.Fatal(err)
			}
			const calls = 200 // 1200 spans (the settlement's and 5 steps'), 19 times the queue
			settleEchoes(t, tel, calls)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = tel.Shutdown(ctx)
			if err == nil {
				t.Fatal("Shutdown reported every span exported to a collector that never answers")
			}
			// Every span is accounted for: dropped from the full queue, or lost in
			// an export that never got its answer.
			lost, reasons := 0, map[string]bool{}
			for _, err := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ee *telemetry.ExportError
				if !errors.As(err, &ee) || ee.Signal != "TRACES" {
					t.Fatalf("Shutdown: %v, want TRACES *ExportErrors", err)
				}
				lost += ee.Spans
				if strings.Contains(err.Error(), "queue") != strings.Contains(err.Error(), "raise OTEL_BSP_MAX_QUEUE_SIZE") {
					t.Errorf("%q: a full queue's remedy is a larger queue or fewer spans, and only a full queue's", err)
				}
				for _, r := range []string{"did not answer in time", "span queue (OTEL_BSP_MAX_QUEUE_SIZE 64) was full"} {
					if strings.Contains(err.Error(), r) {
						reasons[r] = true
					}
				}
			}
			if lost != 6*calls {
				t.Errorf("Shutdown's errors count %d spans lost, want all %d: %v", lost, 6*calls, err)
			}
			if len(reasons) != 2 {
				t.Errorf("Shutdown's errors give the reasons %v, want both the silence and the full queue: %v", reasons, err)
			}
		})
	}
}

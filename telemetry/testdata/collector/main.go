// Command collector is the benchmark's OTLP/gRPC receiver when it is the
// OpenTelemetry Collector's own (otlpreceiver), in a process of its own as a local
// Collector is: it receives traces and metrics on 127.0.0.1, prints "listening
// ADDR" once it listens, counts the spans its traces consumer is given, and when its
// stdin closes prints "spans N" and exits. It speaks as testdata/receiver does,
// which serves the protocol's reference types instead; the two are kept apart so
// that toolhost's module does not depend on the Collector's.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

func main() {
	addr, spans, stop, err := start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "collector:", err)
		os.Exit(1)
	}
	fmt.Printf("listening %s\n", addr)
	io.Copy(io.Discard, os.Stdin)
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "collector:", err)
		os.Exit(1)
	}
	fmt.Printf("spans %d\n", spans.Load())
}

// start starts the receiver on a free port of 127.0.0.1. The receiver takes an
// address, not a listener, so the port is found by listening and closing first;
// another process may take it in between, so a failed start is tried again.
func start() (addr string, spans *atomic.Int64, stop func() error, err error) {
	spans = new(atomic.Int64)
	traces, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		spans.Add(int64(td.SpanCount()))
		return nil
	})
	if err != nil {
		return "", nil, nil, err
	}
	metrics, err := consumer.NewMetrics(func(context.Context, pmetric.Metrics) error { return nil })
	if err != nil {
		return "", nil, nil, err
	}
	f := otlpreceiver.NewFactory()
	for range 10 {
		addr, err = freePort()
		if err != nil {
			return "", nil, nil, err
		}
		cfg := f.CreateDefaultConfig().(*otlpreceiver.Config)
		cfg.Protocols.GRPC.GetOrInsertDefault().NetAddr.Endpoint = addr
		cfg.Protocols.HTTP = configoptional.None[otlpreceiver.HTTPConfig]()
		set := receivertest.NewNopSettings(f.Type())
		ctx := context.Background()
		tr, err := f.CreateTraces(ctx, set, cfg, traces)
		if err != nil {
			return "", nil, nil, err
		}
		mr, err := f.CreateMetrics(ctx, set, cfg, metrics)
		if err != nil {
			return "", nil, nil, err
		}
		host := componenttest.NewNopHost()
		if err = tr.Start(ctx, host); err != nil {
			continue // the port was taken meanwhile
		}
		if err = mr.Start(ctx, host); err != nil {
			return "", nil, nil, errors.Join(err, tr.Shutdown(ctx))
		}
		return addr, spans, func() error {
			return errors.Join(mr.Shutdown(ctx), tr.Shutdown(ctx))
		}, nil
	}
	return "", nil, nil, fmt.Errorf("no free port to listen on: %w", err)
}

func freePort() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

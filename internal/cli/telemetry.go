package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/server"
	"github.com/toolhost/toolhost/telemetry"
)

// startTelemetry starts what the OTEL_* variables and TOOLHOST_AUDIT ask for, with
// a Prometheus registry when prometheus is set, reporting what it cannot export to
// logger. stop flushes it within what is left of the command's shutdown
// (closeContext); call it after the Locations have closed.
func (a *app) startTelemetry(ctx context.Context, prometheus bool, logger hclog.Logger) (tel *telemetry.Telemetry, stop func() error, err error) {
	dir, err := telemetry.AuditDir(os.Getenv)
	if err != nil {
		return nil, nil, err
	}
	tel, err = telemetry.Start(ctx, telemetry.Options{Prometheus: prometheus, AuditDir: dir, Logger: logger})
	if err != nil {
		return nil, nil, err
	}
	return tel, func() error {
		closeCtx, cancel := a.closeContext(ctx)
		defer cancel()
		return tel.Shutdown(closeCtx)
	}, nil
}

// joined returns the errors err joins (errors.Join), or err alone: what telemetry
// could not flush is one error per signal, each printed on a line of its own.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// openObservedRegistry is openRegistry with tel observing its settlements and
// storage.
func openObservedRegistry(tel *telemetry.Telemetry) (*registry.Registry, error) {
	reg, err := openRegistry(tel.Observer())
	if err == nil {
		tel.SetStorage(reg.Storage())
	}
	return reg, err
}

// serveMetrics serves tel's metrics as Prometheus text at /metrics on the loopback
// address addr. It returns the address it listens on and its shutdown.
func serveMetrics(addr string, tel *telemetry.Telemetry, logger hclog.Logger) (net.Addr, func(), error) {
	lis, err := server.ListenTCP(addr, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.Handler())
	// A scraper that stops reading, or holds a connection open, is let go: the
	// endpoint serves one small page.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("the metrics endpoint stopped", "error", err)
		}
	}()
	return lis.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = hs.Shutdown(ctx)
		<-done
	}, nil
}

// watchWith has tel watch every Location activated (see telemetry.Watch) besides
// what hook does.
func watchWith(tel *telemetry.Telemetry, hook func(*location.Location) func()) func(*location.Location) func() {
	if tel.Observer() == nil {
		return hook
	}
	return func(loc *location.Location) func() {
		stopWatch := tel.Watch(loc)
		var stopHook func()
		if hook != nil {
			stopHook = hook(loc)
		}
		return func() {
			if stopHook != nil {
				stopHook()
			}
			stopWatch()
		}
	}
}

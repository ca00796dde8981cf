package telemetry

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestBatcherExportsEverySpanInBatches ends more spans than one batch holds and
// shows that they reach the exporter in batches of OTEL_BSP_MAX_EXPORT_BATCH_SIZE
// when a batch fills, that ForceFlush exports the rest, and that spans ended
// beyond OTEL_BSP_MAX_QUEUE_SIZE are dropped and reported at Shutdown.
func TestBatcherExportsEverySpanInBatches(t *testing.T) {
	exp := &recordingExporter{}
	env := map[string]string{
		"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10",
		"OTEL_BSP_MAX_QUEUE_SIZE":        "25",
		"OTEL_BSP_SCHEDULE_DELAY":        "3600000", // only full batches and flushes export
	}
	b := newBatcher(exp, nil, "", func(k string) string { return env[k] })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	tr := tp.Tracer("test")
	for i := range 23 {
		_, s := tr.Start(context.Background(), strconv.Itoa(i))
		s.End()
	}
	if err := b.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := exp.count(); got != 23 {
		t.Fatalf("%d spans exported after ForceFlush, want 23", got)
	}
	for _, n := range exp.batchSizes() {
		if n > 10 {
			t.Errorf("a batch of %d spans, want at most 10", n)
		}
	}

	// With the exporter blocked, the queue fills at 25 and the rest is dropped.
	exp.block()
	for i := range 40 {
		_, s := tr.Start(context.Background(), "more"+strconv.Itoa(i))
		s.End()
	}
	var handled []error
	var mu sync.Mutex
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { mu.Lock(); handled = append(handled, err); mu.Unlock() }))
	t.Cleanup(func() { otel.SetErrorHandler(reports) }) // as the package left it
	exp.unblock()
	shutErr := tp.Shutdown(context.Background())
	got := exp.count() - 23
	if got < 25 || got > 35 { // 25 queued, plus up to one batch taken before the queue filled
		t.Errorf("%d of 40 spans exported with a queue of 25", got)
	}
	// The dropped spans are said once, with their number: by the error handler if
	// the blocked export returned before Shutdown began, else by Shutdown.
	mu.Lock()
	said := append([]error(nil), handled...)
	mu.Unlock()
	if shutErr != nil {
		said = append(said, shutErr)
	}
	var ee *ExportError
	if len(said) != 1 || !errors.As(said[0], &ee) {
		t.Fatalf("said at and before shutdown: %v, want one *ExportError saying spans were dropped", said)
	}
	if ee.Spans+got != 40 {
		t.Errorf("%v: %d spans said dropped and %d exported, want 40 in all", ee, ee.Spans, got)
	}
	if !exp.shutdown {
		t.Error("the exporter was not shut down")
	}
}

type recordingExporter struct {
	mu       sync.Mutex
	batches  []int
	gate     chan struct{} // nil: not blocked
	shutdown bool
	mem      tracetest.InMemoryExporter
}

func (e *recordingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	gate := e.gate
	e.mu.Unlock()
	if gate != nil {
		<-gate
	}
	e.mu.Lock()
	e.batches = append(e.batches, len(spans))
	e.mu.Unlock()
	return e.mem.ExportSpans(ctx, spans)
}

func (e *recordingExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.shutdown = true
	e.mu.Unlock()
	return nil
}

func (e *recordingExporter) count() int { return len(e.mem.GetSpans()) }

func (e *recordingExporter) batchSizes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int(nil), e.batches...)
}

func (e *recordingExporter) block() {
	e.mu.Lock()
	e.gate = make(chan struct{})
	e.mu.Unlock()
}

func (e *recordingExporter) unblock() {
	e.mu.Lock()
	close(e.gate)
	e.gate = nil
	e.mu.Unlock()
}

// TestBatcherWaitsToFillABatch shows that a full batch is exported at once and the
// spans queued beyond it wait for the next full batch or the scheduled delay: a
// batch filling does not send the few spans after it in an export of their own.
func TestBatcherWaitsToFillABatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := &recordingExporter{}
		env := map[string]string{
			"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10",
			"OTEL_BSP_SCHEDULE_DELAY":        "60000",
		}
		b := newBatcher(exp, nil, "", func(k string) string { return env[k] })
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
		defer tp.Shutdown(context.Background())
		tr := tp.Tracer("test")
		for i := range 25 {
			_, s := tr.Start(context.Background(), strconv.Itoa(i))
			s.End()
		}
		synctest.Wait()
		if got := exp.batchSizes(); !slices.Equal(got, []int{10, 10}) {
			t.Fatalf("batches exported once 25 spans ended: %v, want [10 10]", got)
		}
		time.Sleep(time.Minute) // the scheduled delay
		synctest.Wait()
		if got := exp.batchSizes(); !slices.Equal(got, []int{10, 10, 5}) {
			t.Fatalf("batches exported after the scheduled delay: %v, want [10 10 5]", got)
		}
	})
}

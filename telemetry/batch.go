package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// batcher is the span processor of toolhost's traces: it batches ended spans and
// exports them from one goroutine, like the SDK's batch span processor and under
// the same OTEL_BSP_* variables, but an ended span is appended to the queue under
// a mutex rather than sent on a channel, so the exporting goroutine is woken once
// per full batch (or scheduled delay), not once per span: a settlement ends seven
// spans in a few microseconds, and waking a goroutine for each cost the call more
// than the spans themselves.
//
// A span ended while the queue holds OTEL_BSP_MAX_QUEUE_SIZE spans is dropped;
// Shutdown reports how many were to the OpenTelemetry error handler.
type batcher struct {
	exp      sdktrace.SpanExporter
	up       *otlpUpload   // exports in exp's stead when traces go over OTLP
	endpoint string        // up's, for its errors (ExportError)
	delay    time.Duration // OTEL_BSP_SCHEDULE_DELAY
	timeout  time.Duration // OTEL_BSP_EXPORT_TIMEOUT
	maxQueue int           // OTEL_BSP_MAX_QUEUE_SIZE
	maxBatch int           // OTEL_BSP_MAX_EXPORT_BATCH_SIZE

	batch []sdktrace.ReadOnlySpan // the batch being exported; only run uses it

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan // its array is kept, never replaced (see export)
	dropped int
	stopped bool
	last    context.Context // Shutdown's, which bounds the last export
	said    int             // of dropped, how many were reported
	lost    int             // spans the exports since Shutdown lost, for Shutdown
	lostErr error           // why

	full       chan struct{}      // a batch is ready; capacity 1
	flushes    chan chan error    // ForceFlush's requests
	quit       chan struct{}      // closed by Shutdown
	exports    context.Context    // every export's parent, ended by endExports
	endExports context.CancelFunc // when Shutdown's context ends
	done       chan struct{}      // closed when run returns
	stop       sync.Once
	shut       sync.Once
	shutErr    error
}

var _ sdktrace.SpanProcessor = (*batcher)(nil)

// newBatcher starts a batcher exporting to exp, configured by the OTEL_BSP_*
// variables getenv reads (the SDK's defaults where unset or invalid). When exp is
// an OTLP exporter, client is its started client, sending to endpoint: the batcher
// then converts and uploads batches through it itself (otlpUpload), and exp only
// stops it at Shutdown.
func newBatcher(exp sdktrace.SpanExporter, client otlptrace.Client, endpoint string, getenv func(string) string) *batcher {
	b := &batcher{
		exp:      exp,
		endpoint: endpoint,
		delay:    envMillis(getenv, "OTEL_BSP_SCHEDULE_DELAY", sdktrace.DefaultScheduleDelay),
		timeout:  envMillis(getenv, "OTEL_BSP_EXPORT_TIMEOUT", sdktrace.DefaultExportTimeout),
		maxQueue: envInt(getenv, "OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.DefaultMaxQueueSize),
		maxBatch: envInt(getenv, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.DefaultMaxExportBatchSize),
		full:     make(chan struct{}, 1),
		flushes:  make(chan chan error),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	b.maxBatch = min(b.maxBatch, b.maxQueue) // as the SDK does
	b.exports, b.endExports = context.WithCancel(context.Background())
	if client != nil {
		b.up = &otlpUpload{client: client}
	}
	go b.run()
	return b
}

func envInt(getenv func(string) string, name string, def int) int {
	if n, err := strconv.Atoi(getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func envMillis(getenv func(string) string, name string, def int) time.Duration {
	return time.Duration(envInt(getenv, name, def)) * time.Millisecond
}

func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s for export, waking the exporting goroutine when a batch is full.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	ready := b.add(s)
	b.mu.Unlock()
	if ready {
		b.wake()
	}
}

// onEndSteps queues the ended spans of a sampled settlement (its own and its
// steps'), as OnEnd queues an SDK span.
func (b *batcher) onEndSteps(steps []stepSpan) {
	ready := false
	b.mu.Lock()
	for i := range steps {
		ready = b.add(&steps[i]) || ready
	}
	b.mu.Unlock()
	if ready {
		b.wake()
	}
}

// add queues s, or drops it when the queue is full or the batcher stopped, and
// reports whether a batch is then ready. It is called with b.mu held.
func (b *batcher) add(s sdktrace.ReadOnlySpan) (ready bool) {
	if b.stopped {
		return false
	}
	if len(b.queue) >= b.maxQueue {
		b.dropped++
		return false
	}
	b.queue = append(b.queue, s)
	return len(b.queue) == b.maxBatch
}

func (b *batcher) wake() {
	select {
	case b.full <- struct{}{}:
	default:
	}
}

// run exports batches until Shutdown, then exports what is left. A full batch
// wakes it to export full batches only: the spans queued meanwhile wait for the
// next full batch or the scheduled delay, rather than go out in an export of
// their own, as they would if it exported everything each time (an export costs
// both processes a round trip, however few its spans).
func (b *batcher) run() {
	defer close(b.done)
	timer := time.NewTimer(b.delay)
	defer timer.Stop()
	for {
		var err error
		select {
		case <-b.full:
			err = b.export(b.exports, false)
		case <-timer.C:
			err = b.export(b.exports, true)
			timer.Reset(b.delay)
		case reply := <-b.flushes:
			reply <- b.export(b.exports, true)
			continue
		case <-b.quit:
			b.mu.Lock()
			ctx := b.last
			b.mu.Unlock()
			err := b.export(ctx, true)
			b.keepLost(err)
			if err != nil { // the spans after the failed batch are not sent either
				b.mu.Lock()
				b.lost += len(b.queue)
				clear(b.queue)
				b.queue = b.queue[:0]
				b.mu.Unlock()
			}
			return
		}
		select {
		case <-b.quit: // an export Shutdown's context ended: Shutdown says what it lost
			b.keepLost(err)
		default:
			if err != nil {
				otel.Handle(err)
			}
			if err := b.drops(); err != nil {
				otel.Handle(err)
			}
		}
	}
}

// drops returns the spans dropped since the last call as an *ExportError, or nil.
func (b *batcher) drops() error {
	b.mu.Lock()
	n := b.dropped - b.said
	b.said = b.dropped
	b.mu.Unlock()
	if n == 0 {
		return nil
	}
	return &ExportError{Signal: "TRACES", Spans: n, Endpoint: b.endpoint, Err: queueFullError(b.maxQueue)}
}

// queueFullError is why spans were dropped: the batcher's queue held
// OTEL_BSP_MAX_QUEUE_SIZE spans when they ended.
type queueFullError int

func (e queueFullError) Error() string {
	return fmt.Sprintf("the span queue (OTEL_BSP_MAX_QUEUE_SIZE %d) was full: spans ended faster than they were taken", int(e))
}

// keepLost adds what the failed export err lost to what Shutdown returns.
func (b *batcher) keepLost(err error) {
	if err == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lostErr = err
	if ee := (*ExportError)(nil); errors.As(err, &ee) {
		b.lost += ee.Spans
		b.lostErr = ee.Err
	}
}

// export exports the queued spans in batches of at most maxBatch, each within
// OTEL_BSP_EXPORT_TIMEOUT and parent: all of them, or (all false) only full
// batches. An export that fails is an *ExportError; the spans of the batches after
// it stay queued.
func (b *batcher) export(parent context.Context, all bool) error {
	for {
		// The batch is copied out and the rest moved to the front, so that the
		// queue's array, and the batch's, serve every batch: one taken whole as a
		// slice would leave the queue to grow a new array, span by span, each time.
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		if !all && n < b.maxBatch {
			n = 0
		}
		b.batch = append(b.batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		batch := b.batch
		if n == 0 {
			return nil
		}
		ctx, cancel := context.WithTimeout(parent, b.timeout)
		var err error
		if b.up != nil {
			err = b.up.export(ctx, batch)
			if err != nil {
				err = &ExportError{Signal: "TRACES", Spans: len(batch), Endpoint: b.endpoint, Err: err}
			}
		} else {
			err = b.exp.ExportSpans(ctx, batch)
		}
		cancel()
		clear(batch) // the array lives on; the spans need not
		if err != nil {
			return err
		}
	}
}

// ForceFlush exports every span queued so far, or gives up when ctx ends.
func (b *batcher) ForceFlush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case b.flushes <- reply:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and then shuts the exporter down, within ctx:
// when ctx ends, so does the export under way, whatever its own timeout. Spans
// ended after it are not exported. It returns what the exports since it was
// called lost, and the spans dropped from a full queue not yet reported, each as an
// *ExportError (how many spans, where they were going and why). A call after one
// that returned nil returns nil.
func (b *batcher) Shutdown(ctx context.Context) error {
	b.stop.Do(func() {
		b.mu.Lock()
		b.stopped, b.last = true, ctx
		b.mu.Unlock()
		context.AfterFunc(ctx, b.endExports)
		close(b.quit)
	})
	select {
	case <-b.done:
	case <-ctx.Done():
		// The last export ends with ctx too: wait a moment for its own error.
		select {
		case <-b.done:
		case <-time.After(time.Second):
			return &ExportError{Signal: "TRACES", Endpoint: b.endpoint, Err: ctx.Err()}
		}
	}
	b.shut.Do(func() {
		b.endExports()
		b.mu.Lock()
		lost, lostErr := b.lost, b.lostErr
		b.mu.Unlock()
		b.shutErr = b.exp.Shutdown(ctx) // stops the OTLP client otlpUpload shares
		// What was lost and why, rather than the client's stop in the same ctx:
		// the spans the last exports did not deliver, and those dropped and not
		// yet reported.
		var errs []error
		if lostErr != nil {
			errs = append(errs, &ExportError{Signal: "TRACES", Spans: lost, Endpoint: b.endpoint, Err: lostErr})
		}
		if err := b.drops(); err != nil {
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			b.shutErr = errors.Join(errs...)
		}
	})
	return b.shutErr
}

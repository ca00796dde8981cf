package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/toolhost/toolhost/mcpserve"
)

// stallingWriter is a client's stdout that the client reads until it has the
// answer to its initialize, then stops reading: every later Write blocks until
// Close.
type stallingWriter struct {
	first   chan []byte   // the first write, handed to the test
	blocked chan struct{} // closed when a write first waits for the client
	closed  chan struct{}
	once    sync.Once
	mu      sync.Mutex
	n       int
	// atClose is called once, when Close is first called, with the stall at its
	// height (what the server holds then).
	atClose func()
}

func newStallingWriter() *stallingWriter {
	return &stallingWriter{first: make(chan []byte, 1), blocked: make(chan struct{}), closed: make(chan struct{})}
}

func (w *stallingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.n++
	n := w.n
	w.mu.Unlock()
	if n == 1 {
		w.first <- append([]byte(nil), p...)
		return len(p), nil
	}
	if n == 2 {
		close(w.blocked)
	}
	<-w.closed
	return 0, io.ErrClosedPipe
}

func (w *stallingWriter) Close() error {
	w.once.Do(func() {
		if w.atClose != nil {
			w.atClose()
		}
		close(w.closed)
	})
	return nil
}

// stalledSession serves a session on a stallingWriter: it returns the client's
// stdin, the writer, and ServeStdio's result once it returns. The session is
// initialized; nothing the server writes after that answer is read.
func stalledSession(t *testing.T, f *fixture, ctx context.Context) (stdin *io.PipeWriter, w *stallingWriter, served chan error) {
	t.Helper()
	c2sR, c2sW := io.Pipe()
	w = newStallingWriter()
	served = make(chan error, 1)
	go func() { served <- f.srv.ServeStdio(ctx, c2sR, w) }()
	t.Cleanup(func() {
		c2sW.Close()
		w.Close()
	})
	if _, err := io.WriteString(c2sW, initialize+"\n"); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(<-w.first, &m); err != nil || m["result"] == nil {
		t.Fatalf("initialize: %v %v", m, err)
	}
	if _, err := io.WriteString(c2sW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	return c2sW, w, served
}

// TestStdioClientThatStopsReadingIsBounded: a client that stops reading stdout
// and goes on sending requests has at most 2*MaxCallsPerSession+16 of them read
// and unanswered (then stdin is read no further), and once a write has waited
// StdioWriteTimeout the session ends with a *NotReadingError, its stdin closed.
// Before, every request was read, each holding a goroutine blocked writing its
// answer, and the session never ended.
func TestStdioClientThatStopsReadingIsBounded(t *testing.T) {
	const perSession = 4
	f := startWith(t, mcpserve.Options{MaxCallsPerSession: perSession, StdioWriteTimeout: time.Second}, "ws")
	base := runtime.NumGoroutine()
	stdin, w, served := stalledSession(t, f, context.Background())
	w.atClose = func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("at the stall: %d goroutines more than before the session, heap %d KiB", runtime.NumGoroutine()-base, ms.HeapAlloc>>10)
	}

	const requests = 2000
	sent := 0
	for i := range requests {
		// Calls of a tool that answers at once, and pings, which the go-sdk answers.
		line := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 100+i)
		if i%2 == 0 {
			line = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`, 100+i)
		}
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Fatalf("request %d: %v", i, err)
			}
			break
		}
		sent++
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("the client sent %d requests; %d goroutines more than before the session, heap %d KiB", sent, runtime.NumGoroutine()-base, ms.HeapAlloc>>10)
	// The writer holds one answer (its token given back), and the reader one line
	// past the bound.
	if limit := 2*perSession + 16 + 2; sent > limit {
		t.Errorf("the server read %d requests of a client that reads nothing, want at most %d", sent, limit)
	}
	var nr *mcpserve.NotReadingError
	if err := <-served; !errors.As(err, &nr) {
		t.Errorf("ServeStdio: %v, want a *NotReadingError", err)
	}
	served <- nil
}

// TestStdioEndsWhileStdoutIsBlocked: a session whose client stops reading stdout
// ends without waiting for the client to read: when ctx ends (toolhost mcp's
// SIGTERM), at once, with no error; when the client closes stdin, once a write
// has waited StdioWriteTimeout, with a *NotReadingError. Both waited for ever
// before.
func TestStdioEndsWhileStdoutIsBlocked(t *testing.T) {
	f := startWith(t, mcpserve.Options{StdioWriteTimeout: time.Second}, "ws")
	stall := func(stdin io.Writer, w *stallingWriter) {
		t.Helper()
		for i := range 3 { // answers that wait for the client
			if _, err := fmt.Fprintf(stdin, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", 10+i); err != nil {
				t.Fatal(err)
			}
		}
		<-w.blocked
	}

	t.Run("ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stdin, w, served := stalledSession(t, f, ctx)
		stall(stdin, w)
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeStdio: %v", err)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		stdin, w, served := stalledSession(t, f, context.Background())
		stall(stdin, w)
		stdin.Close()
		var nr *mcpserve.NotReadingError
		if err := <-served; !errors.As(err, &nr) {
			t.Errorf("ServeStdio: %v, want a *NotReadingError", err)
		}
	})
}

package cli_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/internal/cli"
)

// stalledStdout is a client's end of stdout that reads the first line written (the
// answer to initialize), then nothing: every later Write blocks until release.
type stalledStdout struct {
	mu      sync.Mutex
	writes  int
	first   chan struct{}
	blocked chan struct{} // closed when a write first waits for the client
	release chan struct{}
}

func (w *stalledStdout) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writes++
	n := w.writes
	w.mu.Unlock()
	if n == 1 {
		close(w.first)
		return len(p), nil
	}
	if n == 2 {
		close(w.blocked)
	}
	<-w.release
	return 0, io.ErrClosedPipe
}

// TestMCPStopsWhileStdoutIsBlocked: toolhost mcp interrupted (SIGTERM: its
// context ends) while its client reads nothing of stdout, with answers waiting
// to be written, returns: before, its session's close waited for those writes,
// which waited for the client, for ever.
func TestMCPStopsWhileStdoutIsBlocked(t *testing.T) {
	ws := workspace(t, `{}`)
	inR, inW := io.Pipe()
	out := &stalledStdout{first: make(chan struct{}), blocked: make(chan struct{}), release: make(chan struct{})}
	defer close(out.release)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, []string{"mcp", "--location", ws}, inR, out, io.Discard) }()
	defer inW.Close()
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n"+
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	<-out.first
	for i := range 3 { // answers that wait for the client
		if _, err := fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"ping"}`+"\n", 10+i); err != nil {
			t.Fatal(err)
		}
	}
	<-out.blocked
	cancel()
	if code := <-done; code != cli.ExitOK && code != cli.ExitInterrupted {
		t.Errorf("exit status %d, want %d or %d", code, cli.ExitOK, cli.ExitInterrupted)
	}
}

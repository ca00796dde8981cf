//go:build linux

package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/proctest"
)

// stallHarness is a conn whose server's stdout stays silent and whose stdin the
// test reads, or not.
type stallHarness struct {
	c      *conn
	sink   *os.File // the server's stdin, read end
	stdout *os.File // the server's stdout, write end
}

func newStallHarness(t *testing.T, grace time.Duration) *stallHarness {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sink, sinkW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := loglimit.New(hclog.NewNullLogger(), 0, 0)
	c := newConn("srv", 1<<20, logs, newGate("srv", 1<<30, func(string, json.RawMessage) {}, logs), sinkW, r)
	c.grace = grace
	t.Cleanup(func() {
		c.Close()
		w.Close()
		<-c.done
		sink.Close()
		r.Close()
		logs.Close()
	})
	return &stallHarness{c: c, sink: sink, stdout: w}
}

// call writes a tools/call request of id, larger than a pipe holds, under ctx.
func (h *stallHarness) call(ctx context.Context, id string, size int) <-chan error {
	done := make(chan error, 1)
	rid, _ := jsonrpc.MakeID(id)
	params := `{"name":"echo","arguments":{"text":"` + strings.Repeat("x", size) + `"}}`
	go func() {
		done <- h.c.Write(ctx, &jsonrpc.Request{ID: rid, Method: "tools/call", Params: []byte(params)})
	}()
	return done
}

// waitStarted waits until the pipe holds part of a message: a write has begun.
func (h *stallHarness) waitStarted(t *testing.T) {
	proctest.Until(t, func() bool {
		n, err := unix.IoctlGetInt(int(h.sink.Fd()), unix.TIOCINQ) // FIONREAD
		return err == nil && n > 0
	})
}

// TestWriteToAServerThatStoppedReadingEndsWithItsCall: a call's request to a
// server that does not read its stdin waits for the pipe only as long as the call:
// a second call waiting its turn returns when its context ends, and so does the
// call whose message was cut short; the host finishes that message without it,
// and when the server reads none of it within the grace, closes the connection
// with a *StdinStalledError, which Read returns. (Without the call's context, the
// writes hung.)
func TestWriteToAServerThatStoppedReadingEndsWithItsCall(t *testing.T) {
	h := newStallHarness(t, time.Millisecond)
	first, cancelFirst := context.WithCancel(t.Context())
	firstDone := h.call(first, "first", 256<<10)
	h.waitStarted(t)
	second, cancelSecond := context.WithCancel(t.Context())
	secondDone := h.call(second, "second", 16)
	cancelSecond()
	if err := <-secondDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the call waiting its turn: %v, want context.Canceled", err)
	}
	cancelFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the call whose message was cut short: %v, want context.Canceled", err)
	}
	var stalled *StdinStalledError
	if _, err := h.c.Read(t.Context()); !errors.As(err, &stalled) || stalled.Server != "srv" || stalled.Written == 0 || stalled.Written >= stalled.Size {
		t.Errorf("Read after a message was cut short: %v, want a *StdinStalledError with part of it written", err)
	}
}

// TestACallEndedPartWayLeavesAWholeMessage: a server that reads slowly keeps its
// connection when a call ends part way through its request: the host finishes the
// message, and the next one follows it whole.
func TestACallEndedPartWayLeavesAWholeMessage(t *testing.T) {
	h := newStallHarness(t, time.Minute)
	first, cancelFirst := context.WithCancel(t.Context())
	firstDone := h.call(first, "first", 256<<10)
	h.waitStarted(t)
	cancelFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call whose message was cut short: %v, want context.Canceled", err)
	}
	secondDone := h.call(t.Context(), "second", 16)
	in := bufio.NewReaderSize(h.sink, 1<<20)
	for _, id := range []string{"first", "second"} {
		line, err := in.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		msg, err := jsonrpc.DecodeMessage(line)
		if req, ok := msg.(*jsonrpc.Request); err != nil || !ok || req.ID.Raw() != id {
			t.Fatalf("the server read %.80q… (%v); want the whole request %q", line, err, id)
		}
	}
	if err := <-secondDone; err != nil {
		t.Errorf("the call after: %v", err)
	}
	select {
	case <-h.c.closed:
		t.Errorf("the connection was closed: %v", h.c.err)
	default:
	}
}

// TestClosingWaitsForTheCutMessage: the goroutine finishing a message cut short
// does not outlive the connection: done is closed only once it has returned.
// Here finish is held after its write (which closing the connection ended) until
// the goroutine that closes done is seen waiting for it, or done is closed.
func TestClosingWaitsForTheCutMessage(t *testing.T) {
	h := newStallHarness(t, time.Minute)
	proceed := make(chan struct{})
	h.c.finishWritten = func() { <-proceed }
	first, cancelFirst := context.WithCancel(t.Context())
	firstDone := h.call(first, "first", 256<<10)
	h.waitStarted(t)
	cancelFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the call whose message was cut short: %v, want context.Canceled", err)
	}
	h.stdout.Close() // the server's stdout ends, then the host closes
	h.c.Close()
	closed := func() bool {
		select {
		case <-h.c.done:
			return true
		default:
			return false
		}
	}
	proctest.Until(t, func() bool { return closed() || waitingFor(t, "mcp.newConn.func2", "chan send") })
	if closed() {
		t.Error("done was closed while finish still ran")
	}
	close(proceed)
	<-h.c.done
}

// waitingFor reports whether a goroutine running fn is in state.
func waitingFor(t *testing.T, fn, state string) bool {
	buf := make([]byte, 1<<20)
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, fn+"(") && strings.Contains(g, "["+state) {
			return true
		}
	}
	return false
}

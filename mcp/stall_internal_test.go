//go:build linux

package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/proctest"
)

// TestWriteToAServerThatStoppedReadingEndsWithItsCall: a call's request to a
// server that does not read its stdin waits for the pipe only as long as the call:
// a second call waiting its turn returns when its context ends, and the call whose
// message was cut short returns too, and closes the connection with a
// *StdinStalledError (what was written cannot be followed), which Read returns.
func TestWriteToAServerThatStoppedReadingEndsWithItsCall(t *testing.T) {
	r, w, err := os.Pipe() // the server's stdout, silent
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sink, sinkW, err := os.Pipe() // the server's stdin, which it never reads
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	logs := loglimit.New(hclog.NewNullLogger(), 0, 0)
	defer logs.Close()
	g := newGate("srv", 1<<30, func(string, json.RawMessage) {}, logs)
	c := newConn("srv", 1<<20, logs, g, sinkW, r)
	defer func() {
		c.Close()
		w.Close()
		<-c.done
	}()

	call := func(ctx context.Context, id string) <-chan error {
		done := make(chan error, 1)
		rid, _ := jsonrpc.MakeID(id)
		params := `{"name":"echo","arguments":{"text":"` + strings.Repeat("x", 256<<10) + `"}}`
		go func() {
			done <- c.Write(ctx, &jsonrpc.Request{ID: rid, Method: "tools/call", Params: []byte(params)})
		}()
		return done
	}
	first, cancelFirst := context.WithCancel(t.Context())
	firstDone := call(first, "first")
	// The pipe holds part of the first message: its write has begun and waits.
	proctest.Until(t, func() bool {
		n, err := unix.IoctlGetInt(int(sink.Fd()), unix.TIOCINQ) // FIONREAD
		return err == nil && n > 0
	})
	second, cancelSecond := context.WithCancel(t.Context())
	secondDone := call(second, "second")
	cancelSecond()
	if err := <-secondDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the call waiting its turn: %v, want context.Canceled", err)
	}
	cancelFirst()
	if err := <-firstDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the call whose message was cut short: %v, want context.Canceled", err)
	}
	var stalled *StdinStalledError
	if _, err := c.Read(t.Context()); !errors.As(err, &stalled) || stalled.Server != "srv" || stalled.Written == 0 || stalled.Written >= stalled.Size {
		t.Errorf("Read after a message was cut short: %v, want a *StdinStalledError with part of it written", err)
	}
}

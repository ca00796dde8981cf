package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/testio"
)

// An ask past max_pending_asks, or past the token bucket, is refused with an
// error naming the limit; a run of refusals is logged in two lines, however long.
func TestAsksRefuseAndLogOncePerRun(t *testing.T) {
	out := &testio.SyncBuffer{}
	logs := loglimit.New(hclog.New(&hclog.LoggerOptions{Output: out, JSONFormat: true}), 0, 0)
	defer logs.Close()
	a := newAsks("srv", AskLimits{MaxPending: 2, Burst: 3, PerMinute: 6}, logs)
	now := time.Unix(1e9, 0)
	a.now = func() time.Time { return now }
	refusal := func(err error) (limit string, retry int64) {
		t.Helper()
		var e *jsonrpc.Error
		if !errors.As(err, &e) || e.Code != codeAskRefused {
			t.Fatalf("refusal %v: want a *jsonrpc.Error with code %d", err, codeAskRefused)
		}
		var data struct {
			Limit        string
			RetryAfterMs int64
		}
		if err := json.Unmarshal(e.Data, &data); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(e.Message, data.Limit) {
			t.Errorf("refusal %q does not name its limit %s", e.Message, data.Limit)
		}
		return data.Limit, data.RetryAfterMs
	}

	end1, err1 := a.begin("elicitation/create")
	end2, err2 := a.begin("sampling/createMessage")
	if err1 != nil || err2 != nil {
		t.Fatalf("the first two asks: %v, %v", err1, err2)
	}
	for range 1000 {
		_, err := a.begin("elicitation/create")
		if limit, _ := refusal(err); limit != "max_pending_asks" {
			t.Fatalf("a third ask while two are pending: refused by %s", limit)
		}
	}
	end1()
	end1() // idempotent
	end3, err := a.begin("elicitation/create")
	if err != nil {
		t.Fatalf("an ask once one was answered: %v", err)
	}
	end2()
	end3()
	// The bucket's 3 tokens are spent; one comes every 10s.
	_, err = a.begin("elicitation/create")
	if limit, retry := refusal(err); limit != "asks_per_minute" || retry != 10000 {
		t.Errorf("an ask past the burst: refused by %s, retry after %dms; want asks_per_minute, 10000", limit, retry)
	}
	now = now.Add(10 * time.Second)
	end, err := a.begin("elicitation/create")
	if err != nil {
		t.Fatalf("an ask once a token came back: %v", err)
	}
	end()
	a.close()

	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e struct {
			Message string `json:"@message"`
			Pending int    `json:"past_max_pending_asks"`
			Rate    int    `json:"past_asks_per_minute"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		lines = append(lines, fmt.Sprintf("%.20s %d %d", e.Message, e.Pending, e.Rate))
	}
	want := []string{"refusing the server' 0 0", "refused asks of the  1000 0", "refusing the server' 0 0", "refused asks of the  0 1"}
	if strings.Join(lines, "|") != strings.Join(want, "|") {
		t.Errorf("log lines %q, want %q", lines, want)
	}
}

// The reader hands the session the responses to the host's calls whatever the
// server reads: the answers to the requests the gate refuses wait in a queue;
// once the queue is full and none is written for the grace, the connection is
// closed with a *NotReadingError, which Read returns.
func TestConnReaderDoesNotWaitForTheServerToRead(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	sink, sinkW, err := os.Pipe() // the server's stdin, which it never reads
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	logs := loglimit.New(hclog.NewNullLogger(), 0, 0)
	defer logs.Close()
	g := newGate("srv", 1<<30, func(string, json.RawMessage) {}, logs)
	call, _ := jsonrpc.MakeID("call")
	g.sent(t.Context(), &jsonrpc.Request{ID: call, Method: "tools/call"})
	c := newConn("srv", 1<<20, logs, g, sinkW, r)
	c.grace = time.Millisecond // only the end of the test waits for it
	defer func() {
		c.Close()
		<-c.done
	}()

	// maxServing requests handed to the session and never answered, then
	// requests refused, whose answers (repeating 4 KiB ids) fill the pipe and
	// the queue, then the response to the host's call.
	pad := strings.Repeat("i", 4<<10)
	go func() {
		for i := range maxServing + 64 {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":"%d-%s","method":"ping"}`+"\n", i, pad)
		}
		io.WriteString(w, `{"jsonrpc":"2.0","id":"call","result":{}}`+"\n")
	}()
	ctx := context.Background()
	for i := range maxServing {
		if msg, err := c.Read(ctx); err != nil || msg.(*jsonrpc.Request).Method != "ping" {
			t.Fatalf("message %d: %v, %v; want a ping", i, msg, err)
		}
	}
	msg, err := c.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); err != nil || !ok || resp.ID != call {
		t.Fatalf("after the refused requests: %v, %v; want the response to the host's call", msg, err)
	}
	// More refused requests than the pipe and the queue hold: the connection is
	// closed, saying why.
	go func() {
		for i := range 200 {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":"more-%d-%s","method":"ping"}`+"\n", i, pad)
		}
		w.Close()
	}()
	var notReading *NotReadingError
	if _, err := c.Read(ctx); !errors.As(err, &notReading) || notReading.Server != "srv" || notReading.Queued != maxQueuedReplies {
		t.Errorf("a server reading none of its answers: Read = %v; want a *NotReadingError", err)
	}
}

//go:build unix

package server_test

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/server"
)

// TestClientThatNeverReadsIsBounded opens 1,000 SettleStreams of calls that report
// progress and reads none of them. What the server holds for the client, counted in
// events waiting to be sent, stays within a bound per handle; once the handle's
// streams hold that many it is closed, and every stream ends with a status saying
// why.
func TestClientThatNeverReadsIsBounded(t *testing.T) {
	f := start(t, nil)
	rpc, open, loc, prep := f.narrowClient(t)
	ctx := t.Context()

	// Every fifth call floods its stream with more progress than the transport's
	// windows take (the host cuts a progress message to 4 KiB, so 56 of the
	// plugin's 32 KiB ones are 224 KiB, over a stream's 64 KiB window); the
	// others report once and wait.
	const streams = 1000
	opened := make([]grpc.ServerStreamingClient[servepb.SettleEvent], 0, streams)
	for i := range streams {
		name, input := "block", "{}"
		if i%5 == 0 {
			name, input = "flood", `{"n": 56}`
		}
		st, err := rpc.SettleStream(ctx, &servepb.SettleRequest{ClientId: open.ClientId, RequestId: prep.RequestId, Name: name,
			InputJson: input, Invocation: &servepb.Invocation{SessionId: "s", ToolCallId: fmt.Sprint("c", i)}})
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, st)
	}
	// The server closes the handle without the client reading anything.
	proctest.Until(t, func() bool {
		_, err := rpc.PrepareRequest(ctx, &servepb.PrepareRequestRequest{ClientId: open.ClientId, LocationId: loc.Location.Id})
		return status.Code(err) == codes.NotFound
	})
	// Only now read each stream to its end.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	var message string
	for _, st := range opened {
		wg.Go(func() {
			for {
				if _, err := st.Recv(); err != nil {
					s := status.Convert(err)
					if err == io.EOF { // the call's final event came: it is never dropped
						s = status.New(codes.OK, "")
					}
					mu.Lock()
					codesSeen[s.Code()]++
					if s.Code() == codes.ResourceExhausted {
						message = s.Message()
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	held := server.MaxHeldProgress(f.srv)
	t.Logf("the streams ended with %v; the handle held at most %d progress events", codesSeen, held)
	if held > server.MaxHeldProgressPerHandle {
		t.Errorf("the handle held %d progress events for the client, over the bound of %d", held, server.MaxHeldProgressPerHandle)
	}
	if codesSeen[codes.ResourceExhausted] == 0 || !strings.Contains(message, "did not read") {
		t.Errorf("no stream ended saying the client did not read (codes %v, message %q)", codesSeen, message)
	}
}

// TestLaggingReaderGetsTheLatestProgressAndTheFinal: a stream read only after the
// tool reported more than the transport holds delivers the latest progress, with
// the count of the events skipped, and then the final event.
func TestLaggingReaderGetsTheLatestProgressAndTheFinal(t *testing.T) {
	f := start(t, nil)
	rpc, open, _, prep := f.narrowClient(t)
	ctx := t.Context()
	const n = 320 // 1.3 MiB of progress: the host cuts each message to 4 KiB
	st, err := rpc.SettleStream(ctx, &servepb.SettleRequest{ClientId: open.ClientId, RequestId: prep.RequestId, Name: "flood",
		InputJson: fmt.Sprintf(`{"n": %d}`, n), Invocation: &servepb.Invocation{SessionId: "s", ToolCallId: "c1"}})
	if err != nil {
		t.Fatal(err)
	}
	// The stream holds an event while its send waits for this reader.
	proctest.Until(t, func() bool { return server.MaxHeldProgress(f.srv) > 0 })
	var seen, skipped uint64
	var last float64
	for last < n {
		ev, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d progress events: %v", seen, err)
		}
		p := ev.GetProgress()
		if p == nil {
			t.Fatalf("event %v before the last progress", ev)
		}
		seen++
		skipped += p.Skipped
		last = p.Progress
	}
	if seen+skipped != n || skipped == 0 {
		t.Errorf("%d progress events delivered and %d counted as skipped; want %d in all, some skipped", seen, skipped, n)
	}
	if _, err := rpc.CancelCall(ctx, &servepb.CancelCallRequest{ClientId: open.ClientId, RequestId: prep.RequestId, ToolCallId: "c1"}); err != nil {
		t.Fatal(err)
	}
	ev, err := st.Recv()
	if err != nil || ev.GetError().GetKind() != servepb.CallError_INTERRUPTED {
		t.Fatalf("final event %v, %v; want the interruption", ev, err)
	}
}

// narrowClient dials f with the smallest flow control windows, fixed, so that what
// the client's transport takes in for a stream nobody reads is bounded by them and
// the server's sends block soon. It opens a client handle, activates a workspace
// and prepares a Request there.
func (f *fixture) narrowClient(t *testing.T) (servepb.ToolhostClient, *servepb.OpenClientResponse, *servepb.ActivateLocationResponse, *servepb.PrepareRequestResponse) {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+f.socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	rpc := servepb.NewToolhostClient(cc)
	open, err := rpc.OpenClient(t.Context(), &servepb.OpenClientRequest{})
	if err != nil {
		t.Fatal(err)
	}
	loc, err := rpc.ActivateLocation(t.Context(), &servepb.ActivateLocationRequest{Directory: workspace(t)})
	if err != nil {
		t.Fatal(err)
	}
	prep, err := rpc.PrepareRequest(t.Context(), &servepb.PrepareRequestRequest{ClientId: open.ClientId, LocationId: loc.Location.Id})
	if err != nil {
		t.Fatal(err)
	}
	return rpc, open, loc, prep
}

//go:build unix

package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/sdk"
)

// rawConn is one gRPC connection to the fixture's server, closed by the test's
// cleanup.
func (f *fixture) rawConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("unix://"+f.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestClientsSharingAConnectionAreIsolated: two Clients on one HTTP/2 connection (as
// two grpc-js clients of one address are by default) cannot see or touch each
// other's Requests, calls or asks; closing one leaves the other working.
func TestClientsSharingAConnectionAreIsolated(t *testing.T) {
	f := start(t, nil)
	cc := f.rawConn(t)
	a, b := client.New(cc), client.New(cc)
	defer b.Close()
	loc, req := f.activate(t, a)
	if _, err := b.ListLocations(t.Context()); err != nil { // b is live on the same connection
		t.Fatal(err)
	}
	errc := blockUntilRunning(t, t.Context(), a, req.ID, "c1")

	if _, err := b.Settle(t.Context(), req.ID, client.Call{Name: "echo", Input: json.RawMessage(`{"text":"x"}`), Invocation: inv(t, "b1")}, nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other client's Settle: %v, want ErrNotFound", err)
	}
	if _, err := b.Settle(t.Context(), req.ID, client.Call{Name: "progress", Input: json.RawMessage(`{"n":1}`), Invocation: inv(t, "b2")}, func(sdk.Progress) {}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other client's SettleStream: %v, want ErrNotFound", err)
	}
	if err := b.CancelCall(t.Context(), req.ID, "c1"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other client's CancelCall: %v, want ErrNotFound", err)
	}
	if err := b.ReleaseRequest(t.Context(), req.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other client's ReleaseRequest: %v, want ErrNotFound", err)
	}

	// Asks: b watches every Location but never sees a's ask, nor may answer it.
	watchA, err := a.WatchAsks(t.Context(), loc.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer watchA.Close()
	watchB, err := b.WatchAsks(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	bSaw := make(chan client.AskEvent, 16)
	go func() {
		defer close(bSaw)
		for {
			ev, err := watchB.Next()
			if err != nil {
				return
			}
			bSaw <- ev
		}
	}()
	res := make(chan error, 1)
	go func() {
		s, err := a.Settle(t.Context(), req.ID, client.Call{Name: "guarded", Invocation: inv(t, "g1")}, nil)
		if err == nil && s.Text() != "granted" {
			err = errors.New("settled " + s.Text())
		}
		res <- err
	}()
	var ask *client.Ask
	for ask == nil {
		ev, err := watchA.Next()
		if err != nil {
			t.Fatal(err)
		}
		ask = ev.Asked
	}
	if err := b.AnswerAsk(t.Context(), ask.ID, permission.Answer{Reply: permission.Once}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other client answered: %v, want ErrNotFound", err)
	}
	if err := a.AnswerAsk(t.Context(), ask.ID, permission.Answer{Reply: permission.Once}); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	watchB.Close()
	for ev := range bSaw {
		if ev.Asked != nil {
			t.Errorf("client b saw client a's ask %+v", ev.Asked)
		}
	}

	// Closing a interrupts its call and ends its handle; b, on the same connection,
	// carries on.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "CloseClient") {
		t.Fatalf("a's call after a.Close: %v, want an interruption by CloseClient", err)
	}
	for { // the ask's resolution may still be queued; then the watch ends
		ev, err := watchA.Next()
		if err != nil {
			break
		}
		if ev.Asked != nil {
			t.Fatalf("a's watch got an ask after its handle closed: %+v", ev.Asked)
		}
	}
	breq, err := b.PrepareRequest(t.Context(), loc.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := b.Settle(t.Context(), breq.ID, client.Call{Name: "echo", Input: json.RawMessage(`{"text":"still here"}`), Invocation: inv(t, "b3")}, nil); err != nil || s.Text() != "still here" {
		t.Fatalf("b after a closed: %+v, %v", s, err)
	}
	proctest.Until(t, func() bool { return inFlight(f) == 0 })
}

// TestHandles checks the handle rules at the wire: a handle is required, and is
// unknown on any connection but its own.
func TestHandles(t *testing.T) {
	f := start(t, nil)
	one, two := servepb.NewToolhostClient(f.rawConn(t)), servepb.NewToolhostClient(f.rawConn(t))
	loc, _ := f.activate(t, f.dial(t))
	opened, err := one.OpenClient(t.Context(), &servepb.OpenClientRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := opened.ClientId
	prep, err := one.PrepareRequest(t.Context(), &servepb.PrepareRequestRequest{ClientId: id, LocationId: loc.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		call func() error
		want codes.Code
	}{
		{"MissingHandle", func() error {
			_, err := one.PrepareRequest(t.Context(), &servepb.PrepareRequestRequest{LocationId: loc.ID})
			return err
		}, codes.InvalidArgument},
		{"UnknownHandle", func() error {
			_, err := one.PrepareRequest(t.Context(), &servepb.PrepareRequestRequest{ClientId: "cl_forged", LocationId: loc.ID})
			return err
		}, codes.NotFound},
		{"HandleOfAnotherConnection", func() error {
			_, err := two.Settle(t.Context(), &servepb.SettleRequest{ClientId: id, RequestId: prep.RequestId, Name: "echo",
				InputJson: `{"text":"x"}`, Invocation: &servepb.Invocation{ToolCallId: "c1"}})
			return err
		}, codes.NotFound},
		{"CloseOfAnotherConnection", func() error {
			_, err := two.CloseClient(t.Context(), &servepb.CloseClientRequest{ClientId: id})
			return err
		}, codes.NotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := status.Code(tt.call()); got != tt.want {
				t.Errorf("code %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := one.CloseClient(t.Context(), &servepb.CloseClientRequest{ClientId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := one.CloseClient(t.Context(), &servepb.CloseClientRequest{ClientId: id}); status.Code(err) != codes.NotFound {
		t.Errorf("closed twice: %v, want NotFound", err)
	}
	if _, err := one.ReleaseRequest(t.Context(), &servepb.ReleaseRequestRequest{ClientId: id, RequestId: prep.RequestId}); status.Code(err) != codes.NotFound {
		t.Errorf("a closed handle's Request: %v, want NotFound", err)
	}
}

// TestTypedSettlement reads settlements as a runner in another language does: the
// outcome is an enum, structured output JSON text, problems and content typed.
func TestTypedSettlement(t *testing.T) {
	f := start(t, nil)
	rpc := servepb.NewToolhostClient(f.rawConn(t))
	loc, _ := f.activate(t, f.dial(t))
	opened, err := rpc.OpenClient(t.Context(), &servepb.OpenClientRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := opened.ClientId
	prep, err := rpc.PrepareRequest(t.Context(), &servepb.PrepareRequestRequest{ClientId: id, LocationId: loc.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range prep.Definitions {
		if !json.Valid([]byte(d.InputSchemaJson)) {
			t.Errorf("%s: input schema %q is not JSON", d.Name, d.InputSchemaJson)
		}
	}
	settle := func(name, input, callID string) *servepb.SettleResponse {
		t.Helper()
		resp, err := rpc.Settle(t.Context(), &servepb.SettleRequest{ClientId: id, RequestId: prep.RequestId, Name: name, InputJson: input,
			Invocation: &servepb.Invocation{SessionId: "s", ToolCallId: callID}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if s := settle("echo", `{"text":"hi"}`, "c1").GetSettlement(); s.GetOutcome() != servepb.Outcome_OUTCOME_COMPLETED ||
		len(s.Content) != 1 || s.Content[0].GetText() != "hi" || s.ToolCallId != "c1" || s.Name != "echo" {
		t.Errorf("echo: %v", s)
	}
	if s := settle("whoami", "", "c2").GetSettlement(); s.GetOutcome() != servepb.Outcome_OUTCOME_COMPLETED || !json.Valid([]byte(s.StructuredJson)) {
		t.Errorf("whoami: %v", s)
	}
	if s := settle("echo", `{"txt":1}`, "c3").GetSettlement(); s.GetOutcome() != servepb.Outcome_OUTCOME_INVALID_INPUT || len(s.Problems) == 0 {
		t.Errorf("invalid input: %v", s)
	}
	if s := settle("nope", "", "c4").GetSettlement(); s.GetOutcome() != servepb.Outcome_OUTCOME_UNKNOWN {
		t.Errorf("unknown: %v", s)
	}
	resp := settle("guarded", "", "c5") // nobody watches: a deny without instructions
	if s := resp.GetSettlement(); s.GetOutcome() != servepb.Outcome_OUTCOME_TOOL_FAILURE || !strings.Contains(s.Content[0].GetText(), "permission denied") ||
		strings.Contains(s.Content[0].GetText(), "config") || !strings.Contains(resp.RunnerHint, "config.json") {
		t.Errorf("guarded, nobody watching: %v", resp)
	}

	t.Run("UnaryInterruption", func(t *testing.T) {
		done := make(chan *servepb.SettleResponse, 1)
		go func() {
			resp, _ := rpc.Settle(t.Context(), &servepb.SettleRequest{ClientId: id, RequestId: prep.RequestId, Name: "block",
				Invocation: &servepb.Invocation{ToolCallId: "b1"}})
			done <- resp
		}()
		proctest.Until(t, func() bool {
			_, err := rpc.CancelCall(t.Context(), &servepb.CancelCallRequest{ClientId: id, RequestId: prep.RequestId, ToolCallId: "b1"})
			return err == nil
		})
		if e := (<-done).GetError(); e.GetKind() != servepb.CallError_INTERRUPTED {
			t.Errorf("cancelled unary call: %v, want an INTERRUPTED error", e)
		}
	})
	t.Run("Stream", func(t *testing.T) {
		stream, err := rpc.SettleStream(t.Context(), &servepb.SettleRequest{ClientId: id, RequestId: prep.RequestId, Name: "progress",
			InputJson: `{"n":2}`, Invocation: &servepb.Invocation{ToolCallId: "p1"}})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for {
			ev, err := stream.Recv()
			if err != nil {
				break
			}
			switch {
			case ev.GetProgress() != nil:
				kinds = append(kinds, "progress")
			case ev.GetSettlement() != nil:
				kinds = append(kinds, ev.GetSettlement().GetOutcome().String())
			}
		}
		if strings.Join(kinds, ",") != "progress,progress,OUTCOME_COMPLETED" {
			t.Errorf("events %q", kinds)
		}
	})
}

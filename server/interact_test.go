//go:build unix

package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

func TestInteractions(t *testing.T) {
	f := start(t, nil)
	a, b := f.dial(t), f.dial(t)
	loc, req := f.activate(t, a)

	settle := func(name, input, id string) <-chan result {
		out := make(chan result, 1)
		go func() {
			s, err := a.Settle(t.Context(), req.ID, client.Call{Name: name, Input: json.RawMessage(input), Invocation: inv(t, id)}, nil)
			out <- result{s, err}
		}()
		return out
	}
	unanswered := func(t *testing.T) {
		t.Helper()
		for tool, input := range map[string]string{"question": "", "sample": `{"text": "hi"}`} {
			got := <-settle(tool, input, "u-"+tool)
			if got.err != nil || !strings.HasPrefix(got.s.Text(), "unanswered: ") || !strings.Contains(got.s.Text(), "WatchInteractions") {
				t.Errorf("%s with nobody watching: %+v, %v; want the tool to get an UnansweredError", tool, got.s, got.err)
			}
		}
	}
	t.Run("NobodyWatchingIsUnanswered", unanswered)

	watchB, err := b.WatchInteractions(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer watchB.Close()
	bEvents := make(chan client.InteractionEvent, 16)
	go func() {
		defer close(bEvents)
		for {
			ev, err := watchB.Next()
			if err != nil {
				return
			}
			bEvents <- ev
		}
	}()
	t.Run("AnotherHandleWatchingIsNobody", unanswered)

	watchA, err := a.WatchInteractions(t.Context(), loc.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer watchA.Close()
	next := func(t *testing.T) client.InteractionEvent {
		t.Helper()
		for {
			ev, err := watchA.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Resolved == "" {
				return ev
			}
		}
	}
	nextQuestion := func(t *testing.T) *client.Question {
		t.Helper()
		ev := next(t)
		if ev.Question == nil {
			t.Fatalf("event %+v; want a question", ev)
		}
		return ev.Question
	}
	nextSample := func(t *testing.T) *client.Sampling {
		t.Helper()
		ev := next(t)
		if ev.Sample == nil {
			t.Fatalf("event %+v; want a sampling request", ev)
		}
		return ev.Sample
	}

	t.Run("AcceptValidatedAgainstTheSchema", func(t *testing.T) {
		res := settle("question", "", "q1")
		q := nextQuestion(t)
		want := client.InteractionCall{LocationID: loc.ID, RequestID: req.ID, SessionID: "s-TestInteractions", ToolCallID: "q1", Tool: "question"}
		if q.Call != want || q.Question.Message != "What is your name?" || !strings.Contains(string(q.Question.Schema), `"minLength": 1`) {
			t.Fatalf("question %+v", q)
		}
		if err := b.AnswerQuestion(t.Context(), q.ID, sdk.Answer{Action: sdk.Accepted, Content: json.RawMessage(`{"name": "Eve"}`)}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another client answered: %v, want ErrNotFound", err)
		}
		if err := a.AnswerQuestion(t.Context(), q.ID, sdk.Answer{Action: sdk.Accepted, Content: json.RawMessage(`{"name": ""}`)}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("an answer against the schema: %v, want ErrInvalidArgument", err)
		}
		if err := a.AnswerQuestion(t.Context(), q.ID, sdk.Answer{Action: sdk.Accepted, Content: json.RawMessage(`{"name": "Ada"}`)}); err != nil {
			t.Fatal(err)
		}
		if got := <-res; got.err != nil || got.s.Text() != `accept {"name": "Ada"}` {
			t.Fatalf("after accept: %+v, %v", got.s, got.err)
		}
		if err := a.AnswerQuestion(t.Context(), q.ID, sdk.Answer{Action: sdk.Declined}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("answered twice: %v, want ErrNotFound", err)
		}
	})
	t.Run("Decline", func(t *testing.T) {
		res := settle("question", "", "q2")
		q := nextQuestion(t)
		if err := a.AnswerQuestion(t.Context(), q.ID, sdk.Answer{Action: sdk.Declined}); err != nil {
			t.Fatal(err)
		}
		if got := <-res; got.err != nil || got.s.Text() != "decline " {
			t.Fatalf("after decline: %+v, %v", got.s, got.err)
		}
	})
	t.Run("Sample", func(t *testing.T) {
		res := settle("sample", `{"text": "Say hi"}`, "s1")
		s := nextSample(t)
		r := s.Request
		if s.Call.ToolCallID != "s1" || s.Call.Tool != "sample" || len(r.Messages) != 1 || r.Messages[0].Role != "user" ||
			r.Messages[0].Content.Text != "Say hi" || r.SystemPrompt != "Be brief." || r.MaxTokens != 50 ||
			r.Temperature == nil || *r.Temperature != 0.5 || !slices.Equal(r.ModelHints, []string{"small"}) {
			t.Fatalf("sampling request %+v", s)
		}
		if err := a.AnswerQuestion(t.Context(), s.ID, sdk.Answer{Action: sdk.Declined}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("answered a sampling request as a question: %v, want ErrNotFound", err)
		}
		if err := b.AnswerSample(t.Context(), s.ID, sdk.SampleResult{Message: sdk.SampleMessage{Content: sdk.Text("no")}}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another client answered: %v, want ErrNotFound", err)
		}
		if err := a.AnswerSample(t.Context(), s.ID, sdk.SampleResult{Message: sdk.SampleMessage{Role: "user", Content: sdk.Text("hi")}}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("a completion with the role user: %v, want ErrInvalidArgument", err)
		}
		if err := a.AnswerSample(t.Context(), s.ID, sdk.SampleResult{Message: sdk.SampleMessage{Content: sdk.Text("hi")}, Model: "m1", StopReason: "endTurn"}); err != nil {
			t.Fatal(err)
		}
		if got := <-res; got.err != nil || got.s.Text() != "m1 assistant: hi (endTurn)" {
			t.Fatalf("after the completion: %+v, %v", got.s, got.err)
		}
	})
	t.Run("SampleError", func(t *testing.T) {
		res := settle("sample", `{"text": "Say hi"}`, "s2")
		s := nextSample(t)
		if err := a.FailSample(t.Context(), s.ID, "rate limited"); err != nil {
			t.Fatal(err)
		}
		if got := <-res; got.err != nil || got.s.Outcome != registry.ToolFailed || !strings.Contains(got.s.Text(), "rate limited") {
			t.Fatalf("after the error: %+v, %v", got.s, got.err)
		}
	})
	t.Run("CancelledCallDropsItsQuestion", func(t *testing.T) {
		res := settle("question", "", "q3")
		q := nextQuestion(t)
		if err := a.CancelCall(t.Context(), req.ID, "q3"); err != nil {
			t.Fatal(err)
		}
		if got := <-res; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("cancelled while asking: %+v, %v", got.s, got.err)
		}
		for {
			ev, err := watchA.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Resolved == q.ID {
				break
			}
		}
		if err := a.AnswerQuestion(t.Context(), q.ID, sdk.Answer{Action: sdk.Declined}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("answered a dropped question: %v, want ErrNotFound", err)
		}
	})
	t.Run("PendingQuestionIsShownToTheNextWatcher", func(t *testing.T) {
		res := settle("question", "", "q4")
		q := nextQuestion(t)
		again, err := a.WatchInteractions(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer again.Close()
		ev, err := again.Next()
		if err != nil || ev.Question == nil || ev.Question.ID != q.ID {
			t.Fatalf("a new watcher's first event %+v, %v; want the pending question", ev, err)
		}
		if err := a.AnswerQuestion(t.Context(), q.ID, sdk.Answer{Action: sdk.Cancelled}); err != nil {
			t.Fatal(err)
		}
		if got := <-res; got.err != nil || got.s.Text() != "cancel " {
			t.Fatalf("after cancel: %+v, %v", got.s, got.err)
		}
	})
	watchB.Close()
	for ev := range bEvents {
		if ev.Question != nil || ev.Sample != nil {
			t.Errorf("client b saw client a's %+v", ev)
		}
	}
}

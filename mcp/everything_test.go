package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

func TestEverything(t *testing.T) {
	h := newHost(t)
	s := h.supervise(h.config("everything", serverScript("server-everything"), "stdio"))
	inst := s.Current()

	t.Run("Discovery", func(t *testing.T) {
		names := h.names()
		for _, want := range []string{"everything_echo", "everything_get-tiny-image", "everything_get-structured-content", "everything_trigger-long-running-operation"} {
			if !names[want] {
				t.Errorf("%s not registered; have %v", want, names)
			}
		}
		if got := inst.Tools()["everything_echo"]; got != "echo" {
			t.Errorf("everything_echo calls %q, want echo", got)
		}
	})

	t.Run("ListChangeRightAfterConnecting", func(t *testing.T) {
		// The server registers simulate-research-query once initialized and announces
		// it with notifications/tools/list_changed.
		// The initial listing may or may not see it already; the re-listing must
		// happen either way and leave it registered.
		waitListed(t, inst, func() bool {
			n, _ := inst.Listed()
			return n >= 2 && h.names()["everything_simulate-research-query"]
		})
	})

	t.Run("Text", func(t *testing.T) {
		st := mustSettle(t, h, "everything_echo", `{"message":"hello"}`)
		if st.Text() != "Echo: hello" {
			t.Errorf("text = %q", st.Text())
		}
		if st.Structured != nil {
			t.Errorf("structured = %s, want none for a plain text result", st.Structured)
		}
	})

	t.Run("SamplingAndElicitationReachTheCallsRunner", func(t *testing.T) {
		in := &fakeInteractor{}
		ctx := sdk.WithInteractor(t.Context(), in)
		st, err := h.settle(ctx, "everything_trigger-sampling-request", `{"prompt":"hi","maxTokens":20}`)
		if err != nil || st.IsError() || !strings.Contains(st.Text(), "a completion") {
			t.Fatalf("sampling: %v %+v", err, st)
		}
		if len(in.samples) != 1 || in.samples[0].MaxTokens != 20 || !strings.Contains(in.samples[0].Messages[0].Content.Text, "hi") {
			t.Errorf("sample requests = %+v", in.samples)
		}
		st, err = h.settle(ctx, "everything_trigger-elicitation-request", `{}`)
		if err != nil || st.IsError() || !strings.Contains(st.Text(), "Name: Ada") {
			t.Fatalf("elicitation: %v %+v", err, st)
		}
		// With no one to answer, the server hears so and the tool reports it.
		st, err = h.settle(t.Context(), "everything_trigger-sampling-request", `{"prompt":"hi"}`)
		if err == nil && !st.IsError() {
			t.Errorf("sampling with no one to answer: %+v, want a failure", st)
		}
	})

	t.Run("Image", func(t *testing.T) {
		st := mustSettle(t, h, "everything_get-tiny-image", `{}`)
		var media []sdk.Part
		for _, p := range st.Content {
			if p.Type == sdk.PartMedia {
				media = append(media, p)
			}
		}
		if len(st.Content) != 3 || len(media) != 1 {
			t.Fatalf("content = %d parts with %d media, want 3 with 1", len(st.Content), len(media))
		}
		if media[0].MIMEType != "image/png" || !bytes.HasPrefix(media[0].Data, []byte("\x89PNG\r\n")) {
			t.Errorf("media = %s, %q...: want decoded PNG bytes", media[0].MIMEType, media[0].Data[:8])
		}
	})

	t.Run("StructuredContent", func(t *testing.T) {
		q, err := h.reg.Prepare(h.loc)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range q.Definitions() {
			if d.Name == "everything_get-structured-content" && !strings.Contains(string(d.OutputSchema), "temperature") {
				t.Errorf("output schema = %s, want the tool's outputSchema", d.OutputSchema)
			}
		}
		st := mustSettle(t, h, "everything_get-structured-content", `{"location":"Chicago"}`)
		var weather struct{ Temperature float64 }
		if err := json.Unmarshal(st.Structured, &weather); err != nil || weather.Temperature != 36 {
			t.Errorf("structured = %s (%v), want Chicago's weather", st.Structured, err)
		}
		if !strings.Contains(st.Text(), "drizzle") {
			t.Errorf("text = %q, want the content block", st.Text())
		}
	})

	t.Run("InvalidInputNeverReachesTheServer", func(t *testing.T) {
		st, err := h.settle(t.Context(), "everything_get-structured-content", `{"location":"Paris"}`)
		if err != nil || st.Outcome != registry.InvalidInput {
			t.Fatalf("settle = %v, %v; want invalid_input", st, err)
		}
	})

	t.Run("CancelWithProgress", func(t *testing.T) {
		var mu sync.Mutex
		var events []sdk.Progress
		got := make(chan struct{}, 100)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		q, err := h.reg.Prepare(h.loc)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := q.Settle(ctx, registry.Call{
				Name:  "everything_trigger-long-running-operation",
				Input: []byte(`{"duration":60,"steps":300}`), // a step every 200ms
				Progress: func(p sdk.Progress) {
					mu.Lock()
					events = append(events, p)
					mu.Unlock()
					got <- struct{}{}
				},
			})
			errc <- err
		}()
		<-got
		<-got
		cancel()
		err = <-errc
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want an interruption (context.Canceled)", err)
		}
		mu.Lock()
		n := len(events)
		first := events[0]
		mu.Unlock()
		if first.Total != 300 || first.Progress != 1 {
			t.Errorf("first event = %+v, want 1 of 300", first)
		}
		proctest.Until(t, func() bool { return h.logs.Contains("sent notifications/cancelled") })

		// The server ignores the cancellation and goes on notifying progress for the
		// old token while a second call runs; none may reach the finished call.
		mustSettle(t, h, "everything_trigger-long-running-operation", `{"duration":1,"steps":2}`)
		mu.Lock()
		defer mu.Unlock()
		if len(events) != n {
			t.Errorf("%d progress events reached the call after it ended", len(events)-n)
		}
	})

	t.Run("AfterHookRuns", func(t *testing.T) {
		release, err := h.reg.AddHook(h.loc, func(_ context.Context, call registry.Call, s *registry.Settlement) (*registry.Settlement, error) {
			s.Content = append(s.Content, sdk.Text(" [hooked "+call.Name+"]"))
			return s, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		st := mustSettle(t, h, "everything_echo", `{"message":"x"}`)
		if st.Text() != "Echo: x [hooked everything_echo]" {
			t.Errorf("text = %q, want the hook's addition", st.Text())
		}
	})

	t.Run("CloseLeavesNoProcess", func(t *testing.T) {
		pid := inst.PID()
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		proctest.AssertGroupGone(t, pid)
		for name := range h.names() {
			if strings.HasPrefix(name, "everything_") {
				t.Errorf("%s still registered after close", name)
			}
		}
	})
}

// fakeInteractor answers every question with a name and every sample request
// with a fixed completion.
type fakeInteractor struct {
	mu      sync.Mutex
	samples []sdk.SampleRequest
}

func (f *fakeInteractor) Ask(_ context.Context, q sdk.Question) (sdk.Answer, error) {
	return sdk.Answer{Action: sdk.Accepted, Content: []byte(`{"name":"Ada"}`)}, nil
}

func (f *fakeInteractor) Sample(_ context.Context, req sdk.SampleRequest) (sdk.SampleResult, error) {
	f.mu.Lock()
	f.samples = append(f.samples, req)
	f.mu.Unlock()
	return sdk.SampleResult{Model: "fake", Message: sdk.SampleMessage{Role: "assistant", Content: sdk.Text("a completion")}}, nil
}

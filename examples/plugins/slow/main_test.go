package main

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/plugintest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCountdown(t *testing.T) {
	h := plugintest.Start(t, plugintest.Build(t, "."), plugintest.Options{})

	t.Run("ReportsProgressEveryStep", func(t *testing.T) {
		var mu sync.Mutex
		var events []sdk.Progress
		s, err := h.Settle(t.Context(), registry.Call{
			Name:  "countdown",
			Input: json.RawMessage(`{"seconds": 3, "step_ms": 1}`),
			Progress: func(p sdk.Progress) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, p)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := "Lift-off after 3 steps of 1ms."; s.Outcome != registry.Completed || s.Text() != want {
			t.Errorf("got %s %q, want completed %q", s.Outcome, s.Text(), want)
		}
		// Progress events arrive before the result, so all of them are in by now.
		mu.Lock()
		defer mu.Unlock()
		want := []sdk.Progress{
			{Progress: 0, Total: 3, Message: "3 left"},
			{Progress: 1, Total: 3, Message: "2 left"},
			{Progress: 2, Total: 3, Message: "1 left"},
			{Progress: 3, Total: 3, Message: "0 left"},
		}
		if len(events) != len(want) {
			t.Fatalf("progress events %+v, want %+v", events, want)
		}
		for i := range want {
			if events[i] != want[i] {
				t.Errorf("progress event %d = %+v, want %+v", i, events[i], want[i])
			}
		}
	})

	t.Run("CancellationIsAnInterruption", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		started := make(chan struct{})
		var once sync.Once
		type result struct {
			s   *registry.Settlement
			err error
		}
		done := make(chan result, 1)
		go func() {
			// An hour of countdown: only cancellation ends it within the test.
			s, err := h.Settle(ctx, registry.Call{
				Name:     "countdown",
				Input:    json.RawMessage(`{"seconds": 3600}`),
				Progress: func(sdk.Progress) { once.Do(func() { close(started) }) },
			})
			done <- result{s, err}
		}()

		// The first progress event shows the executor is running in the plugin.
		select {
		case <-started:
		case r := <-done:
			t.Fatalf("countdown ended before it was cancelled: %+v, %v", r.s, r.err)
		}
		cancel()
		select {
		case r := <-done:
			if !errors.Is(r.err, context.Canceled) || r.s != nil {
				t.Errorf("got settlement %+v and error %v, want an interruption (context.Canceled) and no settlement", r.s, r.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the cancelled countdown did not end")
		}

		// The plugin is still healthy and serves the next call.
		s, err := h.Call(t.Context(), "countdown", map[string]int{"seconds": 1, "step_ms": 1})
		if err != nil || s.Outcome != registry.Completed {
			t.Errorf("call after a cancellation: %+v, %v", s, err)
		}
	})

	t.Run("ZeroSecondsIsInvalidInput", func(t *testing.T) {
		s, err := h.Call(t.Context(), "countdown", map[string]int{"seconds": 0})
		if err != nil {
			t.Fatal(err)
		}
		if s.Outcome != registry.InvalidInput {
			t.Errorf("got %s %q, want invalid input", s.Outcome, s.Text())
		}
	})
}

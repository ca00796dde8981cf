package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/plugintest"
	"github.com/toolhost/toolhost/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	stableClock = "Returns the current time in UTC, in RFC 3339 format."
	betaClock   = "Returns the current time in UTC, in RFC 3339 format or in a Go time layout (beta)."
)

func TestRuntimeRegistrations(t *testing.T) {
	h := plugintest.Start(t, plugintest.Build(t, "."), plugintest.Options{})

	t.Run("ActivationRegistersClockAndToggle", func(t *testing.T) {
		wantTools(t, h, []string{"clock_now", "feature_toggle"}, stableClock)
		s := call(t, h, "clock_now", nil, registry.Completed)
		if _, err := time.Parse(time.RFC3339, s.Text()); err != nil {
			t.Errorf("clock_now = %q: %v", s.Text(), err)
		}
	})

	t.Run("EnablingRegistersBetaAndOverridesClock", func(t *testing.T) {
		call(t, h, "feature_toggle", ToggleInput{Enabled: true}, registry.Completed)
		wantTools(t, h, []string{"beta_echo", "clock_now", "feature_toggle"}, betaClock)
		if s := call(t, h, "beta_echo", EchoInput{Text: "hello"}, registry.Completed); s.Text() != "hello" {
			t.Errorf("beta_echo = %q, want %q", s.Text(), "hello")
		}
		year := call(t, h, "clock_now", BetaClockInput{Layout: "2006"}, registry.Completed).Text()
		if _, err := strconv.Atoi(year); err != nil || len(year) != 4 {
			t.Errorf("beta clock_now with layout 2006 = %q, want a year", year)
		}
		if s := call(t, h, "feature_toggle", ToggleInput{Enabled: true}, registry.Completed); !strings.Contains(s.Text(), "already on") {
			t.Errorf("enabling twice: %q", s.Text())
		}
	})

	t.Run("DisablingClosesBetaAndRevealsClock", func(t *testing.T) {
		// A request prepared while beta_echo was advertised...
		before, err := h.Registry().Prepare(h.Location())
		if err != nil {
			t.Fatal(err)
		}
		call(t, h, "feature_toggle", ToggleInput{Enabled: false}, registry.Completed)
		wantTools(t, h, []string{"clock_now", "feature_toggle"}, stableClock)
		call(t, h, "beta_echo", EchoInput{Text: "hello"}, registry.Unknown)
		// The original clock_now is back, and with it its contract: no layout.
		call(t, h, "clock_now", BetaClockInput{Layout: "2006"}, registry.InvalidInput)

		// ...can no longer run it: the registration it captured is closed.
		s, err := before.Settle(t.Context(), registry.Call{Name: "beta_echo", Input: []byte(`{"text":"late"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if s.Outcome != registry.Unavailable {
			t.Errorf("stale beta_echo call: %s %q, want unavailable", s.Outcome, s.Text())
		}
	})

	t.Run("TogglingAgainWorks", func(t *testing.T) {
		call(t, h, "feature_toggle", ToggleInput{Enabled: true}, registry.Completed)
		wantTools(t, h, []string{"beta_echo", "clock_now", "feature_toggle"}, betaClock)
		call(t, h, "feature_toggle", ToggleInput{Enabled: false}, registry.Completed)
		wantTools(t, h, []string{"clock_now", "feature_toggle"}, stableClock)
		if s := call(t, h, "feature_toggle", ToggleInput{Enabled: false}, registry.Completed); !strings.Contains(s.Text(), "already off") {
			t.Errorf("disabling twice: %q", s.Text())
		}
	})
}

// wantTools checks the advertised names and clock_now's description.
func wantTools(t *testing.T, h *plugintest.Host, names []string, clock string) {
	t.Helper()
	var got []string
	for _, d := range h.Definitions() {
		got = append(got, d.Name)
		if d.Name == "clock_now" && d.Description != clock {
			t.Errorf("clock_now description %q, want %q", d.Description, clock)
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("tools %v, want %v", got, names)
	}
}

func call(t *testing.T, h *plugintest.Host, name string, input any, want registry.Outcome) *registry.Settlement {
	t.Helper()
	s, err := h.Call(t.Context(), name, input)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	if s.Outcome != want {
		t.Fatalf("call %s: %s %q, want %s", name, s.Outcome, s.Text(), want)
	}
	return s
}

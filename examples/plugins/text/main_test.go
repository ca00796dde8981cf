package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/plugintest"
	"github.com/toolhost/toolhost/registry"
)

// The plugin runs as a separate process; goleak checks the host side (this test
// binary) leaves no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTools builds the plugin, starts it against a real host and settles calls the
// way a session runner would.
func TestTools(t *testing.T) {
	h := plugintest.Start(t, plugintest.Build(t, "."), plugintest.Options{})

	t.Run("AdvertisesItsTools", func(t *testing.T) {
		var names []string
		for _, d := range h.Definitions() {
			names = append(names, d.Name)
		}
		if want := []string{"find", "title", "upper", "word_count"}; !slices.Equal(names, want) {
			t.Errorf("tools = %v, want %v", names, want)
		}
	})

	t.Run("TitleWithNobodyToAskIsTheFirstLine", func(t *testing.T) {
		// plugintest grants neither "ask" nor "sample": both are unanswered.
		s := settle(t, h, "title", TextInput{Text: "The Raven\nOnce upon a midnight dreary"})
		if s.Outcome != registry.Completed || s.Text() != "The Raven" {
			t.Errorf("got %s %q, want completed %q", s.Outcome, s.Text(), "The Raven")
		}
	})

	t.Run("UpperReturnsText", func(t *testing.T) {
		s := settle(t, h, "upper", TextInput{Text: "Hello, world"})
		if s.Outcome != registry.Completed || s.Text() != "HELLO, WORLD" {
			t.Errorf("got %s %q, want completed %q", s.Outcome, s.Text(), "HELLO, WORLD")
		}
	})

	t.Run("WordCountProjectsOneLine", func(t *testing.T) {
		s := settle(t, h, "word_count", TextInput{Text: "one two\nthree\nfour five"})
		if s.Outcome != registry.Completed {
			t.Fatalf("outcome %s: %s", s.Outcome, s.Text())
		}
		if want := "3 lines, 5 words, 23 bytes"; s.Text() != want {
			t.Errorf("content %q, want %q", s.Text(), want)
		}
		var got Counts
		if err := json.Unmarshal(s.Structured, &got); err != nil {
			t.Fatal(err)
		}
		if want := (Counts{Lines: 3, Words: 5, Bytes: 23}); got != want {
			t.Errorf("structured %+v, want %+v", got, want)
		}
	})

	t.Run("FindReturnsLineNumbers", func(t *testing.T) {
		s := settle(t, h, "find", FindInput{Text: "alpha\nbeta\ngamma\nalphabet\n", Pattern: "^alpha"})
		got := findOutput(t, s)
		want := FindOutput{Matches: []Match{{Line: 1, Text: "alpha"}, {Line: 4, Text: "alphabet"}}}
		if !slices.Equal(got.Matches, want.Matches) || got.Truncated {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})

	t.Run("FindWithoutMatchesReturnsAnEmptyList", func(t *testing.T) {
		got := findOutput(t, settle(t, h, "find", FindInput{Text: "alpha", Pattern: "omega"}))
		if got.Matches == nil || len(got.Matches) != 0 {
			t.Errorf("matches = %#v, want an empty list", got.Matches)
		}
	})

	t.Run("FindRefusesAnInvalidPattern", func(t *testing.T) {
		s := settle(t, h, "find", FindInput{Text: "x", Pattern: "(unclosed"})
		if s.Outcome != registry.ToolFailed {
			t.Fatalf("outcome %s, want %s", s.Outcome, registry.ToolFailed)
		}
		if !strings.Contains(s.Text(), `"(unclosed" is not a valid regular expression`) || !strings.Contains(s.Text(), "missing closing )") {
			t.Errorf("the model should learn what is wrong with the pattern, got %q", s.Text())
		}
	})

	t.Run("MissingFieldIsInvalidInput", func(t *testing.T) {
		s := settle(t, h, "find", json.RawMessage(`{"text":"x"}`))
		if s.Outcome != registry.InvalidInput || !strings.Contains(s.Text(), "pattern") {
			t.Errorf("got %s %q, want invalid input naming pattern", s.Outcome, s.Text())
		}
	})
}

func TestMaxMatchesOptionTruncates(t *testing.T) {
	h := plugintest.Start(t, plugintest.Build(t, "."), plugintest.Options{
		Options: json.RawMessage(`{"max_matches": 2}`),
	})
	got := findOutput(t, settle(t, h, "find", FindInput{Text: "a\na\na\n", Pattern: "a"}))
	if len(got.Matches) != 2 || !got.Truncated {
		t.Errorf("got %+v, want 2 matches, truncated", got)
	}
}

func settle(t *testing.T, h *plugintest.Host, name string, input any) *registry.Settlement {
	t.Helper()
	s, err := h.Call(t.Context(), name, input)
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	return s
}

func findOutput(t *testing.T, s *registry.Settlement) FindOutput {
	t.Helper()
	if s.Outcome != registry.Completed {
		t.Fatalf("outcome %s: %s", s.Outcome, s.Text())
	}
	var out FindOutput
	if err := json.Unmarshal(s.Structured, &out); err != nil {
		t.Fatalf("structured output %s: %v", s.Structured, err)
	}
	return out
}

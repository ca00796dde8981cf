package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// TestRefusalsAreBounded holds every model-facing refusal text to the Location's
// output limits: what is cut is retained whole in managed storage, and the after
// hooks see the managed path.
func TestRefusalsAreBounded(t *testing.T) {
	lim := registry.DefaultLimits()
	r := hosttest.Registry(t, registry.Options{})
	release, err := r.OpenLocation("/ws", registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)

	huge := strings.Repeat("the disk is full; ", 200_000/18+1)[:200_000]
	type listIn struct {
		Text  string `json:"text"`
		Items []int  `json:"items,omitempty"`
	}
	register(t, r, registry.Batch{Location: "/ws", Tools: map[string]sdk.Tool{
		"fails": sdk.NewTool("fails", func(context.Context, sdk.Invocation, struct{}) (string, error) {
			return "", sdk.Failf("%s", huge)
		}),
		"strict": sdk.NewTool("strict", func(_ context.Context, _ sdk.Invocation, in listIn) (string, error) {
			return in.Text, nil
		}),
	}})
	var hooked struct {
		text    string
		managed []string
	}
	releaseHook, err := r.AddHook("/ws", func(_ context.Context, _ registry.Call, s *registry.Settlement) (*registry.Settlement, error) {
		hooked.text, hooked.managed = s.Text(), s.ManagedPaths
		return s, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(releaseHook)
	q, err := r.Prepare("/ws")
	if err != nil {
		t.Fatal(err)
	}

	// checkBounded asserts that s is within the limits, that its whole text is
	// retained at its one managed path, and that the after hook saw that path.
	checkBounded := func(t *testing.T, s *registry.Settlement, want registry.Outcome, wholeHas ...string) string {
		t.Helper()
		if s.Outcome != want {
			t.Fatalf("outcome = %s, want %s", s.Outcome, want)
		}
		text := s.Text()
		if len(text) > lim.MaxBytes || strings.Count(text, "\n")+1 > lim.MaxLines {
			t.Fatalf("model text is %d bytes, %d lines: over the limits %d bytes, %d lines", len(text), strings.Count(text, "\n")+1, lim.MaxBytes, lim.MaxLines)
		}
		if len(s.ManagedPaths) != 1 {
			t.Fatalf("managed paths = %q, want the one file holding the whole text", s.ManagedPaths)
		}
		path := s.ManagedPaths[0]
		if !strings.Contains(text, path) {
			t.Errorf("preview does not name the managed path %s:\n%.500s", path, text)
		}
		if len(hooked.managed) != 1 || hooked.managed[0] != path || hooked.text != text {
			t.Errorf("after hook saw managed paths %q and %d bytes of text, want %s and the bounded text", hooked.managed, len(hooked.text), path)
		}
		whole, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("reading the retained text: %v", err)
		}
		for _, w := range wholeHas {
			if !strings.Contains(string(whole), w) {
				t.Errorf("retained text (%d bytes) lacks %.80q", len(whole), w)
			}
		}
		for _, p := range s.Problems {
			if !strings.Contains(text, "\n- "+p.String()) {
				t.Fatalf("settlement carries problem %.200q, which its bounded text does not show", p.String())
			}
		}
		return text
	}

	t.Run("ToolFailure", func(t *testing.T) {
		s := settle(t, q, "fails", `{}`)
		text := checkBounded(t, s, registry.ToolFailed, huge)
		if !strings.HasPrefix(text, "the disk is full; ") {
			t.Errorf("preview does not begin with the failure: %.100q", text)
		}
	})
	t.Run("UnexpectedKeys", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(`{"text":"x"`)
		for i := range 20_000 {
			fmt.Fprintf(&b, `,"unexpected_key_%05d":1`, i)
		}
		b.WriteString("}")
		s := settle(t, q, "strict", b.String())
		text := checkBounded(t, s, registry.InvalidInput, "unexpected_key_00000", "unexpected_key_19999")
		if !strings.HasPrefix(text, `invalid input for "strict":`) {
			t.Errorf("preview does not begin with what failed: %.100q", text)
		}
		if !strings.Contains(text, "expected keys: items, text") {
			t.Errorf("preview lacks the expected keys:\n%.2000s", text)
		}
	})
	t.Run("LongProblemListSaysHowManyAreLeftOut", func(t *testing.T) {
		items := strings.TrimSuffix(strings.Repeat(`"x",`, 20_000), ",")
		s := settle(t, q, "strict", `{"text":"x","items":[`+items+`]}`)
		text := checkBounded(t, s, registry.InvalidInput, "/items/0: ", "/items/19999: ")
		shown := strings.Count(text, "\n- /items/")
		if shown == 0 || shown != len(s.Problems) {
			t.Fatalf("preview lists %d problems, settlement carries %d, want the same first ones", shown, len(s.Problems))
		}
		if want := fmt.Sprintf("%d more problems left out", 20_000-shown); !strings.Contains(text, want) {
			t.Errorf("preview does not say %q:\n%.3000s", want, text)
		}
	})
	t.Run("Unknown", func(t *testing.T) {
		name := strings.Repeat("n", 100_000)
		s, err := q.Settle(t.Context(), registry.Call{Name: name, Input: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if s.Outcome != registry.Unknown || len(s.Text()) > lim.MaxBytes || len(s.ManagedPaths) != 1 {
			t.Fatalf("settlement = %s, %d bytes, managed %q: want unknown, bounded, retained", s.Outcome, len(s.Text()), s.ManagedPaths)
		}
	})
	t.Run("WithinTheLimitsUntouched", func(t *testing.T) {
		s := settle(t, q, "strict", `{"text":1}`)
		if s.Outcome != registry.InvalidInput || len(s.ManagedPaths) != 0 || !strings.Contains(s.Text(), "/text: ") {
			t.Fatalf("settlement = %s %q, managed %q: want the whole short refusal", s.Outcome, s.Text(), s.ManagedPaths)
		}
	})
}

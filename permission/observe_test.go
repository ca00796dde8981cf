package permission_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/permission"
)

// TestObserveSeesEveryDecision checks what an audit trail is told: which rule
// decided, whether a person was asked and what they answered, whether an approval
// was saved and later used.
func TestObserveSeesEveryDecision(t *testing.T) {
	var (
		mu        sync.Mutex
		decisions []permission.Decision
	)
	asker := &answerAsker{ans: permission.Answer{Reply: permission.Always}}
	s := newService(t, permission.Options{
		Rules: []permission.Rule{
			rule("*", "*", permission.Allow),
			rule("rm", "*", permission.Deny),
			rule("edit", "*", permission.Ask),
		},
		StateFile: filepath.Join(t.TempDir(), "state.json"),
		Asker:     asker,
		Observe: func(_ context.Context, d permission.Decision) {
			mu.Lock()
			defer mu.Unlock()
			decisions = append(decisions, d)
		},
	})
	ctx := context.Background()
	edit := req("s", "edit", "a")
	edit.Save = []string{"*"}
	for _, r := range []permission.Request{req("s", "read", "a"), req("s", "rm", "a"), edit, edit} {
		_ = s.Assert(ctx, r)
	}
	type summary struct {
		action          string
		effect          permission.Effect
		rule            int
		approved, asked bool
		reply           permission.Reply
		saved, allowed  bool
	}
	want := []summary{
		{"read", permission.Allow, 0, false, false, "", false, true},
		{"rm", permission.Deny, 1, false, false, "", false, false},
		{"edit", permission.Ask, 2, false, true, permission.Always, true, true},
		{"edit", permission.Allow, 2, true, false, "", false, true},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(decisions) != len(want) {
		t.Fatalf("%d decisions observed, want %d", len(decisions), len(want))
	}
	for i, d := range decisions {
		got := summary{d.Request.Action, d.Effect, d.Rule, d.Approved, d.Asked, d.Reply, d.Saved, d.Allowed}
		if got != want[i] {
			t.Errorf("decision %d: got %+v, want %+v", i, got, want[i])
		}
		if d.Start.IsZero() || d.Waited < 0 {
			t.Errorf("decision %d: start %v, waited %v", i, d.Start, d.Waited)
		}
	}
	if asker.count() != 1 {
		t.Errorf("the person was asked %d times, want once", asker.count())
	}
}

package location_test

import (
	"slices"
	"testing"

	"github.com/toolhost/toolhost/registry"
)

// TestPrepareOffersWhatTheRulesLeaveVisible: a Location's Prepare hides the tools
// its permission rules deny outright, by default; a deny naming a source hides that
// source's tools only; registry.OfferAll asks for the unfiltered list.
func TestPrepareOffersWhatTheRulesLeaveVisible(t *testing.T) {
	manifestTool := func(name string) obj {
		return obj{"name": name, "description": "Echoes stdin.", "input_schema": obj{"type": "object"},
			"command": []string{"cat"}, "env": obj{"PATH": "/usr/bin:/bin"}}
	}
	builtins := []string{"glob", "grep", "list", "read"}
	for _, tt := range []struct {
		name  string
		rules []obj
		want  func(all []string) []string
	}{
		{"DenyNamingASourceHidesItsToolsOnly",
			[]obj{{"action": "*", "resource": "*", "effect": "deny", "source": "manifest:shout"}},
			func(all []string) []string { return without(all, "shout") }},
		{"DenyForEverySourceHidesEverything",
			[]obj{{"action": "*", "resource": "*", "effect": "deny"}},
			func([]string) []string { return nil }},
		{"LaterAllowForOneSourceShowsItsToolsOnly",
			[]obj{{"action": "*", "resource": "*", "effect": "deny"}, {"action": "*", "resource": "*", "effect": "allow", "source": "manifest:*"}},
			func([]string) []string { return []string{"shout", "whisper"} }},
		{"DenyOfSomeResourcesHidesNothing",
			[]obj{{"action": "*", "resource": "secret/*", "effect": "deny"}},
			func(all []string) []string { return all }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			l := e.activate(t, workspace(t, obj{"tools": []obj{manifestTool("shout"), manifestTool("whisper")}, "permission": tt.rules}))
			all, err := l.Prepare(registry.OfferAll())
			if err != nil {
				t.Fatal(err)
			}
			allNames := names(all.Definitions())
			for _, want := range append([]string{"shout", "whisper"}, builtins...) {
				if !slices.Contains(allNames, want) {
					t.Fatalf("the unfiltered list %q lacks %s", allNames, want)
				}
			}
			q, err := l.Prepare()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := names(q.Definitions()), tt.want(allNames); !slices.Equal(got, want) {
				t.Fatalf("Prepare offers %q, want %q", got, want)
			}
		})
	}
}

func without(list []string, drop ...string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(drop, s) {
			out = append(out, s)
		}
	}
	return out
}

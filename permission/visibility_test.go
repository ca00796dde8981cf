package permission_test

import (
	"context"
	"slices"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

func TestVisibility(t *testing.T) {
	only := func(r permission.Rule, source string) permission.Rule { r.Source = source; return r }
	for _, tt := range []struct {
		name   string
		rules  []permission.Rule
		source string
		action string
		want   bool
	}{
		{"NoRulesShows", nil, "builtin", "question", true},
		{"LaterAllowShows", []permission.Rule{rule("*", "*", permission.Deny), rule("question", "*", permission.Allow)}, "builtin", "question", true},
		{"LaterDenyHides", []permission.Rule{rule("question", "*", permission.Allow), rule("*", "*", permission.Deny)}, "builtin", "question", false},
		{"DenyOfSomeResourcesShows", []permission.Rule{rule("bash", "rm *", permission.Deny)}, "builtin", "bash", true},
		{"AllowOfOneResourceAfterDenyShows", []permission.Rule{rule("read", "*", permission.Deny), rule("read", "notes.txt", permission.Allow)}, "builtin", "read", true},
		{"AskShows", []permission.Rule{rule("edit", "*", permission.Ask)}, "builtin", "edit", true},
		{"WildcardActionHides", []permission.Rule{rule("everything_*", "*", permission.Deny)}, "mcp:everything", "everything_echo", false},
		{"OtherActionsUntouched", []permission.Rule{rule("edit", "*", permission.Deny)}, "builtin", "read", true},
		{"DenyForASourceHidesItsTools", []permission.Rule{only(rule("*", "*", permission.Deny), "mcp:srv")}, "mcp:srv", "srv_echo", false},
		{"DenyForASourceSparesOthers", []permission.Rule{only(rule("*", "*", permission.Deny), "mcp:srv")}, "builtin", "read", true},
		{"DenyForASourcePatternHidesMatches", []permission.Rule{only(rule("*", "*", permission.Deny), "plugin:*")}, "plugin:text", "upper", false},
		{"LaterAllowForOtherSourceDoesNotShow", []permission.Rule{rule("*", "*", permission.Deny), only(rule("*", "*", permission.Allow), "builtin")}, "mcp:srv", "srv_echo", false},
		{"LaterAllowForTheSourceShows", []permission.Rule{rule("*", "*", permission.Deny), only(rule("*", "*", permission.Allow), "builtin")}, "builtin", "read", true},
		{"UnknownSourceOnlyRulesWithout", []permission.Rule{only(rule("*", "*", permission.Deny), "builtin")}, "", "read", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := permission.Visibility(tt.rules)(tt.source, tt.action); got != tt.want {
				t.Fatalf("Visibility(%v)(%q, %q) = %v, want %v", tt.rules, tt.source, tt.action, got, tt.want)
			}
		})
	}
}

// TestVisibilityAgreesWithEvaluate: a tool is hidden exactly when Assert, for its
// source and action and any resource, would deny it by a rule.
func TestVisibilityAgreesWithEvaluate(t *testing.T) {
	rules := []permission.Rule{{Action: "*", Resource: "*", Effect: permission.Deny, Source: "mcp:srv"}}
	s := newService(t, permission.Options{Rules: rules})
	if got := s.Evaluate("read", nil); got != permission.Ask {
		t.Fatalf("Evaluate(read) = %s, want ask: the deny names another source", got)
	}
	visible := permission.Visibility(rules)
	if !visible("builtin", "read") {
		t.Fatal("the built-in read is hidden by a deny for mcp:srv")
	}
	if visible("mcp:srv", "srv_echo") {
		t.Fatal("mcp:srv's tool is offered though every action of mcp:srv is denied")
	}
}

// TestOfferHidesOnlyTheDeniedSource prepares Requests with registry.Offer and
// permission.Visibility: a deny naming a source hides that source's tools only,
// by name or by PermissionAction.
func TestOfferHidesOnlyTheDeniedSource(t *testing.T) {
	r := hosttest.Registry(t, registry.Options{})
	release, err := r.OpenLocation("/ws", registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	tool := func(action string) sdk.Tool {
		tl := sdk.NewTool("answers", func(context.Context, sdk.Invocation, struct{}) (string, error) { return "ok", nil })
		tl.PermissionAction = action
		return tl
	}
	for _, b := range []registry.Batch{
		{Source: registry.Source{Kind: "builtin"}, Tools: map[string]sdk.Tool{"read": tool(""), "write": tool("edit")}},
		{Source: registry.Source{Kind: "mcp", Name: "srv"}, Tools: map[string]sdk.Tool{"srv_echo": tool(""), "srv_add": tool("")}},
		{Source: registry.Source{Kind: "plugin", Name: "text"}, Tools: map[string]sdk.Tool{"upper": tool(""), "patch": tool("edit")}},
	} {
		b.Location = "/ws"
		release, err := r.Register(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(release)
	}
	only := func(r permission.Rule, source string) permission.Rule { r.Source = source; return r }
	for _, tt := range []struct {
		name  string
		rules []permission.Rule
		want  []string
	}{
		{"DenyAllOfOneServer", []permission.Rule{only(rule("*", "*", permission.Deny), "mcp:srv")}, []string{"patch", "read", "upper", "write"}},
		{"DenyAnActionOfOnePlugin", []permission.Rule{only(rule("edit", "*", permission.Deny), "plugin:text")}, []string{"read", "srv_add", "srv_echo", "upper", "write"}},
		{"DenyAnActionEverywhere", []permission.Rule{rule("edit", "*", permission.Deny)}, []string{"read", "srv_add", "srv_echo", "upper"}},
		{"DenyAllButBuiltins", []permission.Rule{rule("*", "*", permission.Deny), only(rule("*", "*", permission.Allow), "builtin")}, []string{"read", "write"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q, err := r.Prepare("/ws", registry.Offer(permission.Visibility(tt.rules)))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range q.Definitions() {
				got = append(got, d.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("offered %q, want %q", got, tt.want)
			}
		})
	}
}

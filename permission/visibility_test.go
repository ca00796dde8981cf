package permission_test

import (
	"testing"

	"github.com/toolhost/toolhost/permission"
)

func TestVisibility(t *testing.T) {
	for _, tt := range []struct {
		name   string
		rules  []permission.Rule
		action string
		want   bool
	}{
		{"NoRulesShows", nil, "question", true},
		{"LaterAllowShows", []permission.Rule{rule("*", "*", permission.Deny), rule("question", "*", permission.Allow)}, "question", true},
		{"LaterDenyHides", []permission.Rule{rule("question", "*", permission.Allow), rule("*", "*", permission.Deny)}, "question", false},
		{"DenyOfSomeResourcesShows", []permission.Rule{rule("bash", "rm *", permission.Deny)}, "bash", true},
		{"AllowOfOneResourceAfterDenyShows", []permission.Rule{rule("read", "*", permission.Deny), rule("read", "notes.txt", permission.Allow)}, "read", true},
		{"AskShows", []permission.Rule{rule("edit", "*", permission.Ask)}, "edit", true},
		{"WildcardActionHides", []permission.Rule{rule("everything_*", "*", permission.Deny)}, "everything_echo", false},
		{"OtherActionsUntouched", []permission.Rule{rule("edit", "*", permission.Deny)}, "read", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := permission.Visibility(tt.rules)(tt.action); got != tt.want {
				t.Fatalf("Visibility(%v)(%q) = %v, want %v", tt.rules, tt.action, got, tt.want)
			}
		})
	}
}

package permission_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/permission"
)

func from(source, action string) permission.Request {
	r := req("s1", action, "*")
	r.Source.ToolSource = source
	return r
}

func TestRulesNamingASource(t *testing.T) {
	allowRead := rule("read", "*", permission.Allow)
	only := func(r permission.Rule, source string) permission.Rule { r.Source = source; return r }
	for _, tt := range []struct {
		name    string
		rules   []permission.Rule
		source  string
		allowed bool
	}{
		{"RuleForBuiltinAllowsTheBuiltin", []permission.Rule{only(allowRead, "builtin")}, "builtin", true},
		{"RuleForBuiltinDoesNotAllowAPlugin", []permission.Rule{only(allowRead, "builtin")}, "plugin:impostor", false},
		{"RuleWithoutSourceAppliesToAll", []permission.Rule{allowRead}, "plugin:impostor", true},
		{"SourcePatternMatches", []permission.Rule{only(allowRead, "mcp:*")}, "mcp:files", true},
		{"SourcePatternDoesNotMatchOtherKinds", []permission.Rule{only(allowRead, "mcp:*")}, "manifest:read", false},
		{"LaterDenyForOneSourceWins", []permission.Rule{allowRead, only(rule("read", "*", permission.Deny), "plugin:*")}, "plugin:impostor", false},
		{"LaterDenyForOneSourceSparesOthers", []permission.Rule{allowRead, only(rule("read", "*", permission.Deny), "plugin:*")}, "builtin", true},
		{"UnknownSourceMatchesOnlyRulesWithout", []permission.Rule{only(allowRead, "builtin")}, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newService(t, permission.Options{Rules: tt.rules})
			err := s.Assert(t.Context(), from(tt.source, "read"))
			if (err == nil) != tt.allowed {
				t.Errorf("Assert from %q = %v, want allowed=%v", tt.source, err, tt.allowed)
			}
		})
	}
}

func TestAlwaysApprovalRecordsItsSource(t *testing.T) {
	state := filepath.Join(t.TempDir(), "approvals.json")
	s := newService(t, permission.Options{Asker: &answerAsker{ans: permission.Answer{Reply: permission.Always}}, StateFile: state})
	r := from("plugin:a", "x")
	r.Save = []string{"*"}
	if err := s.Assert(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(state)
	if !strings.Contains(string(data), `"source": "plugin:a"`) {
		t.Errorf("saved approvals %s do not record the source", data)
	}
	restarted := newService(t, permission.Options{StateFile: state}) // nobody to ask
	if err := restarted.Assert(t.Context(), from("plugin:a", "x")); err != nil {
		t.Errorf("the approved source's x: %v", err)
	}
	if err := restarted.Assert(t.Context(), from("plugin:b", "x")); err == nil {
		t.Error("another source's x was allowed by plugin:a's approval")
	}
	if err := restarted.Assert(t.Context(), from("", "x")); err == nil {
		t.Error("x of an unknown source was allowed by plugin:a's approval")
	}
}

func TestApprovalSavedWithoutSourceCoversEverySource(t *testing.T) {
	state := filepath.Join(t.TempDir(), "approvals.json")
	if err := os.WriteFile(state, []byte(`{"version": 1, "approvals": [{"action": "x", "resource": "*"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newService(t, permission.Options{StateFile: state})
	for _, source := range []string{"", "builtin", "plugin:b"} {
		if err := s.Assert(t.Context(), from(source, "x")); err != nil {
			t.Errorf("from %q: %v; an approval saved before sources were recorded covers all", source, err)
		}
	}
}

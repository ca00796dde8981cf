package location_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// withOptions is echoPlugin with the test plugin's options and more config fields.
func withOptions(name string, options obj, fields obj) obj {
	p := echoPlugin(name)
	if options != nil {
		p["options"] = options
	}
	for k, v := range fields {
		p[k] = v
	}
	return p
}

func settleIn(t *testing.T, l *location.Location, name, input string) (*registry.Settlement, error) {
	t.Helper()
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	return q.Settle(t.Context(), registry.Call{Name: name, Input: json.RawMessage(input),
		Invocation: sdk.Invocation{SessionID: "ses", ToolCallID: "call"}})
}

// report settles tool in l with input and returns the report it completes with:
// what each attempt of a hostile plugin's came to.
func report(t *testing.T, l *location.Location, tool, input string) map[string]string {
	t.Helper()
	s, err := settleIn(t, l, tool, input)
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("%s: %v, %v", tool, s, err)
	}
	var r map[string]string
	if err := json.Unmarshal(s.Structured, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNamesBelongToSources(t *testing.T) {
	allowRead := obj{"action": "read", "resource": "*", "effect": "allow"}
	t.Run("UntrustedPluginTakingReadIsRefusedNamingTheBuiltin", func(t *testing.T) {
		e := newEnv(t)
		dir := workspace(t, obj{
			"plugins":    []obj{withOptions("impostor", obj{"names": []string{"read"}}, nil)},
			"permission": []obj{allowRead},
		})
		err := sourceErr(t, e.activate(t, dir), "plugin:impostor").Err
		t.Log(err)
		for _, want := range []string{`"read"`, "plugin impostor", "belongs to builtin", `"overrides"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("activation error %q does not say %s", err, want)
			}
		}
	})
	t.Run("AllowedOverrideWins", func(t *testing.T) {
		e := newEnv(t)
		dir := workspace(t, obj{
			"plugins":    []obj{withOptions("impostor", obj{"names": []string{"read"}}, obj{"overrides": []string{"read"}})},
			"permission": []obj{allowRead},
		})
		s, err := settleIn(t, e.activate(t, dir), "read", `{"path":"x"}`)
		if err != nil || s.Text() != "plugin read" {
			t.Fatalf("read = %v, %v; want the allowed override", s, err)
		}
	})
	t.Run("RuleForBuiltinDoesNotAllowThePluginsRead", func(t *testing.T) {
		e := newEnv(t)
		dir := workspace(t, obj{
			"plugins": []obj{withOptions("impostor", obj{"names": []string{"read"}}, obj{"overrides": []string{"read"}})},
			"permission": []obj{
				{"action": "read", "resource": "*", "effect": "allow", "source": "builtin"},
			},
		})
		s, err := settleIn(t, e.activate(t, dir), "read", `{"path":"x"}`)
		if err != nil || s.Outcome != registry.ToolFailed || s.Text() == "plugin read" {
			t.Fatalf("read = %v, %v; want a denial: the rule names the built-in source only", s, err)
		}
	})
	t.Run("RuleForThePluginAllowsIt", func(t *testing.T) {
		e := newEnv(t)
		dir := workspace(t, obj{
			"plugins": []obj{withOptions("impostor", obj{"names": []string{"read"}}, obj{"overrides": []string{"read"}})},
			"permission": []obj{
				{"action": "read", "resource": "*", "effect": "allow", "source": "plugin:impostor"},
			},
		})
		s, err := settleIn(t, e.activate(t, dir), "read", `{"path":"x"}`)
		if err != nil || s.Text() != "plugin read" {
			t.Fatalf("read = %v, %v; want the plugin allowed by its source's rule", s, err)
		}
	})
	t.Run("TwoPluginsCannotShareAName", func(t *testing.T) {
		e := newEnv(t)
		dir := workspace(t, obj{"plugins": []obj{echoPlugin("one"), echoPlugin("two")}})
		// They start in parallel: whichever registers second is refused.
		l := e.activate(t, dir)
		hosttest.UntilChanged(t, l.SourcesChanged, func() bool {
			var refused []error
			for _, st := range l.Sources() {
				if st.Err != nil && st.State != supervise.Running {
					refused = append(refused, st.Err)
				}
			}
			return len(refused) == 1 && strings.Contains(refused[0].Error(), "belongs to plugin")
		})
	})
}

func TestSourceLimitsInLocations(t *testing.T) {
	for _, tt := range []struct {
		name   string
		plugin obj
		want   []string
	}{
		{"257ToolsAreRefusedByDefault", withOptions("many", obj{"count": 255}, nil), []string{"max_tools", "257", "256"}},
		{"ConfiguredMaxTools", withOptions("few", obj{"count": 2}, obj{"max_tools": 3}), []string{"max_tools", "4", "3"}},
		{"ConfiguredMaxSchemaBytes", withOptions("small", nil, obj{"max_schema_bytes": 100}), []string{"max_schema_bytes", "100"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			dir := workspace(t, obj{"plugins": []obj{tt.plugin}})
			err := sourceErr(t, e.activate(t, dir), "plugin:"+tt.plugin["name"].(string)).Err
			t.Log(err)
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("activation error %q does not say %s", err, want)
				}
			}
		})
	}
}

func TestCallTimeout(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "cancelled")
	dir := workspace(t, obj{
		// The plugin is confined: its sandbox block lets it write the marker.
		"plugins":    []obj{withOptions("echo", obj{"marker": marker}, obj{"call_timeout": "300ms", "sandbox": obj{"write": []string{filepath.Dir(marker)}}})},
		"permission": []obj{{"action": "*", "resource": "*", "effect": "allow"}},
	})
	l := e.activate(t, dir)
	s, err := settleIn(t, l, "wait", `{}`)
	if err != nil || s.Outcome != registry.ToolFailed || !strings.Contains(s.Text(), "did not finish within its timeout of 300ms") {
		t.Fatalf("wait = %v, %v; want a model-visible timeout failure", s, err)
	}
	// The plugin sees its call cancelled.
	proctest.Until(t, func() bool { _, err := os.Stat(marker); return err == nil })
	// The plugin still serves after a timed-out call.
	if s, err := settleIn(t, l, "echo", `{"text":"after"}`); err != nil || s.Outcome != registry.Completed {
		t.Fatalf("echo after the timeout = %v, %v", s, err)
	}
}

func TestStorageQuotaInLocation(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, obj{
		"plugins":     []obj{echoPlugin("echo")},
		"permission":  []obj{{"action": "*", "resource": "*", "effect": "allow"}},
		"tool_output": obj{"quota_bytes": 150000},
	})
	l := e.activate(t, dir)
	text, _ := json.Marshal(obj{"text": strings.Repeat("x", 100000)})
	if s, err := settleIn(t, l, "echo", string(text)); err != nil || len(s.ManagedPaths) != 1 {
		t.Fatalf("first call = %v, %v; want its output retained", s, err)
	}
	s, err := settleIn(t, l, "echo", string(text))
	var oerr *registry.OperationalError
	if s != nil || !errors.As(err, &oerr) || !errors.Is(err, registry.ErrQuotaExceeded) || !strings.Contains(err.Error(), "150000") {
		t.Fatalf("second call = %v, %v; want an operational error naming the quota", s, err)
	}
	files, _ := filepath.Glob(filepath.Join(e.reg.Storage().Dir(), "*tool-output-*")) // managed and temporary files, not the lock
	if len(files) != 1 {
		t.Errorf("%d files in managed storage, want 1: the refused retention left a file", len(files))
	}
}

func TestAlwaysApprovalIsPerSource(t *testing.T) {
	e := newEnv(t)
	asker := &recordingAsker{answer: permission.Answer{Reply: permission.Always}}
	e.opts.Asker = asker
	dir := workspace(t, obj{"plugins": []obj{echoPlugin("echo")}})
	l := e.activate(t, dir)
	if s, err := settleIn(t, l, "echo", `{"text":"x"}`); err != nil || s.Outcome != registry.Completed {
		t.Fatal(s, err)
	}
	perm := l.Permission()
	inv := sdk.Invocation{SessionID: "ses2", ToolCallID: "c"}
	asker.answer = permission.Answer{Reply: permission.Reject, Message: "no"} // from now on only the saved approval allows
	if err := perm.AssertToolFrom(t.Context(), "plugin:echo", "echo", inv); err != nil {
		t.Errorf("the approved source: %v", err)
	}
	if err := perm.AssertToolFrom(t.Context(), "mcp:other", "echo", inv); err == nil {
		t.Error("another source's echo was allowed by the approval saved for plugin:echo")
	}
}

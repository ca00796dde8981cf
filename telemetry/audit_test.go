package telemetry_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
	"github.com/toolhost/toolhost/telemetry"
)

// onceAsker is a person who allows every ask once.
type onceAsker struct{}

func (onceAsker) Ask(context.Context, string, permission.Request) (permission.Answer, error) {
	return permission.Answer{Reply: permission.Once}, nil
}

// auditLine is what the tests read of an audit line.
type auditLine struct {
	Event       string  `json:"event"`
	Location    string  `json:"location"`
	Session     string  `json:"session"`
	Agent       string  `json:"agent"`
	Source      string  `json:"source"`
	Tool        string  `json:"tool"`
	Outcome     string  `json:"outcome"`
	DurationMS  float64 `json:"duration_ms"`
	InputBytes  int     `json:"input_bytes"`
	InputSHA256 string  `json:"input_sha256"`
	State       string  `json:"state"`
	Generation  uint64  `json:"generation"`
	Change      string  `json:"change"`
	Permission  []struct {
		Action string `json:"action"`
		Effect string `json:"effect"`
		Rule   *struct {
			Index  int    `json:"index"`
			Effect string `json:"effect"`
		} `json:"rule"`
		Asked   bool   `json:"asked"`
		Reply   string `json:"reply"`
		Allowed bool   `json:"allowed"`
	} `json:"permission"`
}

func readAudit(t *testing.T, dir string) []auditLine {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "secret") {
			t.Errorf("an audit line holds the call's input: %s", sc.Text())
		}
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestAuditTrail settles completed, denied, asked and failed calls, crashes and
// restarts the plugin, and reads back one line for each settlement, with its
// permission decisions, and a line for each source change.
func TestAuditTrail(t *testing.T) {
	auditDir := filepath.Join(t.TempDir(), "audit")
	tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: func(string) string { return "" }, AuditDir: auditDir})
	if err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, tel.Observer())
	if reg == nil || tel.Observer() == nil {
		t.Fatal("an audit trail alone must observe settlements")
	}
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	dir := workspace(t, "", `[{"action": "*", "resource": "*", "effect": "allow"},
		{"action": "denied", "resource": "*", "effect": "deny"},
		{"action": "guarded", "resource": "*", "effect": "ask"}]`)
	loc, err := location.Activate(t.Context(), root, dir, location.Options{
		Registry: reg, StateDir: t.TempDir(), Asker: onceAsker{}, ObservePermission: tel.ObservePermission(),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := tel.Watch(loc)

	settle := func(tool string) *registry.Settlement {
		t.Helper()
		q, err := loc.Prepare(registry.OfferAll()) // the denied tool is called, not offered
		if err != nil {
			t.Fatal(err)
		}
		s, _ := q.Settle(t.Context(), registry.Call{
			Name: tool, Input: []byte(`{"text":"secret"}`),
			Invocation: sdk.Invocation{SessionID: "s1", Agent: "tester", ToolCallID: "call-" + tool},
		})
		return s
	}
	for tool, want := range map[string]registry.Outcome{
		"echo": registry.Completed, "denied": registry.ToolFailed, "guarded": registry.Completed, "fail": registry.ToolFailed,
	} {
		if s := settle(tool); s == nil || s.Outcome != want {
			t.Fatalf("%s settled as %v, want %s", tool, s, want)
		}
	}
	if q, err := loc.Prepare(); err == nil {
		_, _ = q.Settle(t.Context(), registry.Call{Name: "crash", Invocation: sdk.Invocation{SessionID: "s1", ToolCallID: "call-crash"}})
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := loc.RestartSource(ctx, "plugin:test"); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := loc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	st, err := os.Stat(filepath.Join(auditDir, "audit.jsonl"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("audit file: %v, mode %v, want 0600", err, st.Mode().Perm())
	}
	lines := readAudit(t, auditDir)
	settlements := map[string]auditLine{}
	var sources []auditLine
	var configs []string
	for _, l := range lines {
		switch l.Event {
		case "settlement":
			settlements[l.Tool] = l
		case "source":
			if l.Source == "plugin:test" {
				sources = append(sources, l)
			}
		case "config":
			configs = append(configs, l.Change)
		}
		if l.Location != loc.ID() {
			t.Errorf("line for location %q, want %q", l.Location, loc.ID())
		}
	}
	for tool, want := range map[string]string{"echo": "completed", "denied": "tool_failure", "guarded": "completed", "fail": "tool_failure"} {
		l, ok := settlements[tool]
		switch {
		case !ok:
			t.Errorf("no settlement line for %s", tool)
		case l.Outcome != want || l.Source != "plugin:test" || l.Session != "s1" || l.Agent != "tester" ||
			l.InputBytes != len(`{"text":"secret"}`) || len(l.InputSHA256) != 64 || l.DurationMS <= 0:
			t.Errorf("settlement line for %s: %+v", tool, l)
		}
	}
	if c, ok := settlements["crash"]; !ok || c.Outcome == "completed" {
		t.Errorf("crash: %+v", c)
	}
	if p := settlements["denied"].Permission; len(p) != 1 || p[0].Effect != "deny" || p[0].Rule == nil || p[0].Rule.Index != 1 || p[0].Allowed || p[0].Asked {
		t.Errorf("denied's decision: %+v", p)
	}
	if p := settlements["guarded"].Permission; len(p) != 1 || p[0].Effect != "ask" || p[0].Rule == nil || p[0].Rule.Index != 2 ||
		!p[0].Asked || p[0].Reply != "once" || !p[0].Allowed {
		t.Errorf("guarded's decision: %+v", p)
	}
	if p := settlements["echo"].Permission; len(p) != 1 || p[0].Effect != "allow" || p[0].Rule == nil || p[0].Rule.Index != 0 {
		t.Errorf("echo's decision: %+v", p)
	}
	var restarted bool
	for _, s := range sources {
		if s.Generation >= 2 && s.State == string(supervise.Running) {
			restarted = true
		}
	}
	if !restarted {
		t.Errorf("no line for the plugin's new generation; source lines: %+v", sources)
	}
	if len(configs) == 0 || configs[0] != "activated" || configs[len(configs)-1] != "deactivated" {
		t.Errorf("config lines %v, want activated first and deactivated last", configs)
	}
}

// TestNothingWhenOff starts telemetry with no OTEL_* variable and no audit
// directory: nothing observes a settlement, nothing is written.
func TestNothingWhenOff(t *testing.T) {
	state := t.TempDir()
	getenv := func(k string) string {
		if k == "XDG_STATE_HOME" {
			return state
		}
		return ""
	}
	dir, err := telemetry.AuditDir(getenv)
	if err != nil || dir != "" {
		t.Fatalf("AuditDir with TOOLHOST_AUDIT unset: %q, %v", dir, err)
	}
	tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: getenv, AuditDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Observer() != nil || tel.ObservePermission() != nil || tel.Handler() != nil {
		t.Error("telemetry that is off observes")
	}
	reg := newRegistry(t, tel.Observer())
	release, err := reg.Register(registry.Batch{Tools: map[string]sdk.Tool{"echo": sdk.NewTool("echoes",
		func(_ context.Context, _ sdk.Invocation, in struct{}) (string, error) { return "hi", nil })}})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	q, _ := reg.Prepare(registry.Application)
	if s, err := q.Settle(t.Context(), registry.Call{Name: "echo"}); err != nil || s.Outcome != registry.Completed {
		t.Fatal(s, err)
	}
	stop := tel.Watch(nil)
	stop()
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("telemetry that is off wrote %v", entries)
	}
}

// TestAuditConfigChange edits a watched Location's config and reloads it, then
// writes an invalid one: the audit trail has a config line for the change, with
// the size and hash of the config applied (not of the file, which is invalid by
// the time the line is written), between the activation's and the deactivation's,
// and the invalid edit shows as a failed config entry.
func TestAuditConfigChange(t *testing.T) {
	auditDir := filepath.Join(t.TempDir(), "audit")
	tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: func(string) string { return "" }, AuditDir: auditDir})
	if err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, tel.Observer())
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	dir := workspace(t, "", `[{"action": "*", "resource": "*", "effect": "allow"}]`)
	loc, err := location.Activate(t.Context(), root, dir, location.Options{Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	stop := tel.Watch(loc)
	cfgPath := filepath.Join(dir, location.ConfigPath)
	before, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(before), `"effect": "allow"}]`, `"effect": "allow"}, {"action": "echo", "resource": "*", "effect": "deny"}]`, 1)
	if edited == string(before) {
		t.Fatalf("the edit changed nothing in %s", before)
	}
	// Written as editors do, by renaming a whole file into place.
	write := func(data string) {
		t.Helper()
		tmp := cfgPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgPath); err != nil {
			t.Fatal(err)
		}
	}
	write(edited)
	if err := loc.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	write(`{"plugins": [`)
	if err := loc.Reload(t.Context()); err == nil {
		t.Fatal("an invalid config reloaded without an error")
	}
	stop()
	if err := loc.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	type configLine struct {
		Event        string `json:"event"`
		Source       string `json:"source"`
		State        string `json:"state"`
		Change       string `json:"change"`
		ConfigBytes  int    `json:"config_bytes"`
		ConfigSHA256 string `json:"config_sha256"`
	}
	f, err := os.Open(filepath.Join(auditDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var changes []configLine
	failed := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l configLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		switch {
		case l.Event == "config":
			changes = append(changes, l)
		case l.Event == "source" && l.Source == location.KindConfig && l.State == string(supervise.Failed):
			failed = true
		}
	}
	if len(changes) != 3 || changes[0].Change != "activated" || changes[1].Change != "changed" || changes[2].Change != "deactivated" {
		t.Fatalf("config lines %+v, want activated, changed, deactivated", changes)
	}
	applied, err := location.ParseConfig(dir, "", []byte(edited))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := json.Marshal(applied)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(enc)
	if c := changes[1]; c.ConfigBytes != len(enc) || c.ConfigSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("the change's line %+v, want the size and SHA-256 of the edited config's encoding (%d bytes)", c, len(enc))
	}
	if changes[0].ConfigSHA256 == changes[1].ConfigSHA256 {
		t.Error("the activation's and the change's lines have the same hash")
	}
	if !failed {
		t.Error("no failed config entry for the invalid edit")
	}
}

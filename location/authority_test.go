package location_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

var (
	hostileOnce sync.Once
	hostileBin  string
	hostileErr  error
)

func buildHostile(t *testing.T) string {
	t.Helper()
	hostileOnce.Do(func() {
		src, _ := filepath.Abs(filepath.Join("testdata", "plugins", "hostile"))
		hostileBin, _, hostileErr = location.BuildPlugin(context.Background(), buildCache, "hostile", src)
	})
	if hostileErr != nil {
		t.Fatal(hostileErr)
	}
	return hostileBin
}

type probeReport struct {
	ServicesGiven bool              `json:"services_given"`
	GuessedIDs    map[string]string `json:"guessed_ids"`
	CloseForeign  string            `json:"close_foreign"`
	Foreign       map[string]string `json:"foreign"`
	ReadInside    string            `json:"read_inside"`
	ReadOutside   string            `json:"read_outside"`
}

func probe(t *testing.T, l *location.Location) probeReport {
	t.Helper()
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	s, err := q.Settle(t.Context(), registry.Call{Name: "probe", Invocation: sdk.Invocation{ToolCallID: "c"}})
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("probe: %v %v", s, err)
	}
	var r probeReport
	if err := json.Unmarshal(s.Structured, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// sockets lists every unix socket under dir.
func sockets(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSocket != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestUntrustedPluginReachesOnlyItsCapability(t *testing.T) {
	bin := buildHostile(t)
	e := newEnv(t)

	// Location A trusts the plugin; its sockets are the target of B's attack.
	// Location A trusts the hostile plugin and also runs an sdk plugin, whose own
	// server socket B tries to call directly.
	dirA := workspace(t, obj{"plugins": []obj{{"name": "hostile", "path": bin, "trusted": true}, echoPlugin("echo")}, "permission": allowAll})
	os.WriteFile(filepath.Join(dirA, "secret.txt"), []byte("secret of A"), 0o600)
	optsA := e.opts
	optsA.SocketDir = t.TempDir()
	la, err := location.Activate(t.Context(), e.root, dirA, optsA)
	if err != nil {
		t.Fatal(err)
	}
	foreign := sockets(t, optsA.SocketDir)
	if len(foreign) == 0 {
		t.Fatal("found no sockets of Location A to attack")
	}

	dirB := workspace(t, obj{"plugins": []obj{{"name": "hostile", "path": bin, "options": obj{"foreign": foreign}}}, "permission": allowAll})
	os.WriteFile(filepath.Join(dirB, "secret.txt"), []byte("secret of B"), 0o600)
	lb := e.activate(t, dirB)

	t.Run("UntrustedGetsNoServices", func(t *testing.T) {
		r := probe(t, lb)
		if r.ServicesGiven {
			t.Fatal("an untrusted plugin was given the Location services")
		}
		if len(r.GuessedIDs) == 0 {
			t.Fatal("the probe guessed no broker ids")
		}
		for id, result := range r.GuessedIDs {
			if strings.Contains(result, "SUCCEEDED") {
				t.Errorf("guessed broker id %s: %s", id, result)
			}
		}
		if !strings.HasPrefix(r.CloseForeign, "refused") {
			t.Errorf("closing a registration it does not own: %s", r.CloseForeign)
		}
		if len(r.Foreign) != len(foreign) {
			t.Fatalf("attacked %d of %d foreign sockets", len(r.Foreign), len(foreign))
		}
		for addr, result := range r.Foreign {
			if strings.Contains(result, "SUCCEEDED") {
				t.Errorf("another Location's socket %s: %s", addr, result)
			}
		}
	})
	t.Run("TrustedGetsExactlyTheServices", func(t *testing.T) {
		r := probe(t, la)
		if !r.ServicesGiven || r.ReadInside != "secret of A" {
			t.Fatalf("trusted plugin: services %v, read %q", r.ServicesGiven, r.ReadInside)
		}
		if !strings.HasPrefix(r.ReadOutside, "refused") {
			t.Fatalf("trusted plugin read outside its root: %s", r.ReadOutside)
		}
	})
	t.Run("HostKeepsWorking", func(t *testing.T) {
		probe(t, lb)
	})
	t.Run("NoRegistrationSurvivesTheScope", func(t *testing.T) {
		// Each probe left the plugin registering a tool every 10ms.
		if err := lb.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := e.reg.Prepare(lb.ID()); !errors.Is(err, registry.ErrLocationNotOpen) {
			t.Fatalf("closed Location still has a placement: %v", err)
		}
		q, _ := e.reg.Prepare(registry.Application)
		for _, d := range q.Definitions() {
			t.Errorf("a registration leaked into the application placement: %s", d.Name)
		}
	})
}

// recordingAsker answers every ask with a fixed answer and records the requests.
type recordingAsker struct {
	mu     sync.Mutex
	asked  []permission.Request
	answer permission.Answer
}

func (a *recordingAsker) Ask(_ context.Context, _ string, req permission.Request) (permission.Answer, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, req)
	return a.answer, nil
}

func TestHostAssertsPermissionForUntrustedPlugins(t *testing.T) {
	inv := sdk.Invocation{SessionID: "ses", Agent: "build", AssistantMessageID: "msg", ToolCallID: "call"}
	settle := func(t *testing.T, l *location.Location) (*registry.Settlement, error) {
		// A Request that offers every tool: the deny rule hides echo by default, and
		// what is checked here is the host's assertion when it is called anyway.
		q, _ := l.Prepare(registry.OfferAll())
		return q.Settle(t.Context(), registry.Call{Name: "echo", Input: json.RawMessage(`{"text":"x"}`), Invocation: inv})
	}
	t.Run("DenyRuleIsAModelVisibleFailure", func(t *testing.T) {
		e := newEnv(t)
		dir := workspace(t, obj{"plugins": []obj{echoPlugin("echo")}, "permission": []obj{{"action": "echo", "resource": "*", "effect": "deny"}}})
		s, err := settle(t, e.activate(t, dir))
		if err != nil || s.Outcome != registry.ToolFailed || !strings.Contains(s.Text(), "echo") {
			t.Fatalf("settle = %v, %v; want a tool failure naming the action", s, err)
		}
	})
	t.Run("NobodyToAskIsADenyWhoseHintSaysHowToAllow", func(t *testing.T) {
		e := newEnv(t)
		dir := workspace(t, obj{"plugins": []obj{echoPlugin("echo")}})
		s, err := settle(t, e.activate(t, dir))
		if err != nil || s.Outcome != registry.ToolFailed || !strings.Contains(s.Hint, location.ConfigPath) {
			t.Fatalf("settle = %v, %v; want a tool failure whose runner hint points at the config", s, err)
		}
		if strings.Contains(s.Text(), location.ConfigPath) {
			t.Errorf("the model sees %q, which points at the config", s.Text())
		}
	})
	t.Run("AskCarriesTheToolNameAndTheInvocation", func(t *testing.T) {
		e := newEnv(t)
		asker := &recordingAsker{answer: permission.Answer{Reply: permission.Once}}
		e.opts.Asker = asker
		dir := workspace(t, obj{"plugins": []obj{echoPlugin("echo")}})
		s, err := settle(t, e.activate(t, dir))
		if err != nil || s.Outcome != registry.Completed {
			t.Fatalf("settle = %v, %v", s, err)
		}
		want := permission.Request{SessionID: "ses", Agent: "build", Action: "echo", Resources: []string{"*"}, Save: []string{"*"},
			Source: permission.Source{Type: "tool", Tool: "echo", MessageID: "msg", CallID: "call", ToolSource: "plugin:echo"}}
		if len(asker.asked) != 1 || !equalRequest(asker.asked[0], want) {
			t.Fatalf("asked %+v, want %+v", asker.asked, want)
		}
	})
	t.Run("RejectWithoutMessageIsADecline", func(t *testing.T) {
		e := newEnv(t)
		e.opts.Asker = &recordingAsker{answer: permission.Answer{Reply: permission.Reject}}
		dir := workspace(t, obj{"plugins": []obj{echoPlugin("echo")}})
		s, err := settle(t, e.activate(t, dir))
		if s != nil || !errors.Is(err, context.Canceled) || !errors.Is(err, permission.ErrDeclined) {
			t.Fatalf("settle = %v, %v; want an interruption-like decline", s, err)
		}
	})
	t.Run("RejectWithMessageCarriesTheFeedback", func(t *testing.T) {
		e := newEnv(t)
		e.opts.Asker = &recordingAsker{answer: permission.Answer{Reply: permission.Reject, Message: "use the staging server"}}
		dir := workspace(t, obj{"plugins": []obj{echoPlugin("echo")}})
		s, err := settle(t, e.activate(t, dir))
		if err != nil || s.Outcome != registry.ToolFailed || !strings.Contains(s.Text(), "use the staging server") {
			t.Fatalf("settle = %v, %v", s, err)
		}
	})
	t.Run("AlwaysSurvivesARestart", func(t *testing.T) {
		e := newEnv(t)
		asker := &recordingAsker{answer: permission.Answer{Reply: permission.Always}}
		e.opts.Asker = asker
		dir := workspace(t, obj{"plugins": []obj{echoPlugin("echo")}})
		l := e.activate(t, dir)
		if s, err := settle(t, l); err != nil || s.Outcome != registry.Completed {
			t.Fatal(s, err)
		}
		l.Close(context.Background())
		e.opts.Asker = nil // nobody to ask now: only the saved approval can allow it
		if s, err := settle(t, e.activate(t, dir)); err != nil || s.Outcome != registry.Completed {
			t.Fatalf("after restart: %v %v; want the saved approval to hold", s, err)
		}
	})
}

func equalRequest(a, b permission.Request) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/plugintest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func workspace(t *testing.T) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "src"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "a.go"), []byte("package a\n\n// TODO: handle errors\nfunc A() {}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# x\nTODO: write docs\n"), 0o644)
	return dir
}

func TestScanThroughTheLocationServices(t *testing.T) {
	bin := plugintest.Build(t, ".")
	h := plugintest.Start(t, bin, plugintest.Options{Trusted: true, Directory: workspace(t)})

	s, err := h.Call(t.Context(), "todo_scan", map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.Completed || !strings.HasPrefix(s.Text(), "2 TODOs") ||
		!strings.Contains(s.Text(), "src/a.go:3: // TODO: handle errors") {
		t.Fatalf("todo_scan: %s %q", s.Outcome, s.Text())
	}
	s, err = h.Call(t.Context(), "todo_scan", map[string]string{"path": "../../etc"})
	if err != nil || s.Outcome != registry.ToolFailed {
		t.Fatalf("a path outside the workspace: %v %v, want a tool failure", s, err)
	}
}

// asker records the permission requests the plugin formulates.
type asker struct{ asked []permission.Request }

func (a *asker) Ask(_ context.Context, _ string, req permission.Request) (permission.Answer, error) {
	a.asked = append(a.asked, req)
	return permission.Answer{Reply: permission.Reject, Message: "not now"}, nil
}

func TestFormulatesItsOwnPermissionRequest(t *testing.T) {
	a := &asker{}
	h := plugintest.Start(t, plugintest.Build(t, "."), plugintest.Options{
		Trusted: true, Directory: workspace(t),
		Permission: []permission.Rule{{Action: "*", Resource: "*", Effect: permission.Ask}},
		Asker:      a,
	})
	inv := sdk.Invocation{SessionID: "ses", Agent: "build", AssistantMessageID: "msg", ToolCallID: "call"}
	s, err := h.Settle(t.Context(), registry.Call{Name: "todo_scan", Input: []byte(`{"path":"src"}`), Invocation: inv})
	if err != nil || s.Outcome != registry.ToolFailed || !strings.Contains(s.Text(), "not now") {
		t.Fatalf("rejected with a message: %v %v, want a tool failure carrying it", s, err)
	}
	if len(a.asked) != 1 {
		t.Fatalf("asked %d times", len(a.asked))
	}
	got := a.asked[0]
	if got.Action != "todo_scan" || strings.Join(got.Resources, ",") != "src" || strings.Join(got.Save, ",") != "src/*" ||
		got.SessionID != "ses" || got.Source.CallID != "call" || got.Source.MessageID != "msg" {
		t.Fatalf("request %+v", got)
	}
}

func TestRefusesToRunUntrusted(t *testing.T) {
	bin := plugintest.Build(t, ".")
	tb := &fatalRecorder{TB: t}
	func() {
		defer func() { recover() }()
		plugintest.Start(tb, bin, plugintest.Options{})
	}()
	if !strings.Contains(tb.msg, "trusted") {
		t.Fatalf("untrusted start: %q, want an error saying it needs to be trusted", tb.msg)
	}
}

type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f.msg)
}

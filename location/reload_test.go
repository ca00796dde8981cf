package location_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// settle calls tool with input on a fresh Request of l.
func settle(t *testing.T, l *location.Location, tool string, input any) (*registry.Settlement, error) {
	q, err := l.Prepare()
	if err != nil {
		return &registry.Settlement{}, err
	}
	in, _ := json.Marshal(input)
	return q.Settle(t.Context(), registry.Call{Name: tool, Input: in, Invocation: sdk.Invocation{ToolCallID: "call_1"}})
}

func toolNames(t *testing.T, l *location.Location) []string {
	t.Helper()
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	return names(q.Definitions())
}

func sourceState(l *location.Location, id string) (location.SourceStatus, bool) {
	for _, s := range l.Sources() {
		if s.ID == id {
			return s, true
		}
	}
	return location.SourceStatus{}, false
}

// TestReloadUnderLoad edits the config of an active Location while calls to its
// plugin run without pause: an MCP server and a manifest tool are added, the
// plugin is changed (replaced by its next generation), the manifest tool and the
// server are removed, an invalid edit changes nothing and shows as the config
// entry of Sources until its fix applies, and a new deny holds at once. No call
// fails; no process is left.
func TestReloadUnderLoad(t *testing.T) {
	url := pingServer(t, "tok")
	e := newEnv(t)
	plugin := obj{"name": "echo", "path": echoBin, "options": obj{"names": []string{"first"}}}
	cfg := obj{"plugins": []obj{plugin}, "permission": allowAll}
	dir := workspace(t, cfg)
	l := e.activate(t, dir)
	defer func() {
		if err := l.Close(t.Context()); err != nil {
			t.Error(err)
		}
		if pids := proctest.Children(echoBin); len(pids) > 0 {
			t.Errorf("plugin processes left: %v", pids)
		}
	}()
	reload := func(cfg any) error {
		t.Helper()
		setConfig(t, dir, cfg)
		return l.Reload(t.Context())
	}
	firstPID := callEcho(t, l, "before").PID

	var calls, failed atomic.Int64
	var failure atomic.Value
	stop := make(chan struct{})
	var load sync.WaitGroup
	for range 4 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s, err := settle(t, l, "echo", obj{"text": "load"})
				calls.Add(1)
				if err != nil || s == nil || s.Outcome != registry.Completed {
					failed.Add(1)
					failure.Store(strings.TrimSpace(settlementText(s) + " " + errString(err)))
				}
			}
		})
	}

	// Added: an MCP server and a manifest tool.
	tool := obj{"name": "shout", "description": "Repeats the input.", "command": []string{"/bin/cat"}}
	cfg = obj{"plugins": []obj{plugin}, "permission": allowAll, "tools": []obj{tool},
		"mcp_servers": []obj{{"name": "remote", "url": url, "headers": obj{"Authorization": "Bearer tok"}}}}
	if err := reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := toolNames(t, l); !slices.Contains(got, "remote_ping") || !slices.Contains(got, "shout") || !slices.Contains(got, "first") {
		t.Fatalf("tools after adding: %v", got)
	}
	if s, err := settle(t, l, "remote_ping", obj{}); err != nil || s.Outcome != registry.Completed {
		t.Errorf("remote_ping: %v %s", err, s.Text())
	}

	// Changed: the plugin's options; its next generation serves the new tool.
	plugin = obj{"name": "echo", "path": echoBin, "options": obj{"names": []string{"second"}}}
	cfg["plugins"] = []obj{plugin}
	if err := reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := toolNames(t, l); !slices.Contains(got, "second") || slices.Contains(got, "first") {
		t.Errorf("tools after changing the plugin: %v", got)
	}
	if pid := callEcho(t, l, "after").PID; pid == firstPID {
		t.Errorf("the changed plugin still runs in its first process %d", pid)
	}

	// Invalid: nothing changes, the error names file and pointer, until fixed.
	bad := obj{"plugins": []obj{plugin}, "permission": allowAll, "mcp_servers": []obj{{"name": "remote", "url": url, "timeout": "soon"}}}
	err := reload(bad)
	var cerr *location.ConfigError
	if !errors.As(err, &cerr) {
		t.Fatalf("invalid edit: %v, want a *ConfigError", err)
	}
	st, ok := sourceState(l, location.KindConfig)
	if !ok || st.State != supervise.Failed || !strings.Contains(st.Err.Error(), filepath.Join(dir, location.ConfigPath)) || !strings.Contains(st.Err.Error(), "/mcp_servers/0/timeout") {
		t.Errorf("config entry after an invalid edit: %+v", st)
	}
	if got := toolNames(t, l); !slices.Contains(got, "remote_ping") || !slices.Contains(got, "shout") {
		t.Errorf("an invalid edit changed the tools: %v", got)
	}

	// Removed: the manifest tool and the server (the fix of the invalid edit).
	cfg = obj{"plugins": []obj{plugin}, "permission": allowAll}
	if err := reload(cfg); err != nil {
		t.Fatal(err)
	}
	if _, ok := sourceState(l, location.KindConfig); ok {
		t.Error("the config entry stays after the fix applied")
	}
	if got := toolNames(t, l); slices.Contains(got, "remote_ping") || slices.Contains(got, "shout") || !slices.Contains(got, "echo") {
		t.Errorf("tools after removing: %v", got)
	}
	if _, ok := sourceState(l, "mcp:remote"); ok {
		t.Error("the removed server is still a source")
	}

	close(stop)
	load.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d calls under load failed; one: %v", n, calls.Load(), failure.Load())
	}

	// A new deny is in force for the next call: a Request prepared before the
	// reload still offers echo and its call is denied; a new one does not offer it.
	before, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	cfg["permission"] = append(slices.Clone(allowAll), obj{"action": "echo", "resource": "*", "effect": "deny"})
	if err := reload(cfg); err != nil {
		t.Fatal(err)
	}
	s, err := before.Settle(t.Context(), registry.Call{Name: "echo", Input: json.RawMessage(`{"text":"denied?"}`), Invocation: sdk.Invocation{ToolCallID: "call_1"}})
	if err != nil || s.Outcome != registry.ToolFailed || !strings.Contains(s.Text(), "denied") {
		t.Errorf("echo after a deny, on a Request prepared before: %v %s", err, settlementText(s))
	}
	if s, err := settle(t, l, "echo", obj{"text": "denied?"}); err != nil || s.Outcome != registry.Unknown {
		t.Errorf("echo after a deny, on a new Request: %v %s, want it not offered", err, settlementText(s))
	}
}

// TestWatchConfigRename: with WatchConfig, a config file replaced by a rename (as
// editors save) is applied: the new deny holds (the tool is no longer offered)
// once SourcesChanged reports it.
func TestWatchConfigRename(t *testing.T) {
	e := newEnv(t)
	e.opts.WatchConfig = true
	dir := workspace(t, pluginsConfig(echoPlugin("echo")))
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	callEcho(t, l, "allowed")

	changed := l.SourcesChanged()
	data, _ := json.Marshal(obj{"plugins": []obj{echoPlugin("echo")},
		"permission": append(slices.Clone(allowAll), obj{"action": "echo", "resource": "*", "effect": "deny"})})
	tmp := filepath.Join(dir, ".toolhost", ".config.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, location.ConfigPath)); err != nil {
		t.Fatal(err)
	}
	for {
		if s, _ := settle(t, l, "echo", obj{"text": "x"}); s != nil && s.Outcome == registry.Unknown { // denied for every resource: not offered
			break
		}
		select {
		case <-changed:
			changed = l.SourcesChanged()
		case <-t.Context().Done():
			t.Fatal("the renamed config was not applied")
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func settlementText(s *registry.Settlement) string {
	if s == nil {
		return ""
	}
	return string(s.Outcome) + ": " + s.Text()
}

// BenchmarkConfigRenameToRule measures the time from renaming an edited config
// into place to its new rule being in force (the next call denied, then allowed
// again), with the watcher's debounce (50 ms) included. It reports the median.
func BenchmarkConfigRenameToRule(b *testing.B) {
	st, err := registry.OpenStorage(b.TempDir(), registry.StorageOptions{})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := registry.New(registry.Options{Storage: st})
	if err != nil {
		b.Fatal(err)
	}
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	dir := canonicalDir(b, b.TempDir())
	write := func(deny bool) {
		rules := slices.Clone(allowAll)
		if deny {
			rules = append(rules, obj{"action": "echo", "resource": "*", "effect": "deny"})
		}
		data, _ := json.Marshal(obj{"plugins": []obj{echoPlugin("echo")}, "permission": rules})
		tmp := filepath.Join(dir, ".toolhost", ".config.json.tmp")
		os.MkdirAll(filepath.Dir(tmp), 0o755)
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, location.ConfigPath)); err != nil {
			b.Fatal(err)
		}
	}
	write(false)
	l, err := location.Activate(b.Context(), root, dir, location.Options{Registry: reg, BuildCache: buildCache, Env: []string{}, StateDir: b.TempDir(), WatchConfig: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	denied := func() bool {
		q, err := l.Prepare()
		if err != nil {
			b.Fatal(err)
		}
		s, err := q.Settle(b.Context(), registry.Call{Name: "echo", Input: json.RawMessage(`{"text":"x"}`), Invocation: sdk.Invocation{ToolCallID: "c"}})
		if err != nil {
			b.Fatal(err)
		}
		return s.Outcome == registry.Unknown // denied for every resource: not offered
	}
	var times []time.Duration
	deny := false
	for b.Loop() {
		deny = !deny
		changed := l.SourcesChanged()
		start := time.Now()
		write(deny)
		for denied() != deny {
			<-changed
			changed = l.SourcesChanged()
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds()), "rename-to-rule-p50-ns")
}

// TestWatchConfigToolOutput: a tool_output edit renamed into place holds for the
// Requests prepared after it is read, while a Request prepared before keeps the
// limits it was prepared with: the built-in read of a 100-line file shows at most
// 10 lines on the Request prepared before the edit and 40 on one prepared after.
func TestWatchConfigToolOutput(t *testing.T) {
	e := newEnv(t)
	e.opts.WatchConfig = true
	cfg := func(lines int) obj {
		return obj{"permission": allowAll, "tool_output": obj{"max_lines": lines}}
	}
	dir := workspace(t, cfg(10))
	var text strings.Builder
	for i := range 100 {
		fmt.Fprintf(&text, "line %d\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "long.txt"), []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	read := func(q *registry.Request) int {
		t.Helper()
		s, err := q.Settle(t.Context(), registry.Call{Name: "read", Input: json.RawMessage(`{"path":"long.txt"}`), Invocation: sdk.Invocation{ToolCallID: "call_1"}})
		if err != nil || s.Outcome != registry.Completed {
			t.Fatalf("read: %v %s", err, settlementText(s))
		}
		return strings.Count(s.Text(), "line ")
	}
	before, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if n := read(before); n > 10 {
		t.Fatalf("read shows %d lines of the file under max_lines 10", n)
	}

	changed := l.SourcesChanged()
	data, _ := json.Marshal(cfg(40))
	tmp := filepath.Join(dir, ".toolhost", ".config.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, location.ConfigPath)); err != nil {
		t.Fatal(err)
	}
	for l.Config().ToolOutput.MaxLines != 40 {
		select {
		case <-changed:
			changed = l.SourcesChanged()
		case <-t.Context().Done():
			t.Fatal("the renamed config was not applied")
		}
	}
	if n := read(before); n > 10 {
		t.Errorf("the Request prepared before the edit shows %d lines, want its limit of 10 kept", n)
	}
	after, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if n := read(after); n <= 10 || n > 40 {
		t.Errorf("a Request prepared after the edit shows %d lines, want more than 10, at most 40", n)
	}
}

//go:build unix

package location_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/manifest"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/supervise"
)

// writeManifest writes the manifest tool file name.json of dir as editors save:
// a temporary file renamed into place.
func writeManifest(t *testing.T, dir, name string, tool obj) {
	t.Helper()
	if err := saveManifest(dir, name, tool); err != nil {
		t.Fatal(err)
	}
}

func saveManifest(dir, name string, tool obj) error {
	data, err := json.Marshal(tool)
	if err != nil {
		return err
	}
	tools := filepath.Join(dir, filepath.FromSlash(manifest.Dir))
	if err := os.MkdirAll(tools, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(tools, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(tools, name+".json"))
}

// TestReloadReplacesManifestToolDraining: a manifest tool's file is edited while a
// call of it runs. The reload does not wait for the call; the next call runs the
// new command, and the call in flight completes on the old one.
func TestReloadReplacesManifestToolDraining(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, obj{"permission": allowAll})
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	tool := func(command string) obj {
		return obj{"name": "slow", "description": "Answers once let through.", "command": []string{"/bin/sh", "-c", command}}
	}
	writeManifest(t, dir, "slow", tool(`read line < gate; echo "old $line"`))
	l := e.activate(t, dir)
	defer l.Close(t.Context())

	type result struct {
		s   *registry.Settlement
		err error
	}
	inFlight := make(chan result, 1)
	go func() {
		s, err := settle(t, l, "slow", obj{})
		inFlight <- result{s, err}
	}()
	// Opening the fifo for writing returns once the old command has opened it.
	w, err := os.OpenFile(gate, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	writeManifest(t, dir, "slow", tool(`echo new`))
	if err := l.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, err := settle(t, l, "slow", obj{}); err != nil || s.Outcome != registry.Completed || strings.TrimSpace(s.Text()) != "new" {
		t.Errorf("the call after the edit: %v %s, want the new command's %q", err, settlementText(s), "new")
	}
	if _, err := w.WriteString("through\n"); err != nil {
		t.Fatalf("the call in flight no longer reads its input: %v", err)
	}
	w.Close()
	r := <-inFlight
	if r.err != nil || r.s.Outcome != registry.Completed || strings.TrimSpace(r.s.Text()) != "old through" {
		t.Errorf("the call in flight during the edit: %v %s, want it completed by the old command", r.err, settlementText(r.s))
	}
	if st, _ := sourceState(l, "manifest:slow"); st.State != supervise.Running || st.Err != nil {
		t.Errorf("manifest:slow after the edit: %s %v", st.State, st.Err)
	}
}

// TestReloadManifestToolKeepsServingUntilFixed: an edit that gives a manifest tool
// a command that cannot run leaves the old definition serving, with the error shown;
// the same file saved again once the command exists is applied.
func TestReloadManifestToolKeepsServingUntilFixed(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, obj{"permission": allowAll})
	writeManifest(t, dir, "say", obj{"name": "say", "description": "Says which.", "command": []string{"/bin/echo", "first"}})
	l := e.activate(t, dir)
	defer l.Close(t.Context())

	script := filepath.Join(dir, "second.sh")
	writeManifest(t, dir, "say", obj{"name": "say", "description": "Says which.", "command": []string{script}})
	if err := l.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	st, _ := sourceState(l, "manifest:say")
	if st.State != supervise.Running || st.Err == nil || !strings.Contains(st.Err.Error(), "second.sh") || !strings.Contains(st.Err.Error(), "not applied") {
		t.Errorf("manifest:say after an edit to a missing command: %s %v, want Running with the error", st.State, st.Err)
	}
	if s, err := settle(t, l, "say", obj{}); err != nil || strings.TrimSpace(s.Text()) != "first" {
		t.Errorf("say after a failed edit: %v %s, want the old command's %q", err, settlementText(s), "first")
	}

	if err := os.WriteFile(script, []byte("#!/bin/sh\necho second\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, dir, "say", obj{"name": "say", "description": "Says which.", "command": []string{script}})
	if err := l.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st, _ := sourceState(l, "manifest:say"); st.State != supervise.Running || st.Err != nil {
		t.Errorf("manifest:say once its command exists: %s %v", st.State, st.Err)
	}
	if s, err := settle(t, l, "say", obj{}); err != nil || strings.TrimSpace(s.Text()) != "second" {
		t.Errorf("say after the same file saved again: %v %s, want the new command's %q", err, settlementText(s), "second")
	}
}

// TestReloadRetriesFailedReplace: a plugin edit whose generation cannot start
// leaves the old generation serving with its config, the error shown; the same
// config saved again is tried again (and applies once it can start); an edit back
// to the serving config clears the error; a fixed edit applies.
func TestReloadRetriesFailedReplace(t *testing.T) {
	e := newEnv(t)
	plugin := func(path string, tool string) obj {
		return obj{"name": "echo", "path": path, "options": obj{"names": []string{tool}}}
	}
	dir := workspace(t, pluginsConfig(plugin(echoBin, "first")))
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	reload := func(p obj) {
		t.Helper()
		setConfig(t, dir, pluginsConfig(p))
		if err := l.Reload(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	check := func(step string, gen uint64, tool string, wantErr string) {
		t.Helper()
		st, _ := sourceState(l, "plugin:echo")
		switch {
		case st.State != supervise.Running || st.Generation != gen:
			t.Errorf("%s: plugin:echo %s generation %d, want running generation %d", step, st.State, st.Generation, gen)
		case wantErr == "" && st.Err != nil:
			t.Errorf("%s: plugin:echo shows the error %v", step, st.Err)
		case wantErr != "" && (st.Err == nil || !strings.Contains(st.Err.Error(), wantErr) || !strings.Contains(st.Err.Error(), "not applied")):
			t.Errorf("%s: plugin:echo shows the error %v, want one naming %q and saying the edit is not applied", step, st.Err, wantErr)
		}
		if got := toolNames(t, l); !slices.Contains(got, tool) {
			t.Errorf("%s: tools %v, want %q served", step, got, tool)
		}
	}

	later := filepath.Join(t.TempDir(), "echo-later")
	reload(plugin(later, "second"))
	check("a plugin edit that cannot start", 1, "first", "echo-later")
	reload(plugin(later, "second"))
	check("the same saved again", 1, "first", "echo-later")

	data, err := os.ReadFile(echoBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(later, data, 0o755); err != nil {
		t.Fatal(err)
	}
	reload(plugin(later, "second"))
	check("the same saved again once it can start", 2, "second", "")

	reload(plugin(filepath.Join(t.TempDir(), "missing"), "third"))
	check("another edit that cannot start", 2, "second", "missing")
	reload(plugin(later, "second"))
	check("an edit back to the serving config", 2, "second", "")

	reload(plugin(echoBin, "fourth"))
	check("a fixed edit", 3, "fourth", "")
}

// TestReloadWorkspaceIDReachesPlugins: a workspace_id edit reaches the running
// plugin (by its next generation) and a plugin added by the same edit.
func TestReloadWorkspaceIDReachesPlugins(t *testing.T) {
	e := newEnv(t)
	cfg := func(id string, ps ...obj) obj {
		c := pluginsConfig(ps...)
		c["workspace_id"] = id
		return c
	}
	dir := workspace(t, cfg("ws-1", echoPlugin("echo")))
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	if got := callEcho(t, l, "x").Workspace; got != "ws-1" {
		t.Fatalf("workspace id at activation: %q", got)
	}

	setConfig(t, dir, cfg("ws-2", echoPlugin("echo"), obj{"name": "added", "path": echoBin, "options": obj{"names": []string{"added_tool"}}}))
	if err := l.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := callEcho(t, l, "x").Workspace; got != "ws-2" {
		t.Errorf("the running plugin's workspace id after the edit: %q, want %q", got, "ws-2")
	}
	for _, p := range l.Plugins() {
		if id := p.Config().WorkspaceID; id != "ws-2" {
			t.Errorf("plugin %s serves workspace id %q, want %q", p.Name(), id, "ws-2")
		}
	}
	if st, _ := sourceState(l, "plugin:echo"); st.Generation != 2 {
		t.Errorf("plugin:echo is in generation %d, want 2 (replaced once)", st.Generation)
	}
}

// TestWatchConfigRenameStorm: while a manifest tool file is saved again and again
// without a pause as long as the debounce, a permission edit to the config is still
// applied (the storm holds a reload back only so long).
func TestWatchConfigRenameStorm(t *testing.T) {
	e := newEnv(t)
	e.opts.WatchConfig = true
	dir := workspace(t, pluginsConfig(echoPlugin("echo")))
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	callEcho(t, l, "allowed")

	stop := make(chan struct{})
	var storm sync.WaitGroup
	defer storm.Wait()
	defer close(stop)
	storm.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := saveManifest(dir, "noise", obj{"name": "noise", "description": fmt.Sprintf("Save %d.", i), "command": []string{"/bin/true"}}); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond) // a pace, far below the debounce
		}
	})

	changed := l.SourcesChanged()
	setConfig(t, dir, obj{"plugins": []obj{echoPlugin("echo")},
		"permission": append(slices.Clone(allowAll), obj{"action": "echo", "resource": "*", "effect": "deny"})})
	for {
		if s, _ := settle(t, l, "echo", obj{"text": "x"}); s != nil && s.Outcome == registry.Unknown { // denied: not offered
			break
		}
		select {
		case <-changed:
			changed = l.SourcesChanged()
		case <-t.Context().Done():
			t.Fatal("the config edit was not applied during the storm")
		}
	}
}

// TestWatchConfigEditDuringReload: an edit saved while a reload is still replacing
// a plugin (its next generation blocked in its start) has its deny in force at
// once, while the old generation serves, and its sources applied after that reload.
func TestWatchConfigEditDuringReload(t *testing.T) {
	e := newEnv(t)
	e.opts.WatchConfig = true
	dir := workspace(t, pluginsConfig(obj{"name": "echo", "path": echoBin, "options": obj{"names": []string{"first"}}}))
	gate := filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	// The next generation's binary waits for the test to open the gate, then runs echo.
	slow := filepath.Join(dir, "slow-echo")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nread line < "+gate+"\nexec "+echoBin+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	save := func(cfg obj) {
		t.Helper()
		data, _ := json.Marshal(cfg)
		tmp := filepath.Join(dir, ".toolhost", ".config.json.tmp")
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, location.ConfigPath)); err != nil {
			t.Fatal(err)
		}
	}

	// Its start waits at the gate for as long as the test needs (no start timeout
	// ends the reload before the deny is checked).
	second := obj{"name": "echo", "path": slow, "trusted": true, "start_timeout": "1h", "options": obj{"names": []string{"second"}}}
	save(pluginsConfig(second))
	w, err := os.OpenFile(gate, os.O_WRONLY, 0) // returns once the next generation waits at the gate
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if s, err := settle(t, l, "first", obj{}); err != nil || s.Outcome != registry.Completed {
		t.Errorf("first during the reload: %v %s, want the old generation serving", err, settlementText(s))
	}
	save(obj{"plugins": []obj{second}, "permission": append(slices.Clone(allowAll), obj{"action": "first", "resource": "*", "effect": "deny"})})
	// The deny holds while the next generation is still held at the gate.
	proctest.Until(t, func() bool {
		s, err := settle(t, l, "first", obj{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Outcome == registry.Unknown // denied: not offered
	})
	if _, err := w.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()

	for changed := l.SourcesChanged(); ; changed = l.SourcesChanged() {
		got := toolNames(t, l)
		if slices.Contains(got, "second") && !slices.Contains(got, "first") {
			break
		}
		select {
		case <-changed:
		case <-t.Context().Done():
			t.Fatalf("tools %v: want the reloaded plugin's second and the edit's deny of first", got)
		}
	}
}

// TestReloadRemovesManifestToolRestartedByHand: a manifest tool that could not run
// at activation and was restarted by hand once its command existed goes away when
// it is removed from the config.
func TestReloadRemovesManifestToolRestartedByHand(t *testing.T) {
	e := newEnv(t)
	dir := workspace(t, obj{"permission": allowAll})
	script := filepath.Join(dir, "late.sh")
	writeManifest(t, dir, "late", obj{"name": "late", "description": "Comes late.", "command": []string{script}})
	l := e.activate(t, dir)
	defer l.Close(t.Context())
	if st, _ := sourceState(l, "manifest:late"); st.State != supervise.Failed {
		t.Fatalf("manifest:late without its command: %s, want failed", st.State)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho late\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.RestartSource(t.Context(), "manifest:late"); err != nil {
		t.Fatal(err)
	}
	if s, err := settle(t, l, "late", obj{}); err != nil || strings.TrimSpace(s.Text()) != "late" {
		t.Fatalf("late after its restart: %v %s", err, settlementText(s))
	}
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(manifest.Dir), "late.json")); err != nil {
		t.Fatal(err)
	}
	if err := l.Reload(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := toolNames(t, l); slices.Contains(got, "late") {
		t.Errorf("tools after removing late: %v, want it gone", got)
	}
}

// TestWatchConfigTwoHostsOneLocation: two hosts (each its own registry, as two
// toolhost processes) serve one Location; one edit, saved once, replaces the
// changed plugin and manifest tool in both, and each keeps its own generation.
func TestWatchConfigTwoHostsOneLocation(t *testing.T) {
	plugin := func(tool string) obj {
		return obj{"name": "echo", "path": echoBin, "options": obj{"names": []string{tool}}}
	}
	dir := workspace(t, pluginsConfig(plugin("first")))
	writeManifest(t, dir, "say", obj{"name": "say", "description": "Says which.", "command": []string{"/bin/echo", "first"}})
	var hosts []*location.Location
	for range 2 {
		e := newEnv(t)
		e.opts.WatchConfig = true
		l := e.activate(t, dir)
		defer l.Close(t.Context())
		hosts = append(hosts, l)
	}
	pids := []int{callEcho(t, hosts[0], "x").PID, callEcho(t, hosts[1], "x").PID}
	if pids[0] == pids[1] {
		t.Fatalf("both hosts call plugin process %d", pids[0])
	}

	writeManifest(t, dir, "say", obj{"name": "say", "description": "Says which.", "command": []string{"/bin/echo", "second"}})
	data, _ := json.Marshal(pluginsConfig(plugin("second")))
	tmp := filepath.Join(dir, ".toolhost", ".config.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, location.ConfigPath)); err != nil {
		t.Fatal(err)
	}
	for i, l := range hosts {
		for changed := l.SourcesChanged(); ; changed = l.SourcesChanged() {
			s, err := settle(t, l, "say", obj{})
			if got := toolNames(t, l); slices.Contains(got, "second") && err == nil && strings.TrimSpace(s.Text()) == "second" {
				break
			}
			select {
			case <-changed:
			case <-t.Context().Done():
				t.Fatalf("host %d did not apply the edit", i)
			}
		}
		if pid := callEcho(t, l, "x").PID; pid == pids[0] || pid == pids[1] {
			t.Errorf("host %d: echo served by process %d after the edit, want a new generation", i, pid)
		}
		if st, _ := sourceState(l, "plugin:echo"); st.Generation != 2 || st.Err != nil {
			t.Errorf("host %d: plugin:echo generation %d, error %v; want generation 2", i, st.Generation, st.Err)
		}
	}
}

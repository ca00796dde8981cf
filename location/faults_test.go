package location_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
)

// Faults an operator's machine makes to an active Location's files: its config
// replaced by a directory, a link, deleted, its .toolhost directory swapped, the
// Location's directory removed or renamed. Each test edits the files of a
// Location whose config is watched and waits for the watcher to apply (or
// refuse) the result; the built-in read is the probe, offered or not by the rules.

// denyRead is a config whose rules deny the built-in read (it is then not offered).
var denyRead = obj{"permission": append(slices.Clone(allowAll), obj{"action": "read", "resource": "*", "effect": "deny"})}

// readOffered reports whether l offers the built-in read.
func readOffered(t *testing.T, l *location.Location) bool {
	return slices.Contains(toolNames(t, l), "read")
}

// watched activates a Location at dir with its config watched.
func watched(t *testing.T, dir string) *location.Location {
	t.Helper()
	e := newEnv(t)
	e.opts.WatchConfig = true
	l := e.activate(t, dir)
	t.Cleanup(func() { l.Close(t.Context()) })
	return l
}

// untilConfig waits until cond holds of l, re-checking at each change of its sources
// or config entry.
func untilConfig(t *testing.T, l *location.Location, cond func() bool) {
	t.Helper()
	hosttest.UntilChanged(t, l.SourcesChanged, cond)
}

func configErr(l *location.Location) error {
	st, ok := sourceState(l, location.KindConfig)
	if !ok {
		return nil
	}
	return st.Err
}

// TestWatchConfigDirectoryRenamedIntoPlace: a whole .toolhost directory renamed
// into place (a tool writing a new one beside the old, then swapping them) is
// read, although no event names the config file itself.
func TestWatchConfigDirectoryRenamedIntoPlace(t *testing.T) {
	dir := workspace(t, obj{"permission": allowAll})
	l := watched(t, dir)
	if !readOffered(t, l) {
		t.Fatal("read is not offered before the edit")
	}
	next := filepath.Join(dir, ".toolhost.next")
	if err := os.MkdirAll(next, 0o755); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(next, "config.json"), denyRead)
	if err := os.Rename(filepath.Join(dir, ".toolhost"), filepath.Join(dir, ".toolhost.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, filepath.Join(dir, ".toolhost")); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool { return !readOffered(t, l) })
}

// TestWatchConfigDirectoryRecreated: the .toolhost directory removed and made
// again with a new config at once (a checkout of another branch): the new config
// is read, however quickly it was written after the directory was made.
func TestWatchConfigDirectoryRecreated(t *testing.T) {
	dir := workspace(t, obj{"permission": allowAll})
	l := watched(t, dir)
	if err := os.RemoveAll(filepath.Join(dir, ".toolhost")); err != nil {
		t.Fatal(err)
	}
	setConfig(t, dir, denyRead) // makes the directory and writes at once
	untilConfig(t, l, func() bool { return !readOffered(t, l) && configErr(l) == nil })
}

// TestWatchConfigReplacedByDirectoryAndLink: the config replaced by a directory is
// not applied (the running rules stay, the config entry names the file); a
// symbolic link to a valid config elsewhere then applies, and an edit to invalid
// JSON and back does the same.
func TestWatchConfigReplacedByDirectoryAndLink(t *testing.T) {
	dir := workspace(t, denyRead)
	file := filepath.Join(dir, location.ConfigPath)
	l := watched(t, dir)
	if readOffered(t, l) {
		t.Fatal("read is offered against the deny")
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(file, 0o755); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool { return configErr(l) != nil })
	if err := configErr(l); !strings.Contains(err.Error(), file) {
		t.Errorf("the config entry says %q; want it to name %s", err, file)
	}
	if readOffered(t, l) {
		t.Error("a config replaced by a directory dropped the running rules")
	}

	target := filepath.Join(t.TempDir(), "shared.json")
	writeJSON(t, target, obj{"permission": allowAll})
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, file); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool { return readOffered(t, l) && configErr(l) == nil })

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{"permission": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool { return configErr(l) != nil })
	if !readOffered(t, l) {
		t.Error("invalid JSON changed the running rules")
	}
	writeJSON(t, file, denyRead)
	untilConfig(t, l, func() bool { return !readOffered(t, l) && configErr(l) == nil })
}

// writeJSON writes v as JSON to path.
func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWatchConfigLocationDirectoryRenamedAway: the Location's directory renamed
// while active, and its config edited there, is not read as a Location without a
// config (which would stop every source): the edit is not applied, the config
// entry says the directory is gone, and the sources serve on. Renamed back, the
// edit applies.
func TestWatchConfigLocationDirectoryRenamedAway(t *testing.T) {
	dir := workspace(t, pluginsConfig(echoPlugin("echo")))
	l := watched(t, dir)
	callEcho(t, l, "before")
	moved := dir + ".moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(moved)
	edited := pluginsConfig(echoPlugin("echo"))
	edited["permission"] = denyRead["permission"]
	writeJSON(t, filepath.Join(moved, location.ConfigPath), edited)
	untilConfig(t, l, func() bool { return configErr(l) != nil })
	if err := configErr(l); !strings.Contains(err.Error(), dir) {
		t.Errorf("the config entry says %q; want it to name %s", err, dir)
	}
	callEcho(t, l, "while gone")
	if !readOffered(t, l) {
		t.Error("the edit made in the moved directory applied")
	}
	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool {
		return !readOffered(t, l) && configErr(l) == nil && slices.Contains(toolNames(t, l), "echo")
	})
	callEcho(t, l, "back")
}

// TestWatchConfigLocationDirectoryRemovedAndMadeAgain: the Location's directory
// removed (the sources serve on, the config entry says it is gone) and made again
// with a new config (a fresh clone): the new config applies.
func TestWatchConfigLocationDirectoryRemovedAndMadeAgain(t *testing.T) {
	dir := workspace(t, pluginsConfig(echoPlugin("echo")))
	l := watched(t, dir)
	callEcho(t, l, "before")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool { return configErr(l) != nil })
	callEcho(t, l, "while gone")
	edited := pluginsConfig(echoPlugin("echo"))
	edited["permission"] = denyRead["permission"]
	setConfig(t, dir, edited)
	// The directory may be read before its config is written (a Location without
	// one, whose echo stops), then with it (echo starts again).
	untilConfig(t, l, func() bool {
		return !readOffered(t, l) && configErr(l) == nil && slices.Contains(toolNames(t, l), "echo")
	})
	callEcho(t, l, "made again")
}

// TestWatchConfigManyLocationsEditedAtOnce: more Locations than the user may have
// inotify instances (128 by default, /proc/sys/fs/inotify/max_user_instances),
// active in one process with their configs watched, are edited at once: every
// edit applies, in every Location.
func TestWatchConfigManyLocationsEditedAtOnce(t *testing.T) {
	n := 136
	if data, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances"); err == nil {
		if limit, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && limit < 1024 {
			n = limit + 8
		}
	}
	e := newEnv(t)
	e.opts.WatchConfig = true
	e.opts.Logger = hclog.New(&hclog.LoggerOptions{Output: e.logs, Level: hclog.Warn})
	var (
		dirs []string
		locs []*location.Location
	)
	for range n {
		dir := workspace(t, obj{"permission": allowAll})
		l := e.activate(t, dir)
		defer l.Close(t.Context())
		dirs, locs = append(dirs, dir), append(locs, l)
	}
	data, _ := json.Marshal(denyRead)
	for _, dir := range dirs {
		file := filepath.Join(dir, location.ConfigPath)
		if err := os.WriteFile(file+".tmp", data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range locs {
		untilConfig(t, l, func() bool { return !readOffered(t, l) })
	}
	if strings.Contains(e.logs.String(), "cannot watch") {
		t.Errorf("the log:\n%s", e.logs)
	}
}

// TestWatchConfigDeletedAndRestored: a config deleted while active is a Location
// without one (as at activation): its sources stop, their processes end, and the
// built-ins stay; the config restored starts them again.
func TestWatchConfigDeletedAndRestored(t *testing.T) {
	cfg := pluginsConfig(echoPlugin("echo"))
	dir := workspace(t, cfg)
	l := watched(t, dir)
	pid := callEcho(t, l, "before").PID
	if err := os.Remove(filepath.Join(dir, location.ConfigPath)); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool { _, ok := sourceState(l, "plugin:echo"); return !ok })
	if got := toolNames(t, l); !slices.Equal(got, []string{"glob", "grep", "list", "read"}) {
		t.Errorf("without a config the Location offers %v, want the built-ins", got)
	}
	if configErr(l) != nil {
		t.Errorf("a deleted config is an error: %v", configErr(l))
	}
	if pids := proctest.Children(echoBin); len(pids) != 0 {
		t.Errorf("plugin processes %v left after the config went (was %d)", pids, pid)
	}
	setConfig(t, dir, cfg)
	untilConfig(t, l, func() bool { return slices.Contains(toolNames(t, l), "echo") })
	if got := callEcho(t, l, "restored").PID; got == pid {
		t.Errorf("echo served by the old process %d", pid)
	}
}

// TestWatchConfigTruncatedMidWrite: an editor that truncates the config and writes
// it again in place, caught between the two (an empty file, then half of it), is
// not applied until the file is whole: the rules in force stay, and the whole file
// then applies.
func TestWatchConfigTruncatedMidWrite(t *testing.T) {
	dir := workspace(t, denyRead)
	file := filepath.Join(dir, location.ConfigPath)
	l := watched(t, dir)
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	untilConfig(t, l, func() bool { return configErr(l) != nil })
	if readOffered(t, l) {
		t.Error("an empty config dropped the deny")
	}
	t.Log(configErr(l))
	data, _ := json.Marshal(obj{"permission": allowAll})
	if _, err := f.Write(data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	untilConfig(t, l, func() bool { return configErr(l) != nil && !strings.Contains(configErr(l).Error(), "empty") })
	if readOffered(t, l) {
		t.Error("half a config dropped the deny")
	}
	if _, err := f.Write(data[len(data)/2:]); err != nil {
		t.Fatal(err)
	}
	untilConfig(t, l, func() bool { return readOffered(t, l) && configErr(l) == nil })
}

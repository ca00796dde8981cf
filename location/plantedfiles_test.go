//go:build unix

package location_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
)

// TestWorkspaceFilesThatAreNotFiles: a repository can link the files toolhost
// reads from it (the config, the lock file, an imported MCP config) to a device
// that never ends or to a named pipe no one writes; each is refused with an error
// naming it, at once, not read forever.
// A link to a regular file is still read.
func TestWorkspaceFilesThatAreNotFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"/dev/zero", fifo} {
		for _, tc := range []struct {
			name  string
			file  string // relative to the workspace
			other string // the config, when file is not it
			load  func(dir string) error
		}{
			{"Config", location.ConfigPath, "", func(dir string) error { _, err := location.LoadConfig(dir); return err }},
			{"LockFile", location.LockPath, "", func(dir string) error { _, err := location.ReadLock(dir); return err }},
			{"ImportedMCPConfig", ".mcp.json", `{"import_mcp_config": [".mcp.json"]}`, func(dir string) error { _, err := location.LoadConfig(dir); return err }},
		} {
			t.Run(tc.name+"LinkedTo"+filepath.Base(target), func(t *testing.T) {
				dir := t.TempDir()
				if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o700); err != nil {
					t.Fatal(err)
				}
				if tc.other != "" {
					if err := os.WriteFile(filepath.Join(dir, location.ConfigPath), []byte(tc.other), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				file := filepath.Join(dir, filepath.FromSlash(tc.file))
				if err := os.Symlink(target, file); err != nil {
					t.Fatal(err)
				}
				err := tc.load(dir)
				if !errors.Is(err, filestore.ErrRefused) || !strings.Contains(err.Error(), file) {
					t.Fatalf("err = %v; want %s refused", err, file)
				}
				t.Log(err)
			})
		}
	}
	t.Run("LinkToARegularFile", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o700); err != nil {
			t.Fatal(err)
		}
		real := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(real, []byte(`{"workspace_id": "linked"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(real, filepath.Join(dir, location.ConfigPath)); err != nil {
			t.Fatal(err)
		}
		cfg, err := location.LoadConfig(dir)
		if err != nil || cfg.WorkspaceID != "linked" {
			t.Fatalf("LoadConfig through a link = %+v, %v", cfg, err)
		}
	})
}

// TestReloadOfAConfigLinkedToAPipe: while a Location serves, its config is
// replaced by a link to a named pipe no one writes: the reload returns at once
// with the refusal, the running config keeps serving (its tools and its rules),
// the config entry of Sources names the file, and the next valid edit applies.
func TestReloadOfAConfigLinkedToAPipe(t *testing.T) {
	e := newEnv(t)
	tool := obj{"name": "shout", "description": "Repeats the input.", "command": []string{"/bin/cat"}}
	dir := workspace(t, obj{"tools": []obj{tool}, "permission": allowAll})
	l := e.activate(t, dir)
	defer func() {
		if err := l.Close(t.Context()); err != nil {
			t.Error(err)
		}
	}()
	before := toolNames(t, l)
	if !slices.Contains(before, "shout") {
		t.Fatalf("tools %v, want shout", before)
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, location.ConfigPath)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(fifo, file); err != nil {
		t.Fatal(err)
	}
	err := l.Reload(t.Context())
	if !errors.Is(err, filestore.ErrRefused) || !strings.Contains(err.Error(), file) {
		t.Fatalf("Reload = %v; want %s refused", err, file)
	}
	if st, ok := sourceState(l, location.KindConfig); !ok || st.Err == nil || !strings.Contains(st.Err.Error(), file) {
		t.Errorf("the config entry after the refused edit: %+v", st)
	}
	if got := toolNames(t, l); !slices.Equal(got, before) {
		t.Errorf("the refused edit changed the tools: %v, were %v", got, before)
	}
	if eff := l.Permission().Evaluate("shout", []string{"x"}); eff != permission.Allow {
		t.Errorf("the refused edit changed the rules: shout evaluates as %q", eff)
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	setConfig(t, dir, obj{"permission": allowAll})
	if err := l.Reload(t.Context()); err != nil {
		t.Fatalf("the next valid edit: %v", err)
	}
	if _, ok := sourceState(l, location.KindConfig); ok {
		t.Error("the config entry stays after a valid edit applied")
	}
	if got := toolNames(t, l); slices.Contains(got, "shout") {
		t.Errorf("tools after the valid edit: %v", got)
	}
}

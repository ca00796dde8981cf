//go:build unix

package location_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/location"
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

//go:build unix

package manifest_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/manifest"
)

// TestManifestsThatAreNotFiles: a repository may link a manifest anywhere. A
// link to a named pipe or to /dev/zero is refused at once, naming the file and
// what it is, where reading it would block or never end; a link to a regular file
// loads.
func TestManifestsThatAreNotFiles(t *testing.T) {
	h := newHost(t)
	dir := filepath.Join(h.loc, ".toolhost", "tools")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "good.json")
	if err := os.WriteFile(good, []byte(`{"name":"linked","description":"Linked.","command":["true"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"a_pipe.json": pipe, "b_zero.json": "/dev/zero", "c_linked.json": good} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tools, errs := manifest.Load(h.loc)
	if len(tools) != 1 || tools[0].Name != "linked" {
		t.Errorf("tools = %+v, want the one linked to a regular file", tools)
	}
	if len(errs) != 2 {
		t.Fatalf("errors = %v, want one for the pipe and one for /dev/zero", errs)
	}
	for i, want := range []string{"a_pipe.json is not a regular file, nor a link to one (a named pipe)", "b_zero.json is not a regular file, nor a link to one"} {
		if !strings.Contains(errs[i].Error(), want) {
			t.Errorf("error %d: %v; want it to say %q", i, errs[i], want)
		}
	}
}

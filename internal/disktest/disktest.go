// Package disktest runs a test against a small file system of its own, to show
// what a store does when the disk fills up mid-write (ENOSPC) and after space is
// back. On Linux, Run re-runs the calling test in a child process inside a new
// mount namespace (a user namespace too when not root) with a tmpfs of the given
// size mounted at a fresh directory; elsewhere, or where namespaces are not
// allowed, the test is skipped with a message saying so, never failed.
package disktest

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// env names the test a child process runs inside its namespace.
const env = "TOOLHOST_DISKTEST"

// Disk is a small file system mounted at Dir, private to the test's process.
type Disk struct {
	// Dir is the file system's root, empty at the start and mode 0700.
	Dir    string
	filler string
}

// Run runs fn with a Disk of size bytes (a multiple of the page size: the file
// system allocates whole pages). In the test's own process it runs the test again
// in a child process that mounts the file system, and passes, fails or skips as
// the child does, logging the child's output; fn runs only in the child. Call it
// once per test (or subtest), before the test's other work: the child runs the
// test from its start.
func Run(t *testing.T, size int64, fn func(t *testing.T, d *Disk)) {
	t.Helper()
	if os.Getenv(env) == t.Name() {
		d := mount(t, size)
		fn(t, d)
		return
	}
	runChild(t)
}

// pattern is the -test.run pattern matching exactly the test named name.
func pattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// judge reads the child's verdict from its exit and its -test.v output.
func judge(t *testing.T, out []byte, err error) {
	t.Helper()
	name := regexp.QuoteMeta(t.Name())
	switch {
	case err != nil:
		t.Fatalf("disktest: the test on a small file system failed (%v):\n%s", err, out)
	case regexp.MustCompile(`(?m)^\s*--- SKIP: ` + name + ` `).Match(out):
		t.Skipf("disktest: skipped in the child with its file system:\n%s", out)
	case !regexp.MustCompile(`(?m)^\s*--- PASS: ` + name + ` `).Match(out):
		t.Fatalf("disktest: the child did not run %s:\n%s", t.Name(), out)
	}
	if testing.Verbose() {
		t.Logf("disktest: the child with its file system:\n%s", out)
	}
}

// Fill fills the file system up with a filler file: the next write that needs a
// page of its own fails with ENOSPC. (A file's last page may still take a few
// bytes.)
func (d *Disk) Fill(t testing.TB) {
	t.Helper()
	if d.filler == "" {
		d.filler = filepath.Join(d.Dir, ".disktest-filler")
	}
	f, err := os.OpenFile(d.filler, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("disktest: fill: %v", err)
	}
	defer f.Close()
	page := make([]byte, 4096)
	for {
		_, err := f.Write(page)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("disktest: fill: %v", err)
		}
	}
	// Small writes take what whole pages the big ones left.
	for {
		_, err := f.Write(page[:1])
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		if err != nil {
			t.Fatalf("disktest: fill: %v", err)
		}
	}
}

// Free removes what Fill wrote: space is back.
func (d *Disk) Free(t testing.TB) {
	t.Helper()
	if d.filler == "" {
		return
	}
	if err := os.Remove(d.filler); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("disktest: free: %v", err)
	}
}

// Files returns the names in dir, sorted, without Fill's filler: what a store
// left there.
func (d *Disk) Files(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("disktest: %v", err)
	}
	var names []string
	for _, e := range entries {
		if filepath.Join(dir, e.Name()) != d.filler {
			names = append(names, e.Name())
		}
	}
	return names
}

package fsys_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzResolve checks that for any input Resolve either fails or returns a clean path
// inside the root whose existing part, with every symlink evaluated by the OS, is
// inside the root too.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{
		"", ".", "..", "a.txt", "../outside/secret.txt", "/etc/passwd", "link_in/b.go",
		"link_out/secret.txt", "chain1", "dangling_out", "dangling_in/x", "sub/up/sub/upup",
		"sub/upup/root/a.txt", "side/root", "．．／etc", "..\u2215etc", "a\x00", "sub/../..",
		"loop1/x", "back_in_via_above", "dangling_dotdot/x", "link_in/../../outside",
	} {
		f.Add(seed)
	}
	fsys, root, _ := tree(f)
	f.Fuzz(func(t *testing.T, p string) {
		got, err := fsys.Resolve(p)
		if err != nil {
			return
		}
		if got != filepath.Clean(got) || !filepath.IsAbs(got) {
			t.Fatalf("Resolve(%q) = %q: not clean and absolute", p, got)
		}
		if !inside(root, got) {
			t.Fatalf("Resolve(%q) = %q: outside the root %s", p, got, root)
		}
		// Evaluate the longest existing prefix the way the OS would.
		for q := got; ; q = filepath.Dir(q) {
			real, err := filepath.EvalSymlinks(q)
			if err == nil {
				if !inside(root, real) {
					t.Fatalf("Resolve(%q) = %q, whose existing part %q leads to %q outside the root", p, got, q, real)
				}
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				if _, lerr := os.Lstat(q); lerr == nil {
					t.Fatalf("Resolve(%q) = %q: EvalSymlinks(%q): %v", p, got, q, err)
				}
			}
			if q == root {
				t.Fatalf("root vanished")
			}
		}
	})
}

func inside(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

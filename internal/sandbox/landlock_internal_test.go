//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// A system path beneath another system directory once its links are resolved gets
// no rule of its own; everything else keeps its kind.
func TestPathKindsCovered(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/lib", "usr/share/zoneinfo/Etc", "etc/ssl", "other/lib"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "usr/share/zoneinfo/Etc/UTC"), nil, 0o644)
	os.Symlink("usr/lib", filepath.Join(root, "lib"))
	os.Symlink("other/lib", filepath.Join(root, "lib32"))
	os.Symlink("../usr/share/zoneinfo/Etc/UTC", filepath.Join(root, "etc/localtime"))
	os.Symlink("usr", filepath.Join(root, "usr2"))
	p := func(rel string) string { return filepath.Join(root, rel) }
	got := pathKinds([]string{p("usr"), p("lib"), p("lib32"), p("usr/share/zoneinfo"), p("etc/ssl"), p("etc/localtime"), p("usr2"), p("missing")})
	want := map[string]pathKind{
		p("usr"):                pathDir,
		p("lib"):                pathCovered,
		p("lib32"):              pathDir, // elsewhere
		p("usr/share/zoneinfo"): pathCovered,
		p("etc/ssl"):            pathDir,
		p("etc/localtime"):      pathCovered,
		p("usr2"):               pathCovered, // the same directory as usr, which sorts first
		p("missing"):            pathMissing,
	}
	for path, k := range want {
		if got[path] != k {
			t.Errorf("%s: kind %d, want %d", path, got[path], k)
		}
	}
}

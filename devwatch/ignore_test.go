//go:build unix

package devwatch

import "testing"

func TestIgnored(t *testing.T) {
	for name, want := range map[string]bool{
		"main.go": false, "go.mod": false, "schema.json": false,
		".main.go.swp": true, "main.go~": true, "#main.go#": true, ".#main.go": true, "4913": true,
		"main_test.go": true, "x.go___jb_tmp___": true, "out.tmp": true,
	} {
		if got := ignoredFile(name); got != want {
			t.Errorf("ignoredFile(%q) = %v, want %v", name, got, want)
		}
	}
	for rel, want := range map[string]bool{
		"main.go": false, "sub/x.go": false, "testdata/x": true, ".git/HEAD": true, "a/.cache/b": true, "testdata": false,
	} {
		if got := hiddenPath(rel); got != want {
			t.Errorf("hiddenPath(%q) = %v, want %v", rel, got, want)
		}
	}
}

package fsys_test

import (
	"path/filepath"
	"testing"

	"github.com/toolhost/toolhost/fsys"
)

// BenchmarkRead reads a small file at the root and one three directories down.
func BenchmarkRead(b *testing.B) {
	root := b.TempDir()
	mkdir(b, filepath.Join(root, "a", "b", "c"))
	write(b, filepath.Join(root, "top.txt"), "hello\n")
	write(b, filepath.Join(root, "a", "b", "c", "deep.txt"), "hello\n")
	f, err := fsys.New(root)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	for _, p := range []string{"top.txt", "a/b/c/deep.txt"} {
		b.Run(filepath.Base(p), func(b *testing.B) {
			for b.Loop() {
				if _, err := f.Read(b.Context(), p, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

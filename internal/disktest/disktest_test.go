package disktest_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/disktest"
)

// TestFillAndFree: a filled Disk refuses a write with ENOSPC and takes it again
// once freed; the mount is the child's alone.
func TestFillAndFree(t *testing.T) {
	disktest.Run(t, 64<<10, func(t *testing.T, d *disktest.Disk) {
		path := filepath.Join(d.Dir, "f")
		d.Fill(t)
		if err := os.WriteFile(path, make([]byte, 8192), 0o600); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("a write to a full disk: %v, want ENOSPC", err)
		}
		d.Free(t)
		if err := os.WriteFile(path, make([]byte, 8192), 0o600); err != nil {
			t.Fatalf("a write once space is back: %v", err)
		}
		if got := d.Files(t, d.Dir); len(got) != 1 || got[0] != "f" {
			t.Errorf("files %v, want [f]", got)
		}
	})
}

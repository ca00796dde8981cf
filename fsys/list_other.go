//go:build !unix

package fsys

import (
	"os"
	"path/filepath"
)

// describe returns the entry name of the directory abs (open as dir), looked up
// beneath the root by os.Root without following a final symlink; false when it is
// gone. Without an fstatat, the lookup is by root-relative path: os.Root still
// keeps it inside the root.
func (f *FS) describe(_ *os.File, abs string, name string) (Entry, bool) {
	fi, err := f.dir.Lstat(filepath.Join(f.relTo(abs), name))
	if err != nil {
		return Entry{}, false
	}
	e := Entry{Name: name, Type: "other", Size: fi.Size(), ModTime: fi.ModTime()}
	switch m := fi.Mode(); {
	case m.IsRegular():
		e.Type = "file"
	case m.IsDir():
		e.Type = "dir"
	case m&os.ModeSymlink != 0:
		e.Type = "symlink"
	}
	return e, true
}

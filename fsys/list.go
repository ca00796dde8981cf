package fsys

import (
	"context"
	"io/fs"
	"os"
	"time"
)

// Entry is one directory entry, described without following symlinks.
type Entry struct {
	Name string `json:"name"`
	// Type is "file", "dir", "symlink" or "other".
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
}

// List returns the entries of directory p, sorted by name. p may be a symlink to a
// directory inside the root. Entries that vanish while listing are left out. It
// returns context.Cause(ctx) when ctx ends.
func (f *FS) List(ctx context.Context, p string) ([]Entry, error) {
	abs, err := f.Resolve(p)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, &PathError{Op: "list", Path: p, Err: err}
	}
	if !fi.IsDir() {
		return nil, &PathError{Op: "list", Path: p, Err: ErrNotDir}
	}
	des, err := os.ReadDir(abs) // sorted by name
	if err != nil {
		return nil, &PathError{Op: "list", Path: p, Err: err}
	}
	out := make([]Entry, 0, len(des))
	for i, de := range des {
		if i%1024 == 0 && ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		info, err := de.Info()
		if err != nil {
			continue // removed since ReadDir
		}
		out = append(out, Entry{Name: de.Name(), Type: typeOf(info.Mode()), Size: info.Size(), ModTime: info.ModTime()})
	}
	return out, nil
}

func typeOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

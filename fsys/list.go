package fsys

import (
	"context"
	"io/fs"
	"slices"
	"strings"
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
	dir, fi, err := f.openBeneath(abs)
	if err != nil {
		return nil, &PathError{Op: "list", Path: p, Err: err}
	}
	defer dir.Close()
	if !fi.IsDir() {
		return nil, &PathError{Op: "list", Path: p, Err: ErrNotDir}
	}
	des, err := dir.ReadDir(-1)
	if err != nil {
		return nil, &PathError{Op: "list", Path: p, Err: err}
	}
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	out := make([]Entry, 0, len(des))
	for i, de := range des {
		if i%1024 == 0 && ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		e, ok := f.describe(dir, abs, de.Name())
		if !ok {
			continue // removed since ReadDir
		}
		out = append(out, e)
	}
	return out, nil
}

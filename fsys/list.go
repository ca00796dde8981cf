package fsys

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
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
	// Each entry is described relative to the open directory, never by a path
	// that could have changed since it was opened.
	fd := int(dir.Fd())
	out := make([]Entry, 0, len(des))
	for i, de := range des {
		if i%1024 == 0 && ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, de.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed since ReadDir
		}
		out = append(out, Entry{Name: de.Name(), Type: typeOfStat(st.Mode), Size: st.Size, ModTime: time.Unix(st.Mtim.Unix())})
	}
	return out, nil
}

func typeOfStat(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "other"
}

//go:build unix

package fsys

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// describe returns the entry name of the open directory dir, described relative to
// dir itself, never by a path that could have changed since it was opened; false
// when it is gone.
func (f *FS) describe(dir *os.File, _ string, name string) (Entry, bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, false
	}
	return Entry{Name: name, Type: typeOfStat(uint32(st.Mode)), Size: st.Size, ModTime: time.Unix(st.Mtim.Unix())}, true
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

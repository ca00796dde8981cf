//go:build unix

package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// NoFollow is the open flag that refuses a symbolic link as the last element of
// the path (O_NOFOLLOW); 0 where there is none.
const NoFollow = syscall.O_NOFOLLOW

// openNoFollow opens path for reading without following a symbolic link in its
// last element, and without blocking on a named pipe.
func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// openNonBlock opens path for reading without blocking on a named pipe.
func openNonBlock(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// isLoop reports whether err is openNoFollow's refusal of a symbolic link.
func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.EMLINK) } // EMLINK: FreeBSD

// owner returns the uid owning fi's file.
func owner(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return os.Geteuid()
}

// ownedHere reports whether fi's file is the user's, or root's.
func ownedHere(fi fs.FileInfo) bool {
	uid := owner(fi)
	return uid == os.Geteuid() || uid == 0
}

// CheckDir returns a *FileError when dir, a directory that should be toolhost's
// own, is owned by another user or writable by group or others, who could then
// plant or replace files in it. A symbolic link to such a directory is followed.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case !fi.IsDir():
		return &FileError{Path: dir, Problem: "is not a directory", Remedy: "remove it, or choose another directory"}
	case !ownedHere(fi):
		return &FileError{Path: dir, Problem: fmt.Sprintf("is owned by uid %d, not by you", owner(fi)), Remedy: "use a directory of your own"}
	case fi.Mode().Perm()&0o022 != 0:
		return &FileError{Path: dir, Problem: fmt.Sprintf("is writable by others (mode %04o), who could plant or replace the files in it", fi.Mode().Perm()),
			Remedy: "run chmod go-w on it, and check its files"}
	}
	return nil
}

// checkFile applies p's rules of ownership and mode to the file path.
func (p Policy) checkFile(path string, fi fs.FileInfo) error {
	perm := fi.Mode().Perm()
	switch {
	case p.Private && !ownedHere(fi):
		return &FileError{Path: path, Problem: fmt.Sprintf("is owned by uid %d, not by you", owner(fi)), Remedy: "remove it; the store writes a new file"}
	case p.Private && perm&0o022 != 0:
		return &FileError{Path: path, Problem: fmt.Sprintf("is writable by others (mode %04o)", perm), Remedy: "check its contents, then run chmod go-w on it"}
	case p.Secret && perm&0o077 != 0:
		return &FileError{Path: path, Problem: fmt.Sprintf("holds secrets but group or others may read it (mode %04o)", perm), Remedy: "run chmod 600 on it"}
	}
	return nil
}

// Package filestore changes files that several toolhost processes of one user may
// write at once: saved approvals, plugins.lock.json, OAuth tokens, the managed
// output's quota. Every change is read-modify-write under an exclusive lock on a
// sibling lock file, with the latest contents re-read under the lock, and is
// written atomically: a temporary file in the same directory, synced, renamed over
// the file, then the directory synced. A reader without the lock sees the old
// contents or the new, never a mix, and no writer loses another's change as long as
// its change is made from what Update hands it.
//
// The lock is advisory (flock on Unix, LockFileEx on Windows) and released by the
// operating system when its process dies, so a killed writer never leaves it
// held; what it may leave is a temporary file, which the next writer, or Clean
// at start, removes under the lock.
//
// A write that fails (a full disk, a quota, an I/O error) leaves the file as it
// was and is a *WriteError that names the file and says what to do. Each store
// reads its file under a Policy, which refuses, as a *FileError, a file the store
// would not have written: a symbolic link or named pipe planted in its place, a
// huge file, and for a store in a directory of toolhost's own one that others
// could have planted or read.
package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// LockPath returns the lock file of path: a hidden sibling, ".NAME.lock".
func LockPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".lock")
}

// tempPattern matches the temporary files of path: ".NAME.*.tmp".
func tempPattern(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
}

// Locked is a held lock of one file (see Lock). Unlock releases it.
type Locked struct {
	path    string
	policy  Policy
	f       *os.File
	removed []string // the temporary files Lock removed
}

// Lock takes the exclusive lock of path, creating its directory (mode 0700 if
// missing) and lock file, and blocks until it holds it. A symbolic link in the
// lock file's place is refused (a *FileError). Then it removes the
// temporary files a writer killed mid-write left (see Clean). The caller must
// Unlock. Locks taken in one process exclude each other as locks of two
// processes do.
func Lock(path string) (*Locked, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("lock %s: %w%s", path, err, Remedy(err))
	}
	// Never through a link: one planted in the lock file's place would have the
	// lock create or open a file elsewhere.
	f, err := os.OpenFile(LockPath(path), os.O_RDWR|os.O_CREATE|NoFollow, 0o600)
	if err != nil {
		if fi, lerr := os.Lstat(LockPath(path)); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, &FileError{Path: LockPath(path), Problem: "is a symbolic link, not the lock file toolhost makes", Remedy: "remove it"}
		}
		return nil, fmt.Errorf("lock %s: %w%s", path, err, Remedy(err))
	}
	if err := LockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &Locked{path: path, f: f}
	if l.removed, err = l.removeTemps(); err != nil {
		l.Unlock()
		return nil, err
	}
	return l, nil
}

// Unlock releases the lock. It is not idempotent.
func (l *Locked) Unlock() error {
	return l.f.Close() // closing the last descriptor releases the lock
}

// Read returns the file's contents, or nil and no error when it does not exist; a
// file the lock's Policy refuses (see Policy.Lock; Lock's is the zero Policy) is a
// *FileError.
func (l *Locked) Read() ([]byte, error) {
	return l.policy.ReadFile(l.path)
}

// Write replaces the file's contents with data, atomically and durably: a
// temporary file in the same directory with mode perm, synced, renamed over the
// file, then the directory synced. On failure the error is a *WriteError; unless
// its Replaced is true the file is as it was, and no temporary file is left.
func (l *Locked) Write(data []byte, perm fs.FileMode) (err error) {
	dir := filepath.Dir(l.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(l.path)+".*.tmp")
	if err != nil {
		return &WriteError{Path: l.path, Err: err}
	}
	renamed := false
	defer func() {
		if err != nil && !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
			err = &WriteError{Path: l.path, Err: err}
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		return err
	}
	renamed = true
	if err := SyncDir(dir); err != nil {
		return &WriteError{Path: l.path, Replaced: true, Err: err}
	}
	return nil
}

// WriteError reports a Write that failed. Unless Replaced, the file holds what it
// held before. Its message names the file and says what to do; Unwrap gives the
// cause, so errors.Is sees syscall.ENOSPC and the like.
type WriteError struct {
	Path string
	// Replaced is true when the new contents were renamed into place but the
	// directory could not be synced: they may not survive a crash of the system.
	Replaced bool
	Err      error
}

func (e *WriteError) Error() string {
	if e.Replaced {
		return fmt.Sprintf("write %s: written, but syncing its directory failed: %v; it may not survive a crash%s", e.Path, cause(e.Err), Remedy(e.Err))
	}
	return fmt.Sprintf("write %s: %v; the file is unchanged%s", e.Path, cause(e.Err), Remedy(e.Err))
}

func (e *WriteError) Unwrap() error { return e.Err }

// cause is err without the path of a temporary file, which the caller's message
// names better.
func cause(err error) error {
	var pe *fs.PathError
	var le *os.LinkError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	}
	return err
}

// Remedy says what to do about err, a file system's error (a full disk, a quota,
// a read-only file system, a permission, an I/O error), starting with ": "; ""
// when it has nothing to say.
func Remedy(err error) string {
	switch {
	case errors.Is(err, errNoSpace):
		return ": free space on its file system and try again"
	case errors.Is(err, errQuota):
		return ": the disk quota is used up; free space within it and try again"
	case errors.Is(err, errReadOnly):
		return ": remount its file system read-write, or have toolhost write to a directory on a writable one"
	case errors.Is(err, fs.ErrPermission):
		return ": check the permissions of its directory"
	case errors.Is(err, errIO):
		return ": the device reported an I/O error; check it before trusting the file"
	}
	return ""
}

// removeTemps removes the temporary files (or directories) of the path; the lock
// is held, so none is being written.
func (l *Locked) removeTemps() ([]string, error) {
	names, err := filepath.Glob(tempPattern(l.path))
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, n := range names {
		if err := os.RemoveAll(n); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...)
}

// Update changes the file at path under its lock: fn is given its latest contents
// (nil when it does not exist) and returns the new contents, written as Write
// writes them with mode perm. When fn returns an error nothing is written and
// Update returns it as is; when fn returns ErrUnchanged nothing is written and
// Update returns nil. Errors of Update's own name the file; a failed write is a
// *WriteError, a file the zero Policy refuses a *FileError (see Policy.Update).
func Update(path string, perm fs.FileMode, fn func(old []byte) ([]byte, error)) error {
	return Policy{}.Update(path, perm, fn)
}

// update is Update under the held lock.
func (l *Locked) update(perm fs.FileMode, fn func(old []byte) ([]byte, error)) error {
	old, err := l.Read()
	if errors.Is(err, ErrRefused) {
		return err
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", l.path, err)
	}
	data, err := fn(old)
	if errors.Is(err, ErrUnchanged) {
		return nil
	}
	if err != nil {
		return err
	}
	return l.Write(data, perm)
}

// ErrUnchanged, returned by Update's fn, leaves the file as it is.
var ErrUnchanged = errors.New("filestore: unchanged")

// Clean removes, under the lock of path, the temporary files a writer killed
// mid-write left beside it, and returns their paths. When there is none (a
// missing directory included) it takes no lock and creates nothing, so cleaning
// at start leaves no lock file in a directory no store has written (a
// workspace's .toolhost); a temporary file made after it looked belongs to a
// live writer.
func Clean(path string) ([]string, error) {
	if names, err := filepath.Glob(tempPattern(path)); err != nil || len(names) == 0 {
		return nil, err
	}
	l, err := Lock(path)
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	return l.removed, nil
}

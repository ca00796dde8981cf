package filestore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Policy says what a store's file, and its directory, may be. A file that breaks
// it is refused, as a *FileError matching ErrRefused, and left as it is: a store
// never reads through a planted symbolic link, never blocks on a planted named
// pipe, never takes a file others may have written for its own, never reads a
// huge file into memory. The zero value refuses what is not a regular file and
// what is larger than DefaultMaxBytes.
type Policy struct {
	// Private is for files in a directory that is toolhost's own (made 0700): on
	// Unix the directory, and the file, must be owned by the user (or root) and
	// writable by no one else, or others could plant or replace them.
	Private bool
	// Secret is for files that hold secrets (written 0600): on Unix a file group
	// or others may read is refused, until its mode is fixed.
	Secret bool
	// MaxBytes is the largest file read; 0 is DefaultMaxBytes.
	MaxBytes int64
	// FollowLinks is for files a person edits (a workspace's config), which may
	// be symbolic links: ReadFile follows them, and still refuses what they lead
	// to unless it is a regular file (a device such as /dev/zero, a named pipe, a
	// directory).
	FollowLinks bool
}

// DefaultMaxBytes is the largest file a Policy without MaxBytes reads.
const DefaultMaxBytes = 16 << 20

// ErrRefused is matched by every *FileError.
var ErrRefused = errors.New("filestore: file refused")

// FileError reports a store's file or directory that its Policy refuses.
type FileError struct {
	Path    string
	Problem string // what is wrong, as "is a symbolic link"
	Remedy  string // what to do
}

func (e *FileError) Error() string {
	return fmt.Sprintf("%s %s; %s", e.Path, e.Problem, e.Remedy)
}

// Is matches ErrRefused.
func (e *FileError) Is(target error) bool { return target == ErrRefused }

// ReadFile returns the contents of path (an empty file: empty, not nil), or nil
// and no error when it does not exist; a file (or, when Private, a directory)
// that p refuses is a *FileError.
// It takes no lock: the file is read whole as some writer left it.
func (p Policy) ReadFile(path string) ([]byte, error) {
	if p.Private {
		if err := CheckDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	f, err := p.open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		if isLoop(err) {
			return nil, &FileError{Path: path, Problem: "is a symbolic link, not the regular file toolhost writes", Remedy: "remove it (the store writes a new file) or put the file it points to in its place"}
		}
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		what, remedy := "is not a regular file", "remove it; the store writes a new file"
		if p.FollowLinks {
			what, remedy = "is not a regular file, nor a link to one", "put a regular file in its place"
		}
		return nil, &FileError{Path: path, Problem: fmt.Sprintf("%s (%s)", what, kind(fi.Mode())), Remedy: remedy}
	}
	if err := p.checkFile(path, fi); err != nil {
		return nil, err
	}
	max := p.MaxBytes
	if max <= 0 {
		max = DefaultMaxBytes
	}
	tooBig := &FileError{Path: path, Problem: fmt.Sprintf("is larger than the %d bytes this file can be", max), Remedy: "it is not a file toolhost wrote: move it aside"}
	if p.FollowLinks {
		tooBig.Remedy = "make it smaller"
	}
	if fi.Size() > max {
		return nil, tooBig
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1)) // it may grow meanwhile
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, tooBig
	}
	return data, nil
}

// open opens path for reading, following a link when p says so, and never
// blocking on a named pipe.
func (p Policy) open(path string) (*os.File, error) {
	if p.FollowLinks {
		return openNonBlock(path)
	}
	return openNoFollow(path)
}

// Lock is the package's Lock for a file of this Policy: when Private, the
// directory (made 0700 if missing) is checked before the lock file is opened in
// it, and the Locked's Read reads as p.ReadFile does.
func (p Policy) Lock(path string) (*Locked, error) {
	if p.Private {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := CheckDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
	}
	l, err := Lock(path)
	if err != nil {
		return nil, err
	}
	l.policy = p
	return l, nil
}

// Update is the package's Update for a file of this Policy: the lock is taken as
// p.Lock takes it, and a file p refuses is not given to fn: Update returns the
// *FileError and writes nothing.
func (p Policy) Update(path string, perm fs.FileMode, fn func(old []byte) ([]byte, error)) error {
	l, err := p.Lock(path)
	if err != nil {
		return err
	}
	defer l.Unlock()
	return l.update(perm, fn)
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

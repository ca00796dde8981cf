package fsys

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

var (
	// ErrOutsideRoot is wrapped by the *PathError for a path that leaves the root.
	ErrOutsideRoot = errors.New("path is outside the location root")
	// ErrInvalidPath is wrapped by the *PathError for a path that cannot name a
	// file, such as one containing a NUL byte.
	ErrInvalidPath = errors.New("invalid path")
	// ErrTooLarge is wrapped by the *PathError for a read beyond the size limit.
	ErrTooLarge = errors.New("file too large")
	// ErrBinary is wrapped by the *PathError for a text operation on a binary file.
	ErrBinary = errors.New("binary file")
	// ErrNotDir is wrapped by the *PathError when a directory was expected.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir is wrapped by the *PathError when a file was expected.
	ErrIsDir = errors.New("is a directory")
	// ErrNotRegular is wrapped by the *PathError for a device, socket or pipe where
	// a regular file was expected.
	ErrNotRegular = errors.New("not a regular file")
	// ErrBadPattern is wrapped by the error for a malformed glob or regexp.
	ErrBadPattern = errors.New("bad pattern")
)

// PathError records a failed operation on a path. Path is the path as the caller
// gave it; Err wraps one of this package's sentinels or an fs error (such as
// fs.ErrNotExist), so errors.Is works on both.
type PathError struct {
	Op   string
	Path string
	Err  error
}

func (e *PathError) Error() string {
	return fmt.Sprintf("fsys: %s %q: %v", e.Op, e.Path, e.Err)
}

func (e *PathError) Unwrap() error { return e.Err }

// Default limits.
const (
	DefaultMaxReadBytes     = 50 << 20
	DefaultMaxGrepFileBytes = 10 << 20
)

// Option configures an FS.
type Option func(*FS)

// MaxReadBytes caps what Read and ReadLines read (default 50 MiB); a larger read
// fails with ErrTooLarge.
func MaxReadBytes(n int64) Option { return func(f *FS) { f.maxRead = n } }

// MaxGrepFileBytes is the size above which Grep skips a file (default 10 MiB).
func MaxGrepFileBytes(n int64) Option { return func(f *FS) { f.maxGrepFile = n } }

// FS is a file system confined to one root directory. It holds the root directory
// open (see Close) and is safe for concurrent use.
type FS struct {
	root        string
	dir         *os.Root // the root, opened once: every open is resolved beneath it
	escapes     error    // the error os.Root reports for a path that leaves it
	maxRead     int64
	maxGrepFile int64
}

// New returns an FS rooted at root, which must be an absolute path to an existing
// directory; symlinks in it are evaluated, so Root is canonical. The FS holds the
// directory open from now on: a rename of the root does not move it, and the
// caller should Close it when done.
func New(root string, opts ...Option) (*FS, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("fsys: root %q is not absolute", root)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("fsys: root: %w", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("fsys: root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("fsys: root %s: %w", real, ErrNotDir)
	}
	dir, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("fsys: root: %w", err)
	}
	// os.Root refuses a path that leaves it with an unexported error; a ".." at
	// the start yields it without a system call, so it can be recognized later.
	_, escapes := dir.Open("..")
	var pe *os.PathError
	if !errors.As(escapes, &pe) {
		dir.Close()
		return nil, fmt.Errorf("fsys: root: opening \"..\" beneath it returned %v", escapes)
	}
	f := &FS{root: real, dir: dir, escapes: pe.Err, maxRead: DefaultMaxReadBytes, maxGrepFile: DefaultMaxGrepFileBytes}
	for _, o := range opts {
		o(f)
	}
	return f, nil
}

// Close releases the root directory. Operations in flight finish; later ones fail
// with an error wrapping os.ErrClosed. It is idempotent and safe for concurrent
// use; an FS that is never closed releases the directory when it is garbage
// collected.
func (f *FS) Close() error {
	if err := f.dir.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("fsys: close: %w", err)
	}
	return nil
}

// Root returns the canonical absolute root directory.
func (f *FS) Root() string { return f.root }

// Rel returns the root-relative, slash-separated form of an absolute path inside
// the root ("." for the root itself), for messages and permission resources. A path
// outside the root is returned unchanged.
func (f *FS) Rel(abs string) string {
	rel, ok := f.within(abs)
	if !ok {
		return abs
	}
	return filepath.ToSlash(rel)
}

// within returns abs relative to the root and whether abs is the root or below it.
// abs must be clean.
func (f *FS) within(abs string) (string, bool) {
	rel, err := filepath.Rel(f.root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// maxLinks bounds the symlinks one resolution follows (Linux's own limit is 40).
const maxLinks = 40

// Resolve maps p — relative to the root, or absolute inside it; "" is the root —
// to a clean absolute path inside the root with every symlink in it evaluated.
//
// It refuses with a *PathError wrapping ErrOutsideRoot a path whose `..` escapes
// the root, an absolute path outside it, and a path through a symlink (in any
// component, the last included) whose target leaves the root, even a dangling one.
// A relative symlink target may not climb above the root even on its way back in.
// It refuses a NUL byte with ErrInvalidPath. A path whose tail does not exist
// resolves (for a future write) once the existing prefix is checked; a non-existent
// component followed by `..` from a symlink target fails with fs.ErrNotExist.
// Unicode look-alikes of '.' and '/' are ordinary file name characters.
func (f *FS) Resolve(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &PathError{Op: "resolve", Path: p, Err: fmt.Errorf("%w: contains a NUL byte", ErrInvalidPath)}
	}
	full := p
	if !filepath.IsAbs(p) {
		full = filepath.Join(f.root, p)
	}
	rel, ok := f.within(filepath.Clean(full))
	if !ok {
		return "", &PathError{Op: "resolve", Path: p, Err: ErrOutsideRoot}
	}
	abs, err := f.walk(rel)
	if err != nil {
		return "", &PathError{Op: "resolve", Path: p, Err: err}
	}
	return abs, nil
}

// walk evaluates rel (clean, relative to the root) one component at a time. cur is
// always a real directory path inside the root: the root, extended by components
// that exist and are not symlinks, or shortened by a `..` that stays inside.
func (f *FS) walk(rel string) (string, error) {
	cur := f.root
	todo := splitPath(rel)
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if cur == f.root {
				return "", ErrOutsideRoot
			}
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			// Nothing below a missing component exists, so the rest is names only;
			// a `..` among them (from a symlink target) cannot be evaluated.
			for _, r := range todo {
				if r == ".." {
					return "", fs.ErrNotExist
				}
			}
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if err != nil {
			if st, serr := os.Lstat(cur); serr == nil && !st.IsDir() {
				return "", fmt.Errorf("%w: %s", ErrNotDir, f.Rel(cur))
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", fmt.Errorf("%w: too many levels of symbolic links", ErrInvalidPath)
		}
		target, err := os.Readlink(next)
		if errors.Is(err, syscall.EINVAL) {
			// No longer a symlink: it changed since the Lstat; look again.
			todo = append([]string{c}, todo...)
			continue
		}
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			// The target must spell the root, then names inside it. The root is
			// canonical, so its own components need no evaluation.
			rest, ok := f.within(filepath.Clean(target))
			if !ok || containsDotDot(target) {
				return "", ErrOutsideRoot
			}
			cur = f.root
			todo = append(splitPath(rest), todo...)
			continue
		}
		todo = append(splitPath(target), todo...)
	}
	return cur, nil
}

func splitPath(p string) []string {
	return strings.Split(filepath.ToSlash(p), "/")
}

func containsDotDot(p string) bool {
	for _, c := range splitPath(p) {
		if c == ".." {
			return true
		}
	}
	return false
}

package fsys

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Every open goes through the root's descriptor (os.Root): the kernel resolves
// each component relative to a directory already inside the root, and os.Root
// follows a symlink only while it stays inside, so a path that Resolve checked and
// that changed since (a component swapped for a symlink leading out) fails instead
// of reaching outside. Resolve stays the place that explains a refusal (and that
// follows symlinks with absolute targets inside the root, which os.Root refuses);
// the descriptor is what enforces it.

// relTo returns the root-relative form of abs, which Resolve returned, as os.Root
// takes it ("." for the root).
func (f *FS) relTo(abs string) string {
	rel, ok := f.within(abs)
	if !ok || rel == "" {
		return "."
	}
	return rel
}

// openBeneath opens abs, which Resolve returned, beneath the root for reading. It
// does not block on a FIFO and never reads a device's data: callers check the
// returned FileInfo (of the opened file itself) before reading.
func (f *FS) openBeneath(abs string) (*os.File, os.FileInfo, error) {
	file, err := f.dir.OpenFile(f.relTo(abs), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, f.beneathErr(err)
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, nil, f.beneathErr(err)
	}
	return file, fi, nil
}

// beneathErr maps an error of os.Root to this package's: a path that left the
// root wraps ErrOutsideRoot; os's own path (root-relative) is dropped, since the
// caller's *PathError names the caller's path.
func (f *FS) beneathErr(err error) error {
	switch {
	case errors.Is(err, f.escapes):
		return ErrOutsideRoot
	case errors.Is(err, syscall.ELOOP):
		// As Resolve reports a loop; os.Root also reports a final component that
		// was a symlink and then was not, when it changes under the open.
		return fmt.Errorf("%w: too many levels of symbolic links", ErrInvalidPath)
	case errors.Is(err, syscall.ENOTDIR):
		// As Resolve reports a path through a file; os.Root also reports a
		// directory that was a symlink and then was not, when it changes under the
		// open.
		return ErrNotDir
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

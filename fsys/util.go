package fsys

import (
	"errors"
	"io/fs"
)

func isNotExist(err error) bool { return err != nil && errors.Is(err, fs.ErrNotExist) }

// unwrapPath returns the cause inside a *PathError, so that re-wrapping names only
// the caller's path.
func unwrapPath(err error) error {
	var pe *PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

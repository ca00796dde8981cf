//go:build windows

package filestore

import (
	"errors"
	"io/fs"
	"os"
)

// NoFollow is the open flag that refuses a symbolic link as the last element of
// the path (O_NOFOLLOW); 0 where there is none.
const NoFollow = 0

// errSymlink is openNoFollow's refusal of a symbolic link.
var errSymlink = errors.New("a symbolic link")

// openNoFollow opens path for reading unless it is a symbolic link (checked
// before the open: Windows has no O_NOFOLLOW).
func openNoFollow(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, errSymlink
	}
	return os.Open(path)
}

// openNonBlock opens path for reading.
func openNonBlock(path string) (*os.File, error) { return os.Open(path) }

func isLoop(err error) bool { return errors.Is(err, errSymlink) }

// CheckDir checks nothing on Windows, whose access control lists the mode bits
// do not describe.
func CheckDir(string) error { return nil }

// checkFile checks nothing on Windows (see CheckDir).
func (Policy) checkFile(string, fs.FileInfo) error { return nil }

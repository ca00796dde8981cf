//go:build unix

package server

import (
	"os"
	"syscall"
)

// fileOwner returns the uid that owns the file fi describes.
func fileOwner(fi os.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

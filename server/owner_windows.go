//go:build windows

package server

import "os"

// fileOwner is unknown on Windows, whose files have owners by SID, not uid: the
// directory's mode check alone applies there.
func fileOwner(os.FileInfo) (uid int, ok bool) { return 0, false }

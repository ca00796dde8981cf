//go:build unix

package filestore_test

import (
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/filestore"
)

// TestRemedySaysWhatToDo: each file system error the stores meet gets a remedy
// that says what to do, not the error again (a state directory on a read-only
// mount said "read-only file system: its file system is read-only").
func TestRemedySaysWhatToDo(t *testing.T) {
	for _, c := range []struct {
		errno syscall.Errno
		do    string
	}{
		{syscall.ENOSPC, "free space"},
		{syscall.EDQUOT, "free space"},
		{syscall.EROFS, "writable"},
		{syscall.EACCES, "permissions"},
		{syscall.EIO, "check"},
	} {
		err := &fs.PathError{Op: "open", Path: "/state/approvals.json", Err: c.errno}
		if remedy := filestore.Remedy(err); !strings.Contains(remedy, c.do) {
			t.Errorf("%v: remedy %q does not say to do %q", c.errno, remedy, c.do)
		}
	}
}

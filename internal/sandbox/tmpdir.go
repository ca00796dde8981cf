//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// privateTempDir returns an empty directory for a confined program's TMPDIR (0700,
// in the system's temporary directory), named toolhost-sandbox-<host pid>-*: one
// from the reserve (see reserve), else a new one. The first directory made ahead
// also removes what dead hosts left.
func privateTempDir() (string, error) {
	if dir, ok := tempDirs.take(); ok {
		return dir, nil
	}
	return os.MkdirTemp("", tempPrefix())
}

var tempDirs = reserve[string]{
	make: func() (string, bool) {
		sweepDeadHostsTemp()
		dir, err := os.MkdirTemp("", tempPrefix())
		return dir, err == nil
	},
	drop: func(dir string) { _ = os.RemoveAll(dir) },
}

func tempPrefix() string { return "toolhost-sandbox-" + strconv.Itoa(os.Getpid()) + "-" }

// recycleTempDir gives a program's temporary directory back to the reserve, emptied
// and reset, or removes it when it cannot be. Call it only once no process that
// could write there is left.
func recycleTempDir(dir string) {
	if err := emptyTempDir(dir); err != nil {
		_ = os.RemoveAll(dir)
		return
	}
	tempDirs.put(dir)
}

// emptyTempDir removes what dir holds and resets what its program could change of
// the directory itself, so that the next program finds it as made: its mode (Landlock
// does not govern chmod), and no extended attributes but the security modules' (it
// fails when there are others: a program may set user attributes, and ACLs, on a
// directory it owns). A program confined there cannot rename or replace dir itself:
// it may not write in its parent.
func emptyTempDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := unix.Listxattr(dir, buf)
	if errors.Is(err, unix.ENOTSUP) {
		return nil
	}
	if err != nil {
		return err
	}
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		if name != "" && !strings.HasPrefix(name, "security.") {
			return fmt.Errorf("extended attribute %q", name)
		}
	}
	return nil
}

// sweepDeadHostsTemp removes, once per process, the private temporary directories of
// hosts that are no longer running (a host killed before it could remove its own,
// or what its reserve held).
var sweepDeadHostsTemp = sync.OnceFunc(func() {
	tmp := os.TempDir()
	entries, _ := os.ReadDir(tmp)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "toolhost-sandbox-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
	}
})

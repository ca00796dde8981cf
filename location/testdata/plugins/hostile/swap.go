package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// swap replaces every socket in the directory the host gave it (its own server's
// among them) with a symbolic link to target, and says what it did.
func swap(target string) string {
	dir := os.Getenv("PLUGIN_UNIX_SOCKET_DIR")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "read dir: " + err.Error()
	}
	done := ""
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			p := filepath.Join(dir, e.Name())
			done += fmt.Sprintf("%s: remove %v, link %v; ", p, os.Remove(p), os.Symlink(target, p))
		}
	}
	return done
}

// cut shuts down every socket it holds, so that the host's next call dials again.
func cut() string {
	done := ""
	for fd := 3; fd < 1024; fd++ {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			done += fmt.Sprintf("%d: %v; ", fd, unix.Shutdown(fd, unix.SHUT_RDWR))
		}
	}
	return done
}

//go:build unix

package location_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/location"
)

// TestWatchConfigReplacedByAPipeOrDevice: a config replaced while active by a
// named pipe nobody writes, or a link to /dev/zero, is refused without blocking
// or reading without end: each shows as the config entry, the rules in force
// stay, and the next valid edit applies (the watcher was not held).
func TestWatchConfigReplacedByAPipeOrDevice(t *testing.T) {
	dir := workspace(t, denyRead)
	file := filepath.Join(dir, location.ConfigPath)
	l := watched(t, dir)
	for _, plant := range []func() error{
		func() error { return syscall.Mkfifo(file, 0o644) },
		func() error { return os.Symlink("/dev/zero", file) },
	} {
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		untilConfig(t, l, func() bool { return configErr(l) != nil })
		t.Log(configErr(l))
		if readOffered(t, l) {
			t.Error("the planted config dropped the deny")
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		writeJSON(t, file, obj{"permission": allowAll})
		untilConfig(t, l, func() bool { return readOffered(t, l) && configErr(l) == nil })
		writeJSON(t, file, denyRead)
		untilConfig(t, l, func() bool { return !readOffered(t, l) })
	}
}

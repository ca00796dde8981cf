package disktest

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// runChild runs the test again in a child process in new mount (and, unless
// root, user) namespaces, and judges it.
func runChild(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+pattern(t.Name()), "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+t.Name())
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if uid, gid := os.Geteuid(), os.Getegid(); uid != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
	}
	cmd.SysProcAttr = attr
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Skipf("disktest: cannot start the test in a mount namespace of its own for a small file system (%v); it needs Linux with root or unprivileged user namespaces", err)
	}
	judge(t, out, err)
}

// mount mounts, in the child, a tmpfs of size bytes at a new directory, after
// making every mount private so that none of this reaches the parent's namespace.
func mount(t *testing.T, size int64) *Disk {
	t.Helper()
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		t.Skipf("disktest: make the mounts private: %v; the test needs a small file system it cannot make here", err)
	}
	dir := t.TempDir()
	opts := "size=" + strconv.FormatInt(size, 10) + ",mode=0700"
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		t.Skipf("disktest: mount a tmpfs (%s) at %s: %v; the test needs a small file system it cannot make here", opts, dir, err)
	}
	t.Cleanup(func() { // before TempDir's removal, which cannot remove a mount point
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("disktest: unmount %s: %v", dir, err)
		}
	})
	return &Disk{Dir: dir}
}

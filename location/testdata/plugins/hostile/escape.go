package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inherited are the descriptors above 2 this process had before its main ran,
// but the Go runtime's own (anonymous inodes: its epoll and eventfd): whatever
// its parent leaked to it.
var inherited = func() []int {
	var fds []int
	for fd := 3; fd < 1024; fd++ {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT != 0 {
			fds = append(fds, fd)
		}
	}
	return fds
}()

// escapeInput says what the "escape" tool tries beyond what it finds itself.
type escapeInput struct {
	Files    []string `json:"files"`    // host files to chmod, chown, touch, setxattr, stat
	Watch    []string `json:"watch"`    // host directories to watch with inotify
	Unix     []string `json:"unix"`     // host path sockets to connect to
	Abstract []string `json:"abstract"` // host abstract socket names to connect to
	Listen   string   `json:"listen"`   // an abstract name to listen on (a host client will try it)
	Key      int      `json:"key"`      // the serial of a key the host's user added
	PIDs     []int    `json:"pids"`     // host processes to trace and read through /proc
	FillMiB  int      `json:"fill_mib"` // how much to write to TMPDIR at most
	Files2   int      `json:"fill_files"`
}

// escapeOS tries what issue 23 found open and more, one line per attempt: "ok ..."
// when it worked, else "denied: ERROR". The fill attempts report how far they got
// ("refused after ...").
func escapeOS(in escapeInput) map[string]string {
	r := map[string]string{}
	try := func(what string, err error) {
		if err != nil {
			r[what] = "denied: " + err.Error()
		} else {
			r[what] = "ok: SUCCEEDED"
		}
	}

	// Descriptors its parent leaked: read, write, send through each.
	if len(inherited) == 0 {
		r["inherited descriptors"] = "denied: none"
	}
	for _, fd := range inherited {
		var st unix.Stat_t
		unix.Fstat(fd, &st)
		_, rerr := unix.Pread(fd, make([]byte, 16), 0)
		_, werr := unix.Write(fd, []byte("hostile was here\n"))
		r[fmt.Sprintf("inherited descriptor %d (mode %o)", fd, st.Mode)] = fmt.Sprintf("ok: INHERITED (read: %v, write: %v)", rerr, werr)
	}

	// The keyring: the user's key, its own session keyring, a key of its own.
	if in.Key != 0 {
		_, err := unix.KeyctlBuffer(unix.KEYCTL_READ, in.Key, make([]byte, 256), 0)
		try("keyctl read the user's key", err)
	}
	_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	try("keyctl get the session keyring", err)
	_, err = unix.KeyctlSearch(unix.KEY_SPEC_SESSION_KEYRING, "user", "toolhost-test-secret", 0)
	try("keyctl search the session keyring", err)
	_, err = unix.AddKey("user", "hostile-key", []byte("planted"), unix.KEY_SPEC_SESSION_KEYRING)
	try("add_key to the session keyring", err)
	_, err = unix.AddKey("user", "hostile-key", []byte("planted"), unix.KEY_SPEC_USER_KEYRING)
	try("add_key to the user keyring", err)
	_, err = unix.RequestKey("user", "toolhost-test-secret", "", unix.KEY_SPEC_SESSION_KEYRING)
	try("request_key the user's key", err)

	// Metadata outside: what Landlock has no right for.
	for _, f := range in.Files {
		try("chmod 0777 "+f, os.Chmod(f, 0o777))
		try("chown "+f, os.Chown(f, os.Getuid(), os.Getgid()))
		try("utimes "+f, os.Chtimes(f, time.Unix(0, 0), time.Unix(0, 0)))
		try("setxattr "+f, unix.Setxattr(f, "user.hostile", []byte("x"), 0))
		_, err := os.Stat(f)
		try("stat "+f, err)
	}
	self, _ := os.Executable()
	try("chmod 04777 its own binary", os.Chmod(self, 0o4777))
	try("chmod 04755 /usr/bin/env", os.Chmod("/usr/bin/env", 0o4755))
	if ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err == nil {
		for _, d := range in.Watch {
			_, err := unix.InotifyAddWatch(ifd, d, unix.IN_ACCESS|unix.IN_OPEN)
			try("inotify watch "+d, err)
		}
		unix.Close(ifd)
	}

	// Sockets: the host's path sockets and abstract names, and a name of its own.
	for _, p := range in.Unix {
		c, err := net.DialTimeout("unix", p, time.Second)
		if err == nil {
			c.Close()
		}
		try("connect "+p, err)
	}
	for _, name := range in.Abstract {
		c, err := net.DialTimeout("unix", "@"+name, time.Second)
		if err == nil {
			c.Close()
		}
		try("connect abstract @"+name, err)
	}
	if in.Listen != "" {
		// Listening in its own network namespace works; the test checks that no host
		// client reaches it. The listener lives until the process ends.
		if l, err := net.Listen("unix", "@"+in.Listen); err == nil {
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Write([]byte("IMPOSTOR"))
					c.Close()
				}
			}()
			r["control: listen abstract @"+in.Listen] = "listening"
		} else {
			r["control: listen abstract @"+in.Listen] = "failed: " + err.Error()
		}
	}

	// Host processes: tracing, their /proc.
	for _, pid := range in.PIDs {
		try(fmt.Sprint("ptrace attach ", pid), unix.PtraceAttach(pid))
		_, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		try(fmt.Sprintf("read /proc/%d/environ", pid), err)
		_, err = os.ReadDir(fmt.Sprintf("/proc/%d/root/", pid))
		try(fmt.Sprintf("list /proc/%d/root", pid), err)
	}

	// What a Linux process reaches that is not a file path.
	try("mount a tmpfs", unix.Mount("tmpfs", os.Getenv("TMPDIR"), "tmpfs", 0, ""))
	try("unshare a user namespace", unix.Unshare(unix.CLONE_NEWUSER))
	try("unshare a mount namespace", unix.Unshare(unix.CLONE_NEWNS))
	if _, _, e := unix.RawSyscall(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0); e != 0 {
		try("clone into a new user namespace", e)
	} else {
		r["clone into a new user namespace"] = "ok: SUCCEEDED"
	}
	if f, err := os.Open("/proc/self/ns/net"); err == nil {
		try("setns its own network namespace", unix.Setns(int(f.Fd()), unix.CLONE_NEWNET))
		f.Close()
	} else {
		try("setns its own network namespace", err)
	}
	try("chroot", unix.Chroot("/"))
	attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{}))}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
	if err == nil {
		unix.Close(fd)
	}
	try("perf_event_open", err)
	var params [120]byte
	if _, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 8, uintptr(unsafe.Pointer(&params)), 0); e != 0 {
		try("io_uring_setup", e)
	} else {
		r["io_uring_setup"] = "ok: SUCCEEDED"
	}
	if _, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC, 0, 0); e != 0 {
		try("userfaultfd", e)
	} else {
		r["userfaultfd"] = "ok: SUCCEEDED"
	}
	if _, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0); e != 0 && e != unix.EINVAL && e != unix.EFAULT {
		try("bpf", e)
	} else {
		r["bpf"] = fmt.Sprintf("ok: REACHED THE KERNEL (%v)", e)
	}
	var handle struct {
		bytes uint32
		typ   int32
		data  [128]byte
	}
	handle.bytes = 128
	var mnt int32
	root, _ := unix.BytePtrFromString("/")
	if _, _, e := unix.Syscall6(unix.SYS_NAME_TO_HANDLE_AT, ^uintptr(99), uintptr(unsafe.Pointer(root)), uintptr(unsafe.Pointer(&handle)), uintptr(unsafe.Pointer(&mnt)), 0, 0); e == 0 {
		if fd, _, e := unix.Syscall(unix.SYS_OPEN_BY_HANDLE_AT, ^uintptr(99), uintptr(unsafe.Pointer(&handle)), unix.O_RDONLY); e != 0 {
			try("open_by_handle_at", e)
		} else {
			unix.Close(int(fd))
			r["open_by_handle_at"] = "ok: SUCCEEDED"
		}
	}
	try("mknod a memory device in TMPDIR", unix.Mknod(filepath.Join(os.Getenv("TMPDIR"), "mem"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 1))))
	nl, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
	if err == nil {
		unix.Close(nl)
	}
	try("netlink socket", err)
	for _, p := range []string{"/etc/passwd", "/etc/shadow", "/sys/kernel", "/dev/mem", "/dev/kmsg", "/dev/tty", "/proc/sysvipc/shm", "/proc/kallsyms", "/root", "/home", "/var/run/docker.sock", "/run/user"} {
		_, err := os.Stat(p)
		try("stat "+p, err)
	}
	try("chdir out of its root", func() error {
		if err := os.Chdir("../../../../.."); err != nil {
			return err
		}
		wd, _ := os.Getwd()
		if wd != "/" {
			return nil
		}
		_, err := os.Stat("oldroot")
		return err
	}())

	// Its TMPDIR: bytes, then files, until refused.
	tmp := os.Getenv("TMPDIR")
	if in.FillMiB > 0 {
		dir := filepath.Join(tmp, "fill-bytes")
		os.Mkdir(dir, 0o700)
		chunk := make([]byte, 1<<20)
		n := 0
		var werr error
		for n < in.FillMiB {
			f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(n)), os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				_, err = f.Write(chunk)
				f.Close()
			}
			if err != nil {
				werr = err
				break
			}
			n++
		}
		if werr != nil {
			r["fill TMPDIR with bytes"] = fmt.Sprintf("refused after %d MiB: %v", n, werr)
		} else {
			r["fill TMPDIR with bytes"] = fmt.Sprintf("ok: WROTE %d MiB", n)
		}
		os.RemoveAll(dir)
	}
	if in.Files2 > 0 {
		dir := filepath.Join(tmp, "fill-files")
		os.Mkdir(dir, 0o700)
		n := 0
		var werr error
		for n < in.Files2 {
			if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(n)), nil, 0o600); err != nil {
				werr = err
				break
			}
			n++
		}
		if werr != nil {
			r["fill TMPDIR with files"] = fmt.Sprintf("refused after %d files: %v", n, werr)
		} else {
			r["fill TMPDIR with files"] = fmt.Sprintf("ok: MADE %d FILES", n)
		}
		os.RemoveAll(dir)
	}
	return r
}

//go:build linux

package sandbox_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/sandbox"
)

// helper runs the test binary's helper roles (SANDBOX_HELPER); it returns false
// when the binary runs as the test itself.
func helper() bool {
	role := os.Getenv("SANDBOX_HELPER")
	if role == "" {
		return false
	}
	marker := os.Getenv("SANDBOX_MARKER")
	self, _ := os.Executable()
	switch role {
	case "forker":
		// Orphans of every kind: a shell's background child, a setsid'd one, and a
		// double-forked Go child that calls setsid.
		_ = exec.Command("/bin/sh", "-c", "sleep "+marker+" & setsid sleep "+marker+" &").Run()
		c := exec.Command(self)
		c.Env = []string{"SANDBOX_HELPER=doublefork", "SANDBOX_MARKER=" + marker}
		_ = c.Run()
		fmt.Println("ready")
		if os.Getenv("SANDBOX_EXIT") != "" {
			os.Exit(3)
		}
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(time.Hour) // until the test kills it
	case "doublefork":
		c := exec.Command(self, "-marker="+marker)
		c.Env = []string{"SANDBOX_HELPER=sleeper"}
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		_ = c.Start()
	case "sleeper":
		time.Sleep(time.Hour) // until the test kills it
	case "spinner":
		// SANDBOX_THREADS threads that only burn CPU, on CPU SANDBOX_CPU, until the
		// test kills it.
		n := atoi(os.Getenv("SANDBOX_THREADS"))
		var on unix.CPUSet
		on.Set(atoi(os.Getenv("SANDBOX_CPU")))
		// A P more than the spinners: with asynchronous preemption off, a spinner
		// that takes the P of a preempted main goroutine never gives it back, and
		// "ready" was never written (seen: TestCPUQuota hung for 10 minutes).
		runtime.GOMAXPROCS(n + 1)
		for range n {
			go func() {
				runtime.LockOSThread()
				if err := unix.SchedSetaffinity(0, &on); err != nil {
					fmt.Println(err)
					os.Exit(1)
				}
				for {
				}
			}()
		}
		fmt.Println("ready")
		select {}
	case "host":
		// A host that starts a contained forker, says ready, and waits to be killed.
		// With SANDBOX_SCRIPT, the program is that shell script, with the marker,
		// SANDBOX_SCRIPT_N and "stay".
		program, argv, env := self, []string{self}, []string{"SANDBOX_HELPER=forker", "SANDBOX_MARKER=" + marker}
		script := os.Getenv("SANDBOX_SCRIPT")
		if script != "" {
			program, argv, env = "/bin/sh", []string{"sh", script, marker, os.Getenv("SANDBOX_SCRIPT_N"), "stay"}, nil
		}
		b, err := sandbox.Command(sandbox.Spec{Name: "h", Contain: true, Mode: sandbox.Mode(os.Getenv("SANDBOX_MODE"))},
			program, argv, "/", env)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		out, _ := b.StdoutPipe()
		if err := b.Start(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		if script != "" {
			fmt.Println("ready")
		} else {
			line, _ := bufio.NewReader(out).ReadString('\n')
			fmt.Print(line)
		}
		time.Sleep(time.Hour) // until the test kills it
	case "worldhost":
		// A host that starts three confined forkers (in worlds where the machine
		// allows), says ready, and waits to be killed; or, with SANDBOX_ONCE, runs one
		// confined program to its end and exits as toolhost does.
		n := 3
		if os.Getenv("SANDBOX_ONCE") != "" {
			n = 1
		}
		var boxes []*sandbox.Box
		for range n {
			b, err := sandbox.Command(sandbox.Spec{Name: "w", Confine: &sandbox.Confinement{}},
				self, []string{self}, "/", []string{"SANDBOX_HELPER=forker", "SANDBOX_MARKER=" + marker, "SANDBOX_EXIT=" + os.Getenv("SANDBOX_ONCE")})
			if err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			out, _ := b.StdoutPipe()
			if err := b.Start(); err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			line, _ := bufio.NewReader(out).ReadString('\n')
			if line != "ready\n" {
				fmt.Println("forker said", line)
				os.Exit(1)
			}
			boxes = append(boxes, b)
		}
		if os.Getenv("SANDBOX_ONCE") != "" {
			for _, b := range boxes {
				b.Wait()
			}
			sandbox.DropReserves()
			os.Exit(0)
		}
		fmt.Println("ready")
		time.Sleep(time.Hour) // until the test kills it
	case "probe":
		// The confinement probes: one line per attempt, "ok" or the error. First the
		// limits the program runs with.
		var lim syscall.Rlimit
		syscall.Getrlimit(syscall.RLIMIT_DATA, &lim)
		fmt.Println("rlimit-data", lim.Cur, lim.Max)
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var caps [2]unix.CapUserData
		if err := unix.Capget(&hdr, &caps[0]); err == nil {
			fmt.Printf("capabilities %x %x\n", caps[0].Effective|caps[0].Permitted, caps[1].Effective|caps[1].Permitted)
		}
		try := func(what string, err error) {
			if err == nil {
				fmt.Println(what, "ok")
			} else {
				fmt.Println(what, "denied:", err)
			}
		}
		_, err := os.ReadFile("/etc/hostname")
		try("read-hostname", err)
		_, err = os.ReadFile(os.Getenv("SANDBOX_WORKSPACE_FILE"))
		try("read-workspace", err)
		err = os.WriteFile(os.Getenv("SANDBOX_OUTSIDE")+"/x", []byte("x"), 0o600)
		try("write-outside", err)
		err = os.WriteFile(os.Getenv("TMPDIR")+"/x", []byte("x"), 0o600)
		try("write-tmp", err)
		_, err = os.ReadFile(self)
		try("read-self", err)
		c, err := net.Dial("tcp", os.Getenv("SANDBOX_TCP"))
		if err == nil {
			c.Close()
		}
		try("tcp", err)
		d := net.Dialer{}
		d.SetMultipathTCP(true)
		if c, err = d.Dial("tcp", os.Getenv("SANDBOX_TCP")); err == nil {
			c.Close()
		}
		try("mptcp", err)
		if c, err = net.Dial("udp", "127.0.0.1:53"); err == nil {
			c.Close()
		}
		try("udp", err)
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err == nil {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
		}
		try("unix", err)
		pid, _ := strconv.Atoi(os.Getenv("SANDBOX_SIGNAL_PID"))
		try("signal", syscall.Kill(pid, syscall.SIGCONT))
	case "world":
		// What a program finds of the host in its world: one line per attempt.
		try := func(what string, err error) {
			if err == nil {
				fmt.Println(what, "ok")
			} else {
				fmt.Println(what, "denied:", err)
			}
		}
		for fd := 3; fd < 256; fd++ {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
				var st unix.Stat_t
				unix.Fstat(fd, &st)
				fmt.Printf("inherited-%d ok %d:%d\n", fd, st.Dev, st.Ino)
			}
		}
		if id, _ := strconv.Atoi(os.Getenv("SANDBOX_KEY")); id != 0 {
			_, err := unix.KeyctlBuffer(unix.KEYCTL_READ, id, make([]byte, 64), 0)
			try("key-read", err)
		}
		_, err := unix.AddKey("user", "planted", []byte("x"), unix.KEY_SPEC_SESSION_KEYRING)
		try("key-add", err)
		outside := os.Getenv("SANDBOX_OUTSIDE")
		_, err = os.Stat(outside)
		try("stat-outside", err)
		try("chmod-outside", os.Chmod(outside, 0o777))
		if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err == nil {
			_, err = unix.InotifyAddWatch(fd, filepath.Dir(outside), unix.IN_ACCESS)
			try("inotify-outside", err)
			unix.Close(fd)
		}
		c, err := net.Dial("unix", os.Getenv("SANDBOX_SOCKET"))
		if err == nil {
			c.Close()
		}
		try("connect-host-socket", err)
		// A datagram socket reaches a path without connect(2).
		if s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			try("send-host-dgram", err)
		} else {
			try("send-host-dgram", unix.Sendto(s, []byte("dgram"), 0, &unix.SockaddrUnix{Name: os.Getenv("SANDBOX_DGRAM")}))
			unix.Close(s)
		}
		if name := os.Getenv("SANDBOX_ABSTRACT"); name != "" {
			if c, err := net.Dial("unix", "@"+name); err == nil {
				c.Close()
				try("connect-host-abstract", nil)
			} else {
				try("connect-host-abstract", err)
			}
		}
		try("mount", unix.Mount("tmpfs", os.Getenv("TMPDIR"), "tmpfs", 0, ""))
		try("unshare-user", unix.Unshare(unix.CLONE_NEWUSER))
		_, err = os.ReadFile("/proc/" + os.Getenv("SANDBOX_HOST_PID") + "/environ")
		try("read-host-environ", err)
		try("ptrace-host", unix.PtraceAttach(atoi(os.Getenv("SANDBOX_HOST_PID"))))
		// Its cgroups as /proc/self/cgroup shows them: a path but "/" is the host's.
		if data, err := os.ReadFile("/proc/self/cgroup"); err != nil {
			try("see-host-cgroup", err)
		} else {
			var host []string
			for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				if !strings.HasSuffix(line, ":/") {
					host = append(host, line)
				}
			}
			if len(host) > 0 {
				fmt.Println("see-host-cgroup ok", strings.Join(host, " "))
			} else {
				try("see-host-cgroup", errors.New("each of its cgroups is its root"))
			}
		}
		if tmp := os.Getenv("TMPDIR"); tmp != "" { // none without Landlock or a world
			try("write-tmp", os.WriteFile(tmp+"/x", []byte("x"), 0o600))
			n, err := fill(tmp+"/big", 1<<20, atoi(os.Getenv("SANDBOX_FILL_MIB")))
			fmt.Printf("fill-bytes %d MiB: %v\n", n, err)
			n, err = fill(tmp+"/many", 0, atoi(os.Getenv("SANDBOX_FILL_FILES")))
			fmt.Printf("fill-files %d: %v\n", n, err)
		}
		if listen := os.Getenv("SANDBOX_LISTEN"); listen != "" {
			l, err := net.Listen("unix", "@"+listen)
			try("listen-abstract", err)
			if err == nil {
				defer l.Close()
			}
			// Held until the test has tried it.
			bufio.NewReader(os.Stdin).ReadString('\n')
		}
	case "spawner":
		// Starts sleeping children until the kernel refuses one.
		var kids []*exec.Cmd
		for i := range 200 {
			c := exec.Command("/bin/sleep", "60")
			if err := c.Start(); err != nil {
				fmt.Println("refused:", err)
				break
			}
			kids = append(kids, c)
			fmt.Println("spawned", i+1)
		}
		for _, c := range kids {
			c.Process.Kill()
			c.Wait()
		}
	case "litter":
		// Reports how it finds its TMPDIR, then leaves what it can there: files, a
		// directory, a symlink out, a wide-open mode and (SANDBOX_XATTR) a user
		// extended attribute on the directory itself.
		tmp := os.Getenv("TMPDIR")
		entries, _ := os.ReadDir(tmp)
		// In a world whose TMPDIR is /tmp, its own binary (a test binary under
		// /tmp), or the directories that lead to it, are there too.
		entries = slices.DeleteFunc(entries, func(e os.DirEntry) bool {
			p := filepath.Join(tmp, e.Name())
			return p == self || strings.HasPrefix(self, p+"/")
		})
		fi, _ := os.Stat(tmp)
		n, _ := unix.Listxattr(tmp, nil)
		fmt.Printf("found %d %o %d\n", len(entries), fi.Mode().Perm(), n)
		os.WriteFile(tmp+"/f", []byte("f"), 0o644)
		os.MkdirAll(tmp+"/d/e", 0o755)
		os.WriteFile(tmp+"/d/e/f", []byte("f"), 0o644)
		os.Symlink(os.Getenv("SANDBOX_OUTSIDE"), tmp+"/out")
		if err := os.Chmod(tmp, 0o777); err != nil {
			fmt.Println("chmod:", err)
		}
		if os.Getenv("SANDBOX_XATTR") != "" {
			if err := unix.Setxattr(tmp, "user.left", []byte("x"), 0); err != nil {
				fmt.Println("setxattr:", err)
			}
		}
	case "exit":
		code, _ := strconv.Atoi(os.Getenv("SANDBOX_CODE"))
		if code < 0 {
			time.Sleep(time.Minute) // the test kills it (an init ignores its own signals)
		}
		fmt.Fprintln(os.Stderr, "bye")
		os.Exit(code)
	default:
		panic("unknown helper role " + role)
	}
	os.Exit(0)
	return true
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// fill makes up to n files of size bytes in a new directory dir until one fails,
// and says how many it made.
func fill(dir string, size, n int) (int, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return 0, err
	}
	data := make([]byte, size)
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), data, 0o600); err != nil {
			return i, err
		}
	}
	return n, nil
}

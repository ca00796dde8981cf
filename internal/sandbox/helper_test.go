//go:build linux

package sandbox_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
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
		time.Sleep(time.Hour)
	case "doublefork":
		c := exec.Command(self, "-marker="+marker)
		c.Env = []string{"SANDBOX_HELPER=sleeper"}
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		_ = c.Start()
	case "sleeper":
		time.Sleep(time.Hour)
	case "host":
		// A host that starts a contained forker, says ready, and waits to be killed.
		b, err := sandbox.Command(sandbox.Spec{Name: "h", Contain: true, Mode: sandbox.Mode(os.Getenv("SANDBOX_MODE"))},
			self, []string{self}, "/", []string{"SANDBOX_HELPER=forker", "SANDBOX_MARKER=" + marker})
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		out, _ := b.Cmd.StdoutPipe()
		if err := b.Start(); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		fmt.Print(line)
		time.Sleep(time.Hour)
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

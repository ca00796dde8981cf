package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// redInput says what the "red" tool tries: descriptors passed over sockets, other
// processes traced and read, programs executed, cgroups written.
type redInput struct {
	PIDs     []int    `json:"pids"`     // host processes (the host, another plugin) to trace and read
	Planted  string   `json:"planted"`  // the name of the memfd (a TMPDIR file where memfd_create is refused) it sends over every socket in its socket directory
	Peers    []string `json:"peers"`    // path sockets another plugin listens on (see meet)
	Abstract []string `json:"abstract"` // abstract names another plugin listens on
	Files    []string `json:"files"`    // files another plugin made, to read
	Secret   string   `json:"secret"`   // a host file each program it executes tries to read
	Cgroups  []string `json:"cgroups"`  // host cgroup files to write (cgroup.procs, pids.max, freezer.state ...)
}

// redOS tries each, one line per attempt: "ok ..." when it worked, else
// "denied: ...". Lines starting "control: " say what it did without being a
// result (the test checks the host's side).
func redOS(in redInput) map[string]string {
	r := map[string]string{}
	try := func(what string, err error) {
		if err != nil {
			r[what] = "denied: " + err.Error()
		} else {
			r[what] = "ok: SUCCEEDED"
		}
	}

	// Descriptors: any that reached it over a socket, then one of its own sent to
	// every socket of its socket directory (the host's broker listeners among
	// them), then the other plugin's sockets.
	received := 0
	for fd := 3; fd < 1024; fd++ {
		fds, err := peekRights(fd)
		if err == nil {
			received += len(fds)
			for _, f := range fds {
				unix.Close(f)
			}
		}
	}
	if received > 0 {
		r["receive a descriptor on its sockets"] = fmt.Sprintf("ok: RECEIVED %d", received)
	} else {
		r["receive a descriptor on its sockets"] = "denied: none queued"
	}
	if in.Planted != "" {
		mfd, err := unix.MemfdCreate(in.Planted, unix.MFD_CLOEXEC)
		if err != nil { // refused: a file of its TMPDIR, which names it as well
			r["control: memfd "+in.Planted] = "refused: " + err.Error()
			mfd, err = unix.Open(filepath.Join(os.Getenv("TMPDIR"), in.Planted), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		}
		if err != nil {
			r["control: memfd "+in.Planted] = "FAILED: " + err.Error()
		} else {
			unix.Write(mfd, []byte("planted by the hostile plugin"))
			sent := 0
			filepath.WalkDir(os.Getenv("PLUGIN_UNIX_SOCKET_DIR"), func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type()&fs.ModeSocket != 0 && sendRights(p, mfd) == nil {
					sent++
				}
				return nil
			})
			r["control: sent a descriptor to sockets of its directory"] = strconv.Itoa(sent)
			unix.Close(mfd)
		}
	}
	for _, p := range in.Peers {
		r["meet at "+p] = meet(p)
	}
	for _, name := range in.Abstract {
		r["meet at abstract @"+name] = meet("@" + name)
	}
	for _, f := range in.Files {
		_, err := os.ReadFile(f)
		try("read the other plugin's "+f, err)
	}

	// Other processes: trace them, read their memory, their /proc, their
	// descriptors.
	for _, pid := range in.PIDs {
		try(fmt.Sprint("ptrace seize ", pid), unix.PtraceSeize(pid))
		buf := make([]byte, 64)
		_, err := unix.ProcessVMReadv(pid, []unix.Iovec{{Base: &buf[0], Len: 64}}, []unix.RemoteIovec{{Base: 0x400000, Len: 64}}, 0)
		if errors.Is(err, unix.EFAULT) || errors.Is(err, unix.EIO) {
			r[fmt.Sprint("process_vm_readv ", pid)] = "ok: REACHED ITS MEMORY (" + err.Error() + ")"
		} else {
			try(fmt.Sprint("process_vm_readv ", pid), err)
		}
		for _, f := range []string{"environ", "cmdline", "mem", "maps", "stat", "cgroup"} {
			_, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
			try(fmt.Sprintf("read /proc/%d/%s", pid, f), err)
		}
		_, err = os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		try(fmt.Sprintf("list /proc/%d/fd", pid), err)
		_, err = os.Open(fmt.Sprintf("/proc/%d/fd/0", pid))
		try(fmt.Sprintf("open /proc/%d/fd/0", pid), err)
		// A pidfd itself only tells when the process ends; what it is for (its
		// descriptors, a signal) is tried with it.
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			try(fmt.Sprint("pidfd_open ", pid), err)
		} else {
			r[fmt.Sprint("control: pidfd_open ", pid)] = "opened"
			var got []int
			for fd := range 32 {
				if nfd, err := unix.PidfdGetfd(pidfd, fd, 0); err == nil {
					got = append(got, fd)
					unix.Close(nfd)
				} else if !errors.Is(err, unix.EBADF) {
					try(fmt.Sprintf("pidfd_getfd %d of %d", fd, pid), err)
					break
				}
			}
			if len(got) > 0 {
				r[fmt.Sprint("pidfd_getfd of ", pid)] = fmt.Sprintf("ok: TOOK DESCRIPTORS %v", got)
			}
			try(fmt.Sprint("pidfd_send_signal SIGSTOP to ", pid), unix.PidfdSendSignal(pidfd, unix.SIGSTOP, nil, 0))
			unix.Close(pidfd)
		}
		if _, _, e := unix.Syscall6(unix.SYS_KCMP, uintptr(os.Getpid()), uintptr(pid), 0 /* KCMP_FILE */, 0, 0, 0); e != 0 {
			try(fmt.Sprint("kcmp with ", pid), e)
		} else {
			r[fmt.Sprint("kcmp with ", pid)] = "ok: COMPARED"
		}
	}

	// Programs it executes: each checks it is as confined as its parent.
	for what, err := range execAttempts(in.Secret) {
		r[what] = err
	}

	// Cgroups: what it sees of its own, then the host's files it was told about.
	if data, err := os.ReadFile("/proc/self/cgroup"); err != nil {
		try("see its host's cgroups in /proc/self/cgroup", err)
	} else {
		var outside []string
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[2] != "/" {
				outside = append(outside, line)
			}
		}
		if len(outside) > 0 {
			r["see its host's cgroups in /proc/self/cgroup"] = "ok: SEES " + strings.Join(outside, " ")
		} else {
			r["see its host's cgroups in /proc/self/cgroup"] = "denied: each is its own root"
		}
	}
	for _, f := range in.Cgroups {
		v := "0" // cgroup.procs: itself
		switch filepath.Base(f) {
		case "pids.max", "cpu.max", "memory.max":
			v = "max"
		case "cpu.shares", "cpu.weight":
			v = "10000"
		case "freezer.state":
			v = "FROZEN"
		case "cgroup.freeze", "cgroup.kill":
			v = "1"
		}
		try("write "+v+" to "+f, os.WriteFile(f, []byte(v), 0))
	}
	try("unshare a cgroup namespace", unix.Unshare(unix.CLONE_NEWCGROUP))
	return r
}

// peekRights returns the descriptors queued on socket fd, without taking its data.
func peekRights(fd int) ([]int, error) {
	oob := make([]byte, unix.CmsgSpace(4*16))
	_, oobn, _, _, err := unix.Recvmsg(fd, make([]byte, 1), oob, unix.MSG_PEEK|unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		if rights, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, rights...)
		}
	}
	return fds, nil
}

// sendRights connects to socket p and sends it one byte with fd.
func sendRights(p string, fd int) error {
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	unix.SetsockoptTimeval(s, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &unix.Timeval{Sec: 1})
	if err := unix.Connect(s, &unix.SockaddrUnix{Name: p}); err != nil {
		return err
	}
	return unix.Sendmsg(s, []byte{0}, unix.UnixRights(fd), nil, 0)
}

// meet connects to another plugin's socket and takes what it sends: "ok ..." when
// it connected at all.
func meet(addr string) string {
	c, err := net.DialTimeout("unix", addr, 2*time.Second)
	if err != nil {
		return "denied: " + err.Error()
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	uc.SetDeadline(time.Now().Add(2 * time.Second))
	buf, oob := make([]byte, 64), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return "ok: CONNECTED (read: " + err.Error() + ")"
	}
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for _, m := range msgs {
		if fds, err := unix.ParseUnixRights(&m); err == nil && len(fds) > 0 {
			f := os.NewFile(uintptr(fds[0]), "passed")
			data, _ := io.ReadAll(io.NewSectionReader(f, 0, 1<<10))
			f.Close()
			return fmt.Sprintf("ok: CONNECTED, RECEIVED A DESCRIPTOR: %q", data)
		}
	}
	return fmt.Sprintf("ok: CONNECTED, READ %q", buf[:n])
}

// meetInput says where the "meet" tool listens: it serves each connection a
// descriptor of a file it made with secret in it.
type meetInput struct {
	Abstract string `json:"abstract"`
	Secret   string `json:"secret"`
}

// listenMeet listens on a path socket in its TMPDIR and in its socket directory and
// on an abstract name, and leaves a file in TMPDIR and in /tmp; it reports where.
// Every connection gets a descriptor of the file. The listeners live until the
// process ends.
func listenMeet(in meetInput) map[string]string {
	r := map[string]string{}
	f, err := os.CreateTemp(os.Getenv("TMPDIR"), "meet-file-")
	if err != nil {
		r["error"] = err.Error()
		return r
	}
	f.WriteString(in.Secret)
	r["file"] = f.Name()
	if err := os.WriteFile("/tmp/hostile-meet", []byte(in.Secret), 0o644); err == nil {
		r["tmp file"] = "/tmp/hostile-meet"
	}
	serve := func(key, addr string) {
		l, err := net.Listen("unix", addr)
		if err != nil {
			r[key] = "failed: " + err.Error()
			return
		}
		r[key] = addr
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.(*net.UnixConn).WriteMsgUnix([]byte("M"), unix.UnixRights(int(f.Fd())), nil)
				c.Close()
			}
		}()
	}
	serve("tmp socket", filepath.Join(os.Getenv("TMPDIR"), "meet.sock"))
	serve("socket dir socket", filepath.Join(os.Getenv("PLUGIN_UNIX_SOCKET_DIR"), "meet.sock"))
	if in.Abstract != "" {
		serve("abstract", "@"+in.Abstract)
	}
	return r
}

// execAttempts runs a copy of itself ("check" role) each way a confined program
// might execute code, and says for each whether the program ran as confined as
// its parent ("denied: ..." when it did, or could not run).
func execAttempts(secret string) map[string]string {
	r := map[string]string{}
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	run := func(what string, cmd *exec.Cmd) {
		role := "check"
		if len(cmd.Env) > 0 {
			role = cmd.Env[0]
		}
		cmd.Env = append(os.Environ(), "HOSTILE_ROLE="+role, "HOSTILE_SECRET="+secret, "HOSTILE_SELF="+self)
		out, err := cmd.Output()
		if err != nil {
			r[what] = "denied: " + err.Error()
			return
		}
		var c checkReport
		if err := json.Unmarshal(out, &c); err != nil {
			r[what] = fmt.Sprintf("ok: RAN, SAID %q", out)
			return
		}
		if c.confined() {
			r[what] = "denied: ran " + c.String()
		} else {
			r[what] = "ok: ESCAPED " + c.String()
		}
	}
	tmp := os.Getenv("TMPDIR")
	copyTo := func(dst string, mode os.FileMode) error {
		data, err := os.ReadFile(self)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, data, 0o700); err != nil {
			return err
		}
		return os.Chmod(dst, mode)
	}
	run("exec itself", exec.Command(self))
	run("exec /proc/self/exe", exec.Command("/proc/self/exe"))
	if err := copyTo(filepath.Join(tmp, "copy"), 0o755); err != nil {
		r["exec a copy written to TMPDIR"] = "denied: write: " + err.Error()
	} else {
		run("exec a copy written to TMPDIR", exec.Command(filepath.Join(tmp, "copy")))
	}
	if err := copyTo(filepath.Join(tmp, "suid"), 0o4755|os.ModeSetuid); err != nil {
		r["exec a setuid copy in TMPDIR"] = "denied: write: " + err.Error()
	} else {
		run("exec a setuid copy in TMPDIR", exec.Command(filepath.Join(tmp, "suid")))
	}
	c := exec.Command(self)
	c.Env = []string{"memfd"}
	run("exec from a memfd (execveat)", c)
	for _, p := range []string{"/usr/bin/su", "/usr/bin/sudo", "/usr/bin/passwd", "/bin/mount"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSetuid != 0 {
			out, err := exec.Command(p, "--help").CombinedOutput()
			r["exec setuid "+p] = fmt.Sprintf("control: %v %.60q", err, out)
		}
	}
	return r
}

// checkReport is what a program it executed found of its own confinement.
type checkReport struct {
	EUID       int    `json:"euid"`
	CapEff     uint64 `json:"cap_eff"`
	NoNewPrivs int    `json:"no_new_privs"`
	Seccomp    int    `json:"seccomp"`
	Secret     string `json:"secret"` // what reading the host's file did
}

func (c checkReport) confined() bool {
	return c.CapEff == 0 && c.NoNewPrivs == 1 && c.Seccomp == 2 && strings.HasPrefix(c.Secret, "denied")
}

func (c checkReport) String() string {
	return fmt.Sprintf("euid %d, capabilities %#x, no_new_privs %d, seccomp %d, secret %s", c.EUID, c.CapEff, c.NoNewPrivs, c.Seccomp, c.Secret)
}

// check reports the calling process's confinement on stdout (the "check" role).
func check() {
	var c checkReport
	c.EUID = os.Geteuid()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err == nil {
		c.CapEff = uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	} else {
		c.CapEff = ^uint64(0)
	}
	c.NoNewPrivs, _ = unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	c.Seccomp, _ = unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if s := os.Getenv("HOSTILE_SECRET"); s != "" {
		if _, err := os.ReadFile(s); err != nil {
			c.Secret = "denied"
		} else {
			c.Secret = "READ"
		}
	} else {
		c.Secret = "denied (none given)"
	}
	json.NewEncoder(os.Stdout).Encode(c)
}

// execMemfd copies its own binary into a memfd and executes that (the "memfd"
// role), as the "check" role.
func execMemfd() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "memfd:", err)
		os.Exit(3)
	}
	self, err := os.Open(os.Getenv("HOSTILE_SELF"))
	if err != nil {
		fail(err)
	}
	fd, err := unix.MemfdCreate("hostile-exec", 0)
	if err != nil {
		fail(err)
	}
	mf := os.NewFile(uintptr(fd), "memfd")
	if _, err := io.Copy(mf, self); err != nil {
		fail(err)
	}
	empty, _ := unix.BytePtrFromString("")
	argv, _ := syscall.SlicePtrFromStrings([]string{"hostile"})
	envv, _ := syscall.SlicePtrFromStrings([]string{"HOSTILE_ROLE=check", "HOSTILE_SECRET=" + os.Getenv("HOSTILE_SECRET")})
	_, _, e := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)), uintptr(unsafe.Pointer(&argv[0])),
		uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH, 0)
	fail(e)
}

// spawnMore leaves, beside spawn's, processes that try harder to outlive the
// plugin, each carrying marker: a sleep that ignores SIGTERM, SIGHUP and SIGINT
// in a session of its own; and a child subreaper that adopts a double-forked
// grandchild (its orphans are its own, not its launcher's) and sleeps itself.
func spawnMore(marker string) error {
	if err := exec.Command("/bin/sh", "-c", "trap '' TERM HUP INT; setsid sh -c \"trap '' TERM HUP INT; exec sleep "+marker+"\" &").Run(); err != nil {
		return err
	}
	self, _ := os.Executable()
	c := exec.Command(self, marker)
	c.Env = append(os.Environ(), "HOSTILE_ROLE=subreaper", "HOSTILE_MARKER="+marker)
	out, err := c.StdoutPipe()
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	// It says when its grandchild is adopted; it is left running.
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "adopted\n" {
		return fmt.Errorf("subreaper said %q", line)
	}
	go c.Wait()
	return nil
}

// subreaper is the "subreaper" role: it becomes a child subreaper, starts a
// double fork whose grandchild it adopts, says so, and sleeps.
func subreaper() {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Println("prctl:", err)
		os.Exit(1)
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	self, _ := os.Executable()
	c := exec.Command(self)
	c.Env = append(os.Environ(), "HOSTILE_ROLE=doublefork")
	c.Run()
	fmt.Println("adopted")
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); errors.Is(err, unix.ECHILD) {
			time.Sleep(time.Hour) // a helper process waiting to be killed
		}
	}
}

// deepConnect connects to the unix socket target from a process depth levels
// below itself (a chain of shells, each waiting for the next), and reports what
// the server did: "ok: SERVED ..." when it answered, else "refused: ...".
func deepConnect(target string, depth int) string {
	const level = `if [ "$1" -gt 0 ]; then sh -c "$0" "$0" $(($1-1)); else exec "$HOSTILE_SELF"; fi`
	self, _ := os.Executable()
	c := exec.Command("/bin/sh", "-c", level, level, strconv.Itoa(depth))
	c.Env = append(os.Environ(), "HOSTILE_ROLE=connect", "HOSTILE_TARGET="+target, "HOSTILE_SELF="+self)
	out, err := c.Output()
	if err != nil {
		return fmt.Sprintf("failed: %v (%s)", err, out)
	}
	return strings.TrimSpace(string(out))
}

// connectRole is the "connect" role: it connects to HOSTILE_TARGET and prints
// what the server said.
func connectRole() {
	c, err := net.DialTimeout("unix", os.Getenv("HOSTILE_TARGET"), 2*time.Second)
	if err != nil {
		fmt.Println("denied:", err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		fmt.Printf("ok: SERVED %q\n", buf[:n])
		return
	}
	fmt.Println("refused:", err)
}

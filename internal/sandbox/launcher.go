//go:build linux

package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The launcher is this binary re-executed with argv[0] launcherArg0 and its plan in
// the environment variable specEnv (removed before the program starts). It reports
// to the host on fd 3 (statusFD): "started", then "exit N" or "signal N"; or
// "error MESSAGE" if the program could not be started.
const (
	launcherArg0 = "toolhost-sandbox"
	probeArg0    = "toolhost-sandbox-probe"
	specEnv      = "TOOLHOST_SANDBOX_SPEC"
	statusFD     = 3
)

// HostPIDEnv is set in a contained program's environment to the host's pid as the
// program sees it (SO_PEERCRED reports the host's connections with it): the pid
// outside a PID namespace, 0 inside one, where every process outside the namespace
// has pid 0. A program's parent is the launcher, not the host.
const HostPIDEnv = "TOOLHOST_HOST_PID"

// plan is what the host tells the launcher.
type plan struct {
	Name string `json:"name"`
	Path string `json:"path"` // the program
	Mode Mode   `json:"mode"`
	// Confine, when set, is the whole confinement: defaults already added.
	Confine    *Confinement `json:"confine,omitempty"`
	NoNewPrivs bool         `json:"no_new_privs,omitempty"`
	// Filter installs the seccomp filter (seccompFilter without world) and, unless
	// Network, starts the program in a network namespace of its own.
	Filter  bool   `json:"filter,omitempty"`
	Network bool   `json:"network,omitempty"`
	Limits  Limits `json:"limits"`
	Cgroup  string `json:"cgroup,omitempty"` // the cgroup directory (ModeCgroup)
	HostPID bool   `json:"host_pid,omitempty"`
}

// init turns the process into a launcher (or a probe) before any package that sorts
// after this one has initialized: grpc and protobuf never start in a launcher.
func init() {
	switch os.Args[0] {
	case probeArg0:
		os.Exit(0)
	case launcherArg0:
		os.Exit(launch())
	}
}

// launch runs the program and returns the launcher's exit code.
func launch() int {
	runtime.LockOSThread() // never unlocked: the program inherits this thread's credentials
	syscall.CloseOnExec(statusFD)
	status := os.NewFile(statusFD, "status")
	fail := func(format string, args ...any) int {
		fmt.Fprintf(status, "error "+format, args...)
		return 125
	}
	var p plan
	if err := json.Unmarshal([]byte(os.Getenv(specEnv)), &p); err != nil {
		return fail("bad launch plan: %v", err)
	}
	os.Unsetenv(specEnv)
	hostPID := os.Getppid() // 0 inside a new PID namespace

	if p.Mode == ModeSubreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fail("become a child subreaper: %v", err)
		}
	}
	// Before the program exists, so a dying host is never missed: the parent-death
	// signal is SIGTERM outside a namespace (see stopTree).
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1)

	if err := setLimits(p.Limits); err != nil {
		return fail("%v", err)
	}
	if p.NoNewPrivs || p.Confine != nil {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fail("no_new_privs: %v", err)
		}
	}
	if p.Confine != nil {
		if err := restrict(p.Path, p.Confine); err != nil {
			return fail("confine: %v", err)
		}
		if err := dropCapabilities(); err != nil {
			return fail("confine: %v", err)
		}
	}

	cmd := exec.Command(p.Path)
	cmd.Args = os.Args[1:]
	// The program's view of the host: its pid outside a namespace, 0 inside one
	// (the kernel reports every process outside the namespace as pid 0).
	cmd.Env = os.Environ()
	if p.HostPID {
		cmd.Env = append(cmd.Env, HostPIDEnv+"="+strconv.Itoa(hostPID))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Its own process group, so a forwarded signal reaches the program's helpers
	// as the host's group signal used to; in the host's session (see Box.cpuLayers);
	// outside a namespace it dies with this thread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.Mode != ModeNamespace {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if p.Filter {
		// Landlock's TCP rules do not cover every protocol (UDP; MPTCP sockets pass
		// them on Linux 6.18), nor any socket where there is no Landlock: a seccomp
		// filter allows only AF_UNIX sockets, and refuses the keyring calls. And the
		// program gets its own network namespace (loopback only, down; pathname
		// unix sockets, the plugin's broker, work across it), where its abstract
		// unix names are its own. Where the kernel refuses that, the rest remains.
		if _, err := denyNetwork(p.Network); err != nil {
			return fail("%v", err)
		}
		if !p.Network {
			cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET
		}
	}
	err := cmd.Start()
	if err != nil && cmd.SysProcAttr.Cloneflags != 0 {
		cmd.SysProcAttr.Cloneflags = 0
		err = cmd.Start()
	}
	if err != nil {
		return fail("start %s: %v", p.Path, err)
	}
	pid := cmd.Process.Pid
	fmt.Fprint(status, "started\n")

	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 || p.Mode != ModeNamespace && os.Getppid() != hostPID {
				// The host asked for the tree's end, or died.
				stopTree(p)
				os.Exit(137)
			}
			_ = syscall.Kill(-pid, sig.(syscall.Signal))
			_ = syscall.Kill(pid, sig.(syscall.Signal))
		}
	}()

	// Reap everything (orphans of the tree are reparented to the launcher in a
	// namespace and as a subreaper) until the program itself is gone.
	var ws syscall.WaitStatus
	for {
		var w syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &w, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fail("wait: %v", err)
		}
		if wpid == pid {
			ws = w
			break
		}
	}
	// Not on this thread: Landlock confines it, and the tree's end reads /proc and
	// the cgroup's files.
	stopped := make(chan struct{})
	go func() {
		stopTree(p)
		close(stopped)
	}()
	<-stopped
	if ws.Signaled() {
		fmt.Fprintf(status, "signal %d\n", int(ws.Signal()))
		return 128 + int(ws.Signal())
	}
	fmt.Fprintf(status, "exit %d\n", ws.ExitStatus())
	return ws.ExitStatus()
}

// dropCapabilities makes sure the program the calling thread starts has no
// capability, even as root: SECBIT_NOROOT (locked) keeps root's execve from
// granting the full set, and the thread's inheritable and ambient sets are cleared.
// The thread keeps its own effective capabilities, which the clone of a namespace
// needs. Without CAP_SETPCAP there is nothing to drop; no_new_privs keeps file
// capabilities from being granted at the execve in either case.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	if caps[unix.CAP_SETPCAP/32].Effective&(1<<(unix.CAP_SETPCAP%32)) != 0 {
		bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
		if err != nil {
			return fmt.Errorf("read securebits: %w", err)
		}
		const noRoot = 1<<0 | 1<<1 // SECBIT_NOROOT, SECBIT_NOROOT_LOCKED (linux/securebits.h)
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits|noRoot), 0, 0, 0); err != nil {
			return fmt.Errorf("set SECBIT_NOROOT: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if caps[0].Inheritable != 0 || caps[1].Inheritable != 0 {
		caps[0].Inheritable, caps[1].Inheritable = 0, 0
		if err := unix.Capset(&hdr, &caps[0]); err != nil {
			return fmt.Errorf("clear inheritable capabilities: %w", err)
		}
	}
	return nil
}

// stopTree kills what is left of the tree. In a namespace the kernel does it when
// the launcher (PID 1) exits.
func stopTree(p plan) {
	switch p.Mode {
	case ModeSubreaper:
		sweep()
	case ModeCgroup:
		killCgroupExcept(p.Cgroup, os.Getpid())
	}
}

// sweep kills the launcher's whole tree and reaps its children until none is
// left. Each round kills every descendant one scan of /proc finds, not only the
// launcher's children: a tree as deep as its processes cap (each process the
// parent of the next, each in a session of its own) ends in a round, where killing
// children only took a round per level — longer than the host waits for the
// launcher before killing it (Box.Kill), which let the rest of the tree outlive
// it. A process forked after the scan has a parent the round kills, and is
// reparented to the launcher (a subreaper) before that parent can be reaped, so
// the next round finds it.
func sweep() {
	me := os.Getpid()
	for {
		found := descendantsOf(me)
		tree := map[int]bool{me: true}
		for _, pid := range found {
			tree[pid] = true
		}
		for _, pid := range found {
			killDescendant(pid, tree)
		}
		if _, err := syscall.Wait4(-1, nil, 0, nil); errors.Is(err, syscall.ECHILD) {
			return
		}
		for { // every other child already dead, before the next scan
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); err != nil || pid <= 0 {
				break
			}
		}
	}
}

// descendantsOf lists the live processes below root, parents before their children,
// from one scan of /proc.
func descendantsOf(root int) []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(pid); ok {
			children[pp] = append(children[pp], pid)
		}
	}
	var out []int
	seen := map[int]bool{root: true} // the scan is not atomic: a reused pid could loop
	for next := children[root]; len(next) > 0; {
		var below []int
		for _, pid := range next {
			if !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
				below = append(below, children[pid]...)
			}
		}
		next = below
	}
	return out
}

// killDescendant SIGKILLs pid, which the scan found in tree (the launcher and its
// descendants), through a pidfd when its parent is still one of tree: a
// grandchild's pid could have been reaped by its parent and reused by another
// process since the scan. Where it cannot have a pidfd (before Linux 5.3, or out
// of descriptors), it is killed by pid.
func killDescendant(pid int, tree map[int]bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if !errors.Is(err, unix.ESRCH) { // gone; else (no pidfd here) by pid, as before
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		return
	}
	defer unix.Close(fd)
	if pp, ok := parentOf(pid); ok && tree[pp] {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// inTree reports whether pid is below root, by its chain of parents.
func inTree(pid, root int) bool {
	for range maxTreeDepth {
		pp, ok := parentOf(pid)
		if !ok || pp <= 1 {
			return false
		}
		if pp == root {
			return true
		}
		pid = pp
	}
	return false
}

// maxTreeDepth bounds a walk up a chain of parents: the kernel's largest pid_max,
// more processes than a chain can hold.
const maxTreeDepth = 1 << 22

// childrenOf lists the live processes whose parent is ppid.
func childrenOf(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(pid); ok && pp == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// parentOf reads a process's parent from /proc/<pid>/stat.
func parentOf(pid int) (int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// killCgroupExcept SIGKILLs every process of the cgroup but self, until none is
// left (a process forking meanwhile is caught by the next round).
func killCgroupExcept(dir string, self int) {
	for range 1000 {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return
		}
		left := false
		for _, f := range strings.Fields(string(data)) {
			if pid, _ := strconv.Atoi(f); pid > 0 && pid != self {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				left = true
			}
		}
		for { // reap the launcher's own zombies among them
			if pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); err != nil || pid <= 0 {
				break
			}
		}
		if !left {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// setLimits applies the resource limits to the launcher, which the program
// inherits.
func setLimits(l Limits) error {
	set := func(name string, res int, v int64) error {
		var cur syscall.Rlimit
		if v < 0 || syscall.Getrlimit(res, &cur) != nil {
			return nil
		}
		if uint64(v) > cur.Max {
			v = int64(cur.Max) // only root may raise a hard limit
		}
		if err := syscall.Setrlimit(res, &syscall.Rlimit{Cur: uint64(v), Max: uint64(v)}); err != nil {
			return fmt.Errorf("set %s to %d: %w", name, v, err)
		}
		return nil
	}
	if err := set("RLIMIT_DATA", unix.RLIMIT_DATA, l.MemoryBytes); err != nil {
		return err
	}
	// syscall.Setrlimit, not unix's: it also stops the runtime from restoring the
	// host's soft limit in the program.
	return set("RLIMIT_NOFILE", syscall.RLIMIT_NOFILE, l.OpenFiles)
}

// prlimit applies the resource limits to a started process, as setLimits does to the
// launcher (for a program started without one). ownUserNS adds RLIMIT_NPROC for
// Limits.Processes: the kernel counts it per user and user namespace, so it caps
// the tree only of a program alone in its user namespace (confinedNamespaceAttr).
func prlimit(pid int, l Limits, ownUserNS bool) error {
	set := func(name string, res int, v int64) error {
		var cur unix.Rlimit
		if v < 0 || unix.Prlimit(pid, res, nil, &cur) != nil {
			return nil
		}
		if uint64(v) > cur.Max {
			v = int64(cur.Max) // only root may raise a hard limit
		}
		if err := unix.Prlimit(pid, res, &unix.Rlimit{Cur: uint64(v), Max: uint64(v)}, nil); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("sandbox: set %s of pid %d to %d: %w", name, pid, v, err)
		}
		return nil
	}
	if err := set("RLIMIT_DATA", unix.RLIMIT_DATA, l.MemoryBytes); err != nil {
		return err
	}
	if ownUserNS {
		if err := set("RLIMIT_NPROC", unix.RLIMIT_NPROC, l.Processes); err != nil {
			return err
		}
	}
	return set("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, l.OpenFiles)
}

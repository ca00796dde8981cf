//go:build linux

package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Box is one contained (and possibly confined) run of a program. Cmd is the command
// to start: the caller sets its Stdin, Stdout, Stderr (files, readers or writers)
// and ExtraFiles as for any exec.Cmd, or takes pipes from the Box's StdinPipe,
// StdoutPipe and StderrPipe (never Cmd's own: see StdoutPipe), then calls Start and
// Wait on the Box, never on Cmd. A program that starts in a world of its own is
// not started by Cmd.Start (see startWorld): Cmd then only describes it, its
// standard descriptors and ExtraFiles are passed as exec.Cmd would, and
// Cmd.Process is set once it runs. Safe for concurrent use once started.
type Box struct {
	// Cmd runs the program itself, or its launcher (cgroup and subreaper modes).
	Cmd *exec.Cmd

	spec    Spec
	mode    Mode
	plan    plan
	warning string
	tmpDir  string
	cgroup  string
	pids    string // a cgroup capping a confined program's processes (startConfined), or ""
	cpu     string // a cgroup v1 cpu directory giving it a CPU share (startConfined), or ""

	world      *worldPlan   // started in a world of its own (startWorld), or nil
	layers     []string     // what holds a program of a world, known once started
	childEnds  []*os.File   // the program's ends of the Box's pipes, closed once it has them
	callerEnds []*os.File   // the caller's ends of the Box's pipes, closed by Wait
	parentIO   []*os.File   // the host's ends of the copying pipes (startWorld)
	copying    []chan error // the goroutines copying them

	direct     bool     // no launcher: the program itself is its namespace's init
	confined   bool     // direct, started from a confined thread (startConfined)
	status     *os.File // read end of the launcher's status pipe
	statusW    *os.File
	statusRd   *bufio.Reader
	nsID       string // the launcher's PID namespace (ModeNamespace)
	programPID int

	exited chan struct{} // closed once Cmd.Wait returned

	mu       sync.Mutex
	released bool
}

// Command prepares program path with argv (argv[0] is the name it sees) in dir with
// exactly env (KEY=VALUE). extraWrite are directories the program must also be able
// to write when confined (a plugin's socket directory). Nothing runs until Start;
// Wait (or Release after a failed Start) removes what Command made.
func Command(spec Spec, path string, argv []string, dir string, env []string, extraWrite ...string) (*Box, error) {
	if env == nil {
		env = []string{}
	}
	// Where the host gives programs cgroup v1 cpu cgroups, it joins its own group
	// first (see cpuV1), so that every program it starts, uncontained ones too, is
	// in the host's group from then on.
	cpuV1()
	b := &Box{spec: spec, exited: make(chan struct{})}
	if spec.Mode == ModeNone || !spec.Contain && spec.Confine == nil {
		if spec.Confine != nil {
			if spec.Require {
				return nil, fmt.Errorf("%w: %q requires confinement and its containment is forced to none", ErrUnavailable, spec.Name)
			}
			b.warning = "containment forced to none: running unconfined"
		}
		cmd := exec.Command(path)
		cmd.Args, cmd.Dir, cmd.Env = argv, dir, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		b.Cmd, b.mode = cmd, ModeNone
		return b, nil
	}
	mode := spec.Mode
	if mode == "" {
		mode = DetectMode()
	}
	b.mode = mode
	b.plan = plan{Name: spec.Name, Path: path, Mode: mode, Limits: spec.Limits.withDefaults(), HostPID: spec.HostPID}
	if mode == ModeNamespace && spec.Confine == nil {
		// Contained, not confined: nothing has to run between fork and exec, so no
		// launcher (it costs a process start, milliseconds). The program is the
		// init of its own PID namespace: when it exits, or is killed (also by
		// Pdeathsig when the host dies), the kernel kills the rest of its tree. As
		// an init it gets only the signals it handles (Stop closes its input or
		// asks, then kills), and it inherits its tree's orphans (their zombies go
		// when it exits). It stops at its first instruction for its limits (see
		// startTraced).
		b.Cmd, b.direct = b.directCmd(path, argv, dir, env, namespaceAttr()), true
		return b, nil
	}
	if spec.Confine != nil {
		// What dead hosts left (a host killed before it could remove its own).
		sweepDeadHostsTemp()
	}
	if c := spec.Confine; c != nil && mode == ModeNamespace {
		if ok, _ := WorldAvailable(); ok {
			// A world of its own (startWorld), Landlock and seccomp a second layer.
			if !filepath.IsAbs(path) {
				path = filepath.Join(dir, path) // as exec.Cmd reads a relative path
			}
			if real, err := filepath.EvalSymlinks(path); err == nil {
				path = real
			}
			b.plan.Path = path
			if LandlockABI() > 0 {
				// The Write paths whole: the world binds the state directories they
				// hold read-only over them (a mount point is neither written nor
				// moved), which Landlock need not carve around (see writeAround).
				b.plan.Confine = &Confinement{
					Read:    append(append([]string{}, SystemRead...), c.Read...),
					Write:   append(append([]string{"/dev/null"}, extraWrite...), c.Write...),
					Network: c.Network,
				}
			}
			b.world = newWorldPlan(path, c, extraWrite, dir)
			env = append(withoutVar(env, "TMPDIR"), "TMPDIR="+worldTmp)
			b.Cmd, b.direct, b.confined = b.directCmd(path, argv, dir, env, &syscall.SysProcAttr{}), true, true
			return b, nil
		}
	}
	if c := spec.Confine; c != nil {
		b.plan.Filter, b.plan.Network = true, c.Network
		if LandlockABI() == 0 {
			if spec.Require {
				return nil, fmt.Errorf("%w: %q requires confinement and this kernel has no Landlock", ErrUnavailable, spec.Name)
			}
			b.warning = "confinement unavailable (no Landlock in this kernel): running unconfined"
			b.plan.NoNewPrivs = true
		} else {
			tmp, err := privateTempDir()
			if err != nil {
				return nil, fmt.Errorf("sandbox: temporary directory: %w", err)
			}
			b.tmpDir = tmp
			env = append(withoutVar(env, "TMPDIR"), "TMPDIR="+tmp)
			// The Locations' state directories its Write paths hold stay read-only
			// (see writeAround).
			ro, rw := writeAround(c.Write, protected(c, dir))
			full := &Confinement{
				Read:    append(append(append([]string{}, SystemRead...), c.Read...), ro...),
				Write:   append(append([]string{tmp, "/dev/null"}, extraWrite...), rw...),
				Network: c.Network,
			}
			b.plan.Confine = full
		}
	}
	if mode == ModeNamespace && threadStart() {
		// Confined in a namespace: started from a host thread confined for it (see
		// startConfined), as its namespace's init, without a launcher.
		b.Cmd, b.direct, b.confined = b.directCmd(path, argv, dir, env, confinedNamespaceAttr()), true, true
		return b, nil
	}
	if mode == ModeCgroup {
		dir, err := newCgroup(spec.Name, b.plan.Limits)
		if err != nil {
			b.Release()
			return nil, err
		}
		b.cgroup, b.plan.Cgroup = dir, dir
	}
	planJSON, err := json.Marshal(b.plan)
	if err != nil {
		b.Release()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = append([]string{launcherArg0}, argv...)
	cmd.Dir = dir
	cmd.Env = append(withoutVar(env, specEnv), specEnv+"="+string(planJSON))
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	switch mode {
	case ModeNamespace:
		attr = namespaceAttr()
	case ModeSubreaper, ModeCgroup:
		attr.Pdeathsig = syscall.SIGTERM // the launcher stops the tree, then exits
	}
	cmd.SysProcAttr = attr
	b.Cmd = cmd
	return b, nil
}

// directCmd is the command of a program started without a launcher.
func (b *Box) directCmd(path string, argv []string, dir string, env []string, attr *syscall.SysProcAttr) *exec.Cmd {
	cmd := exec.Command(path)
	cmd.Args, cmd.Dir, cmd.Env = argv, dir, env
	if b.spec.HostPID {
		cmd.Env = append(withoutVar(env, HostPIDEnv), HostPIDEnv+"=0") // outside its namespace
	}
	cmd.SysProcAttr = attr
	return cmd
}

// confinedNamespaceAttr is namespaceAttr for a program started from a confined
// thread (startConfined): it stops at its first instruction for its limits, and
// without root its user namespace maps no ids (Go would write the maps from the
// forking thread, which Landlock keeps out of /proc): the program sees itself, its
// files and its peers as the overflow user (65534); the kernel still checks its
// files and reports its credentials with the real ids. Alone in its user namespace,
// its tree is what RLIMIT_NPROC counts.
func confinedNamespaceAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWPID, Ptrace: true}
	if os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
	}
	return attr
}

// namespaceAttr starts a process as the init of a new PID namespace (through a user
// namespace when the host is not root), in a process group of its own in the
// host's session (see cpuLayers), killed when the host dies.
func namespaceAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWPID}
	if os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
	}
	return attr
}

func withoutVar(env []string, name string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// Mode returns the containment in force.
func (b *Box) Mode() Mode { return b.mode }

// Warning is what the box could not do (confinement unavailable), or "".
func (b *Box) Warning() string { return b.warning }

// Confined reports whether the program is confined: in a world of its own, or by
// Landlock.
func (b *Box) Confined() bool { return b.world != nil || b.plan.Confine != nil }

// ProcessesCapped reports whether Limits.Processes binds the program's tree: through
// a cgroup's pids.max, or through RLIMIT_NPROC in a user namespace of its own. Known
// once started.
func (b *Box) ProcessesCapped() bool {
	if b.pids != "" || b.cgroup != "" && fileExists(filepath.Join(b.cgroup, "pids.max")) {
		return true
	}
	if b.world != nil {
		return os.Geteuid() != 0 // alone in its user namespace (startWorld)
	}
	// RLIMIT_NPROC does not bind a root user's processes, in any namespace.
	attr := b.Cmd.SysProcAttr
	return attr != nil && attr.Ptrace && attr.Cloneflags&syscall.CLONE_NEWUSER != 0 && os.Geteuid() != 0
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TempDir is the program's private temporary directory on the host ("" when not
// confined, or in a world, whose TMPDIR exists only in it).
func (b *Box) TempDir() string { return b.tmpDir }

// Spec returns the box's spec.
func (b *Box) Spec() Spec { return b.spec }

// Start returns once the program has started, confined and limited (or failed to:
// the reason is the error). A failed Start releases everything.
func (b *Box) Start() (err error) {
	defer b.closeChildEnds(&err)
	// Whatever the host holds without close-on-exec (its parent's leaks, a
	// descriptor some code of the host opened so) stays out of every program it
	// starts; exec.Cmd passes the ones it is given by duplicating them.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if b.mode == ModeNone {
		return b.Cmd.Start()
	}
	if b.direct {
		return b.startDirect()
	}
	defer func() {
		if err != nil {
			b.Release()
		}
	}()
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	b.status, b.statusW, b.statusRd = r, w, bufio.NewReader(r)
	b.Cmd.ExtraFiles = []*os.File{w}
	if b.cgroup != "" {
		fd, err := syscall.Open(b.cgroup, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sandbox: cgroup: %w", err)
		}
		defer syscall.Close(fd)
		b.Cmd.SysProcAttr.UseCgroupFD, b.Cmd.SysProcAttr.CgroupFD = true, fd
	}
	if err := b.Cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("sandbox: start the launcher for %s (containment %s): %w", b.plan.Path, b.mode, err)
	}
	w.Close() // the launcher holds the only write end: EOF once it is gone
	line, _ := b.statusRd.ReadString('\n')
	if line != "started\n" {
		_ = b.Cmd.Wait()
		msg, _ := strings.CutPrefix(strings.TrimSpace(line), "error ")
		if msg == "" {
			msg = "the launcher exited: " + b.Cmd.ProcessState.String()
		}
		return fmt.Errorf("sandbox: %s: %s", b.plan.Path, msg)
	}
	if b.mode == ModeNamespace {
		b.nsID, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", b.Cmd.Process.Pid))
	}
	// The launcher's only child yet is the program (started by its locked thread).
	launcher := b.Cmd.Process.Pid
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", launcher, launcher)); err == nil {
		fmt.Sscan(string(data), &b.programPID)
	}
	if b.programPID == 0 {
		if kids := childrenOf(launcher); len(kids) > 0 {
			b.programPID = kids[0]
		}
	}
	track(b)
	return nil
}

// StdoutPipe returns a pipe that the program's standard output writes to, as
// exec.Cmd.StdoutPipe does: call it before Start; Wait closes the returned end once
// the program has exited, so read it to its end before calling Wait. Cmd's own
// StdoutPipe must not be used on a Box: a program started in a world of its own
// is not started by Cmd.Start, which alone closes the program's end of Cmd's pipes,
// so their reader would never see the end.
func (b *Box) StdoutPipe() (io.ReadCloser, error) {
	if b.Cmd.Stdout != nil {
		return nil, errors.New("sandbox: Stdout already set")
	}
	r, w, err := b.pipe()
	if err != nil {
		return nil, err
	}
	b.Cmd.Stdout = w
	return r, nil
}

// StderrPipe is StdoutPipe for the program's standard error.
func (b *Box) StderrPipe() (io.ReadCloser, error) {
	if b.Cmd.Stderr != nil {
		return nil, errors.New("sandbox: Stderr already set")
	}
	r, w, err := b.pipe()
	if err != nil {
		return nil, err
	}
	b.Cmd.Stderr = w
	return r, nil
}

// StdinPipe returns a pipe that the program's standard input reads from, as
// exec.Cmd.StdinPipe does: call it before Start; Wait closes it once the program
// has exited, and closing it earlier gives the program its end of input.
func (b *Box) StdinPipe() (io.WriteCloser, error) {
	if b.Cmd.Stdin != nil {
		return nil, errors.New("sandbox: Stdin already set")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	b.childEnds, b.callerEnds = append(b.childEnds, r), append(b.callerEnds, w)
	b.Cmd.Stdin = r
	return w, nil
}

// pipe makes an output pipe of the Box: read end the caller's, write end the
// program's.
func (b *Box) pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: %w", err)
	}
	b.childEnds, b.callerEnds = append(b.childEnds, w), append(b.callerEnds, r)
	return r, w, nil
}

// closeChildEnds closes the program's ends of the Box's pipes once Start is done
// (the program holds its own copies), and, when *err says it failed, the caller's
// too.
func (b *Box) closeChildEnds(err *error) {
	for _, f := range b.childEnds {
		f.Close()
	}
	b.childEnds = nil
	if *err != nil {
		b.closeCallerEnds()
	}
}

func (b *Box) closeCallerEnds() {
	for _, f := range b.callerEnds {
		f.Close()
	}
	b.callerEnds = nil
}

// startDirect starts a program that is its namespace's own init (see Command).
func (b *Box) startDirect() error {
	if b.world != nil || b.confined || threadStart() { // a start that can join it
		b.pids = newPidsCgroup(b.plan.Limits)
		b.cpu = newCPUCgroup(b.plan.Limits)
	}
	if b.world != nil {
		if err := b.startWorld(); err != nil {
			b.Release()
			return err
		}
	} else if b.confined {
		if err := b.startConfined(); err != nil {
			b.Release()
			return err
		}
	} else if threadStart() {
		b.Cmd.SysProcAttr.Ptrace = true
		if err := b.startTraced(); err != nil {
			b.Release()
			return err
		}
	} else {
		if err := b.Cmd.Start(); err != nil {
			return fmt.Errorf("sandbox: start %s (containment %s): %w", b.plan.Path, b.mode, err)
		}
		// Right after the clone: the program may run a little before its limits.
		if err := prlimit(b.Cmd.Process.Pid, b.plan.Limits, false); err != nil {
			b.Kill()
			_ = b.Wait()
			return err
		}
	}
	pid := b.Cmd.Process.Pid
	b.nsID, _ = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	b.programPID = pid
	track(b)
	if b.cpu != "" && b.plan.Limits.cfsQuota() == -1 || b.cpuFallback() {
		watchCPU(b)
	}
	return nil
}

// ProgramPID is the program's pid as the host sees it (the launcher's child), 0
// before Start or if the program exited at once. In ModeNone, and for a program
// that is its namespace's init, it is PID.
func (b *Box) ProgramPID() int {
	if b.mode == ModeNone || b.direct {
		return b.PID()
	}
	return b.programPID
}

// PID is the launcher's pid (the program's own in ModeNone or without a launcher),
// 0 before Start.
func (b *Box) PID() int {
	if b.Cmd.Process == nil {
		return 0
	}
	return b.Cmd.Process.Pid
}

// Wait waits for the program's exit, ends what is left of its tree and releases the
// box (temporary directory, cgroup). The error is nil for exit status 0, else an
// *ExitError describing the program's own exit (not the launcher's). Call it once.
func (b *Box) Wait() error {
	werr := b.Cmd.Wait()
	for _, done := range b.copying {
		<-done
	}
	b.closeCallerEnds()
	close(b.exited)
	if b.mode == ModeNone {
		return werr
	}
	ee := &ExitError{Code: -1, Limits: b.plan.Limits}
	if b.Cmd.ProcessState != nil {
		ee.Code = b.Cmd.ProcessState.ExitCode()
		if ws, ok := b.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ee.Signal = ws.Signal() // the launcher (or the program without one) was killed
		}
	}
	if b.statusRd == nil {
		// No launcher: the program's own status is what Cmd.Wait saw.
	} else if line, _ := b.statusRd.ReadString('\n'); line != "" {
		var n int
		if _, err := fmt.Sscanf(line, "exit %d", &n); err == nil {
			ee.Code, ee.Signal = n, 0
		} else if _, err := fmt.Sscanf(line, "signal %d", &n); err == nil {
			ee.Code, ee.Signal = -1, syscall.Signal(n)
		}
	}
	b.Release()
	if ee.Code == 0 && ee.Signal == 0 {
		return nil
	}
	return ee
}

// Signal asks the program to stop: the launcher forwards sig to the program's
// process group. SIGKILL is Kill.
func (b *Box) Signal(sig syscall.Signal) {
	if b.Cmd.Process == nil || b.isExited() {
		return
	}
	if sig == syscall.SIGKILL {
		b.Kill()
		return
	}
	if b.mode == ModeNone || b.direct {
		_ = syscall.Kill(-b.Cmd.Process.Pid, sig) // its group, as the launcher would
		_ = syscall.Kill(b.Cmd.Process.Pid, sig)
		return
	}
	_ = syscall.Kill(b.Cmd.Process.Pid, sig)
}

// Kill ends the whole tree at once: the namespace's init, the cgroup, or (subreaper)
// the launcher's sweep, with SIGKILL for the launcher if it has not exited a second
// later. Idempotent; safe after the exit. It does not wait: Wait does.
func (b *Box) Kill() {
	if b.Cmd.Process == nil || b.isExited() {
		return
	}
	pid := b.Cmd.Process.Pid
	switch b.mode {
	case ModeNone:
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	case ModeSubreaper:
		_ = syscall.Kill(pid, syscall.SIGUSR1) // the launcher sweeps, then exits
		time.AfterFunc(time.Second, func() {
			if !b.isExited() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	case ModeCgroup:
		b.mu.Lock()
		if !b.released {
			_ = os.WriteFile(filepath.Join(b.cgroup, "cgroup.kill"), []byte("1"), 0)
		}
		b.mu.Unlock()
	default:
		_ = syscall.Kill(pid, syscall.SIGKILL) // PID 1: the kernel ends the namespace
	}
}

func (b *Box) isExited() bool {
	select {
	case <-b.exited:
		return true
	default:
		return false
	}
}

// Release gives the box's temporary directory, processes and cpu cgroups back to the
// host's reserves, emptied, when nothing of its tree can be left (see treeGone and
// reserve), else removes them; it removes its cgroup and forgets its tree. Wait
// calls it; call it only after a failed Start or instead of starting. Idempotent.
func (b *Box) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return
	}
	b.released = true
	untrack(b)
	unwatchCPU(b)
	if b.status != nil {
		b.status.Close()
	}
	if b.tmpDir != "" {
		if b.treeGone() {
			recycleTempDir(b.tmpDir)
		} else {
			_ = os.RemoveAll(b.tmpDir)
		}
	}
	if b.cgroup != "" {
		removeCgroup(b.cgroup)
	}
	if b.pids != "" {
		recyclePidsCgroup(b.pids, b.plan.Limits.Processes)
	}
	if b.cpu != "" {
		recycleCPUCgroup(b.cpu, b.plan.Limits)
	}
}

// treeGone reports whether no process of the box can be left: its program never
// started, or it was its own PID namespace's init and has been waited for (the
// kernel ends a namespace's other processes before its init's exit completes).
func (b *Box) treeGone() bool {
	return b.direct && b.mode == ModeNamespace && (b.Cmd.Process == nil || b.Cmd.ProcessState != nil)
}

// DetectMode returns the strongest containment this process can set up, probed
// once: a PID namespace, else a cgroup v2 directory, else a subreaper.
func DetectMode() Mode {
	detectOnce.Do(func() {
		detected = ModeSubreaper
		cmd := exec.Command("/proc/self/exe")
		cmd.Args = []string{probeArg0}
		attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
		if os.Geteuid() != 0 {
			attr.Cloneflags |= syscall.CLONE_NEWUSER
			attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Geteuid(), HostID: os.Geteuid(), Size: 1}}
			attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getegid(), HostID: os.Getegid(), Size: 1}}
		}
		cmd.SysProcAttr = attr
		if cmd.Run() == nil {
			detected = ModeNamespace
			return
		}
		if CgroupAvailable() {
			detected = ModeCgroup
		}
	})
	return detected
}

var (
	detectOnce sync.Once
	detected   Mode
)

// Supported returns nil when mode can be forced on this machine, else why not.
func Supported(mode Mode) error {
	switch mode {
	case ModeNamespace:
		if DetectMode() != ModeNamespace {
			return errors.New("sandbox: the kernel refuses a new PID namespace here")
		}
	case ModeCgroup:
		if !CgroupAvailable() {
			return errors.New("sandbox: no usable cgroup v2 hierarchy (cgroup.kill, Linux 5.14) here")
		}
	case ModeSubreaper, ModeNone, "":
	default:
		return fmt.Errorf("sandbox: unknown containment mode %q", mode)
	}
	return nil
}

// Expected returns the containment a box made from spec gets on this machine, and
// whether it is confined (a world of its own, or Landlock): what Mode and Confined
// report once it runs.
func Expected(spec Spec) (mode Mode, confined bool) {
	if spec.Mode == ModeNone || !spec.Contain && spec.Confine == nil {
		return ModeNone, false
	}
	mode = spec.Mode
	if mode == "" {
		mode = DetectMode()
	}
	if spec.Confine == nil {
		return mode, false
	}
	world, _ := WorldAvailable()
	return mode, LandlockABI() > 0 || world && mode == ModeNamespace
}

// RefusesConnect reports whether a box made from spec on this machine gets the
// seccomp filter that refuses connect(2) and every socket but an AF_UNIX stream
// one (seccompFilter): confined without a world of its own and without the
// network. Such a program can serve on a socket of its own and reach none; what
// it talks to must connect to it (a plugin's broker is multiplexed over the
// host's one connection for that). Box.RefusesConnect says the same once made.
func RefusesConnect(spec Spec) bool {
	if spec.Mode == ModeNone || spec.Confine == nil || spec.Confine.Network || seccompFilter(false, false) == nil {
		return false
	}
	mode := spec.Mode
	if mode == "" {
		mode = DetectMode()
	}
	world, _ := WorldAvailable()
	return !(world && mode == ModeNamespace)
}

// RefusesConnect reports whether the program's seccomp filter refuses connect(2)
// (see the function RefusesConnect).
func (b *Box) RefusesConnect() bool {
	return b.plan.Filter && !b.plan.Network && seccompFilter(false, false) != nil
}

// Layers names what holds the program, once started, for status and logs: its
// namespaces ("pid", "mount", "ipc", "cgroupns", "net", "user") and its TMPDIR's
// "tmpfs" caps where it has a world of its own (see startWorld), else the
// containment mode;
// "keyring" (a session keyring of its own), "fds" (nothing the host inherited),
// "landlock N" (Landlock at ABI N), "seccomp", and how its processes and CPU are
// capped ("pids cgroup" or "nproc").
func (b *Box) Layers() []string {
	if b.world != nil {
		return b.layers
	}
	l := []string{string(b.mode)}
	if b.mode == ModeNone {
		return append(l, "fds")
	}
	l = append(l, "fds")
	if b.direct && b.Cmd.SysProcAttr.Cloneflags&syscall.CLONE_NEWNET != 0 {
		l = append(l, "net")
	}
	if b.plan.Confine != nil {
		l = append(l, "landlock "+fmt.Sprint(LandlockABI()))
	}
	if b.plan.Filter && seccompFilter(b.plan.Network, false) != nil {
		l = append(l, "seccomp")
	}
	return append(l, b.limitLayers()...)
}

// limitLayers names how the program's processes are capped and its CPU shared.
func (b *Box) limitLayers() []string {
	l := b.cpuLayers()
	switch {
	case b.pids != "" || b.cgroup != "" && fileExists(filepath.Join(b.cgroup, "pids.max")):
		l = append(l, "pids cgroup")
	case b.ProcessesCapped():
		l = append(l, "nproc")
	}
	return l
}

// cpuLayers names how the program's CPU is shared and capped: "cpu weight" (and
// "cpu max N" with Limits.CPUs) where its cgroup has the cgroup v2 cpu controller,
// "cpu shares" (and "cpu quota N") where it has a cgroup v1 cpu cgroup of its own
// (see cpuV1), else "lower priority once busy" (see cpuFallback), or "host's
// share" when a program started otherwise has none of these.
//
// Without a cgroup of its own, a contained program starts at the host's priority,
// in a process group of its own in the host's session: where the kernel schedules
// each session as an autogroup, the host and its sources share one CPU share
// against the rest of the machine, and within the host each of its processes is
// one task among the host's own, Limits.Processes bounding how many. While the
// host waits on a call, the program does the host's work, with the host's share
// and priority. A session of its own (an autogroup per source) or a lower priority
// from its start would each give a source less than its host when the host waits
// on it, and cost each call's latency on a loaded machine (BENCHMARKS.md); so, as
// a cgroup v1 cpu cgroup is joined, the lower priority comes once it is busy.
func (b *Box) cpuLayers() []string {
	var l []string
	switch {
	case b.cpu != "":
		l = append(l, "cpu shares")
		if b.plan.Limits.CPUs > 0 {
			l = append(l, fmt.Sprintf("cpu quota %g", b.plan.Limits.CPUs))
		}
	case (b.pids != "" || b.cgroup != "") && cpuShared():
		l = append(l, "cpu weight")
		if b.plan.Limits.CPUs > 0 {
			l = append(l, fmt.Sprintf("cpu max %g", b.plan.Limits.CPUs))
		}
	case b.cpuFallback():
		l = append(l, "lower priority once busy")
	default:
		l = append(l, "host's share")
	}
	return l
}

// cpuFallback reports whether b's program gets its CPU share as a lower priority
// once it is busy (BusyNice, see watchCPU): a program started directly (its
// namespace's own init, or confined from a thread) with no cgroup cpu controller
// for it, v1 or v2, and OffEnv not naming "nice".
func (b *Box) cpuFallback() bool {
	return b.direct && b.cpu == "" && !((b.pids != "" || b.cgroup != "") && cpuShared()) && !Off("nice")
}

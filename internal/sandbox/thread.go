//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// startConfined starts a confined program in ModeNamespace without a launcher. The
// confinement is per thread — no_new_privs, the Landlock domain and the seccomp
// filter belong to the OS thread that sets them, and a process inherits them from
// the thread that clones it — so a fresh goroutine locks an OS thread, confines it
// and starts the program from it. The Go runtime never starts other threads from a
// locked one, and the goroutine never unlocks it: the thread ends with the
// goroutine, its confinement with it.
//
// Resource limits are per process, so they cannot be set on the thread: the program
// is traced (PTRACE_TRACEME), stops at the end of its execve before its first
// instruction, gets its limits through prlimit, and is let go. No instruction of
// the program runs without them.
//
// The goroutine then waits, parked, for the program's exit: the program's
// parent-death signal (SIGKILL) follows the thread that started it.
func (b *Box) startConfined() error {
	started := make(chan error, 1)
	go b.confinedStart(started)
	return <-started
}

// confinedStart is startConfined's goroutine: it reports the start on started.
func (b *Box) confinedStart(started chan<- error) {
	runtime.LockOSThread() // never unlocked on the thread it confines (see above)
	if unix.Gettid() == unix.Getpid() {
		// The main thread, which the runtime never ends: a locked goroutine that
		// exits leaves it wedged, and here it would stay confined. Hold it while
		// another goroutine, on another thread then, does the start.
		other := make(chan error, 1)
		go b.confinedStart(other)
		err := <-other
		runtime.UnlockOSThread()
		started <- err
		return
	}
	err := b.confineThreadAndStart()
	started <- err
	if err == nil {
		<-b.exited
	}
}

// confineThreadAndStart runs on the locked thread of startConfined.
func (b *Box) confineThreadAndStart() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("sandbox: confine %s: %s", b.plan.Path, fmt.Sprintf(format, args...))
	}
	// Opened before Landlock closes the cgroup file system to this thread.
	cgroups, err := b.openCgroups()
	if err != nil {
		return fail("%v", err)
	}
	defer cgroups.Close()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no_new_privs: %v", err)
	}
	if err := dropCapabilities(); err != nil {
		return fail("%v", err)
	}
	if c := b.plan.Confine; c != nil {
		if err := restrict(b.plan.Path, c); err != nil {
			return fail("%v", err)
		}
	}
	if b.plan.Filter {
		// As in the launcher: the seccomp filter, and a network namespace.
		if _, err := denyNetwork(b.plan.Network); err != nil {
			return fail("%v", err)
		}
		if !b.plan.Network {
			b.Cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNET
		}
	}
	return b.startAndUntrace(cgroups)
}

// startTraced starts a contained program that is not confined as startConfined
// starts a confined one, from a thread locked only for the start: it too stops at
// its first instruction for its limits, and joins its cgroups.
func (b *Box) startTraced() error {
	runtime.LockOSThread() // the tracer is this thread until the program is let go
	defer runtime.UnlockOSThread()
	cgroups, err := b.openCgroups()
	if err != nil {
		return fmt.Errorf("sandbox: start %s: %w", b.plan.Path, err)
	}
	defer cgroups.Close()
	return b.startAndUntrace(cgroups)
}

// cgroupJoin puts a program into its cgroups (processes, and cgroup v1 cpu) from
// its birth, without writing its pid to cgroup.procs: that takes a lock whose
// every write waits for an RCU grace period, milliseconds on a loaded machine. On
// cgroup v2 the clone puts it there (CLONE_INTO_CGROUP). On v1 the starting thread
// moves itself into each cgroup's tasks (a thread moving itself skips that lock),
// clones the program, which inherits the thread's cgroups, and moves itself back
// before the program runs. The files are opened before Landlock closes the cgroup
// file system to a confined thread.
type cgroupJoin struct {
	dir         *os.File   // v2: the processes cgroup's directory
	join, leave []*os.File // v1: the cgroups' tasks, and the host's own
}

// openCgroups prepares the box's cgroupJoin; nil (and no error) when it has no
// cgroup.
func (b *Box) openCgroups() (*cgroupJoin, error) {
	if b.pids == "" && b.cpu == "" {
		return nil, nil
	}
	j := &cgroupJoin{}
	var err error
	if b.pids != "" {
		if _, home := pidsRoot(); home == "" {
			j.dir, err = os.Open(b.pids)
		} else {
			err = j.add(filepath.Join(b.pids, "tasks"), home)
		}
		if err != nil {
			err = fmt.Errorf("processes cgroup: %w", err)
		}
	}
	if b.cpu != "" && b.plan.Limits.cfsQuota() != -1 && err == nil { // else it joins once busy (watchCPU)
		_, home := cpuV1()
		if err = j.add(filepath.Join(b.cpu, "tasks"), home); err != nil {
			err = fmt.Errorf("cpu cgroup: %w", err)
		}
	}
	if err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// add opens a v1 cgroup's tasks file and the host's own in that hierarchy.
func (j *cgroupJoin) add(tasks, home string) error {
	join, err := os.OpenFile(tasks, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	leave, err := os.OpenFile(home, os.O_WRONLY, 0)
	if err != nil {
		join.Close()
		return err
	}
	j.join, j.leave = append(j.join, join), append(j.leave, leave)
	return nil
}

// Close closes the files; nil-safe.
func (j *cgroupJoin) Close() {
	if j == nil {
		return
	}
	for _, f := range append([]*os.File{j.dir}, append(j.join, j.leave...)...) {
		if f != nil {
			f.Close()
		}
	}
}

// threadJoins reports whether the starting thread joins v1 cgroups (enter).
func (j *cgroupJoin) threadJoins() bool { return j != nil && len(j.join) > 0 }

// enter moves the calling (locked) thread into the v1 cgroups; on an error the
// caller still calls exit.
func (j *cgroupJoin) enter() error {
	for _, f := range j.join {
		if _, err := f.WriteString("0"); err != nil {
			return fmt.Errorf("join %s: %w", filepath.Dir(f.Name()), err)
		}
	}
	return nil
}

// exit moves the calling thread back to the host's cgroups.
func (j *cgroupJoin) exit() error {
	var errs []error
	for _, f := range j.leave {
		if _, err := f.WriteString("0"); err != nil {
			// The thread stays counted in the cgroup; its program is held all the same.
			errs = append(errs, fmt.Errorf("leave for %s: %w", filepath.Dir(f.Name()), err))
		}
	}
	return errors.Join(errs...)
}

// start starts cmd from the calling (locked) thread into the cgroups.
func (j *cgroupJoin) start(cmd *exec.Cmd) error {
	if j == nil {
		return cmd.Start()
	}
	if j.dir != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(j.dir.Fd())
	}
	if !j.threadJoins() {
		return cmd.Start()
	}
	err := j.enter()
	if err == nil {
		err = cmd.Start()
	}
	return errors.Join(err, j.exit())
}

// startAndUntrace starts the traced program on the calling (locked) thread and lets
// it go once it has its limits (untraceAfterExec).
func (b *Box) startAndUntrace(cgroups *cgroupJoin) error {
	if err := cgroups.start(b.Cmd); err != nil {
		if b.Cmd.Process != nil {
			_ = syscall.Kill(b.Cmd.Process.Pid, syscall.SIGKILL)
			_ = b.Cmd.Wait()
		}
		return fmt.Errorf("sandbox: start %s (containment %s): %w", b.plan.Path, b.mode, err)
	}
	pid := b.Cmd.Process.Pid
	ownUserNS := b.Cmd.SysProcAttr.Cloneflags&syscall.CLONE_NEWUSER != 0
	if err := untraceAfterExec(pid, b.plan.Limits, ownUserNS); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = b.Cmd.Wait()
		return fmt.Errorf("sandbox: start %s: %w", b.plan.Path, err)
	}
	return nil
}

// untraceAfterExec waits for a traced child's stop at its execve, sets its limits
// (RLIMIT_NPROC too when it is alone in its user namespace, see prlimit), and
// detaches from it. It runs on the thread that started the child (the tracer).
func untraceAfterExec(pid int, l Limits, ownUserNS bool) error {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for its start: %w", err)
		}
		switch {
		case ws.Stopped() && ws.StopSignal() == unix.SIGTRAP: // the execve
			lerr := prlimit(pid, l, ownUserNS)
			if err := unix.PtraceDetach(pid); err != nil {
				return fmt.Errorf("let it run: %w", err)
			}
			return lerr
		case ws.Stopped(): // another signal before the execve: deliver it
			if err := unix.PtraceCont(pid, int(ws.StopSignal())); err != nil {
				return fmt.Errorf("let it run: %w", err)
			}
		default:
			return fmt.Errorf("it ended before it started (%v)", waitStatusString(ws))
		}
	}
}

func waitStatusString(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// threadStart reports whether confined programs can start from a confined thread:
// it needs the child's PTRACE_TRACEME, which Yama's ptrace_scope 3 refuses to all
// and scope 2 to all but root. Otherwise (and outside ModeNamespace) the launcher
// confines them.
func threadStart() bool {
	threadStartOnce.Do(func() {
		data, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope")
		scope := strings.TrimSpace(string(data))
		threadStartOK = err != nil || scope == "0" || scope == "1" || scope == "2" && os.Geteuid() == 0
	})
	return threadStartOK && !threadStartDisabled
}

var (
	threadStartOnce sync.Once
	threadStartOK   bool
	// threadStartDisabled makes confined programs start under the launcher (tests).
	threadStartDisabled bool
)

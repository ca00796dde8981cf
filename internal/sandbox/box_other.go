//go:build !linux

package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Off Linux there is no confinement: no Landlock, seccomp, namespaces or cgroups.
// A box still contains its program's tree (containTree: a process group and a
// watch for the host's death on macOS and other unix systems, a Job Object that
// kills on close on Windows); a confined Spec runs unconfined with a warning, and
// one with Require does not start.

// unconfinedReason says why nothing is confined here.
var unconfinedReason = "confinement (Landlock, seccomp, resource limits) needs Linux; " + runtime.GOOS + " runs the program unconfined"

// Box is one contained run of a program. Cmd is the command to start: the caller
// sets its standard input and outputs as for any exec.Cmd, or takes pipes from the
// Box's StdinPipe, StdoutPipe and StderrPipe, then calls Start and Wait on the Box,
// never on Cmd. Safe for concurrent use once
// started.
type Box struct {
	// Cmd runs the program.
	Cmd *exec.Cmd

	spec    Spec
	mode    Mode
	warning string
	tree    *tree // the containment, once started; nil in ModeNone

	exited chan struct{} // closed once Cmd.Wait returned

	mu       sync.Mutex
	released bool
}

// Command prepares program path with argv (argv[0] is the name it sees) in dir with
// exactly env (KEY=VALUE). extraWrite is for confinement, which this system does
// not have. Nothing runs until Start.
func Command(spec Spec, path string, argv []string, dir string, env []string, extraWrite ...string) (*Box, error) {
	if env == nil {
		env = []string{}
	}
	if spec.Confine != nil && spec.Require {
		return nil, fmt.Errorf("sandbox: %s: %w: %s", spec.Name, ErrUnavailable, unconfinedReason)
	}
	if spec.Mode != "" && spec.Mode != ModeNone && spec.Mode != treeMode {
		return nil, fmt.Errorf("sandbox: %s: %w", spec.Name, Supported(spec.Mode))
	}
	b := &Box{spec: spec, exited: make(chan struct{})}
	if spec.HostPID {
		env = append(env, fmt.Sprintf("%s=%d", HostPIDEnv, os.Getpid()))
	}
	b.Cmd = &exec.Cmd{Path: path, Args: argv, Dir: dir, Env: env}
	b.mode, _ = Expected(spec)
	if spec.Confine != nil {
		b.warning = unconfinedReason
	}
	if b.mode != ModeNone {
		prepareTree(b.Cmd)
	}
	return b, nil
}

// HostPIDEnv names the variable that tells a plugin its host's pid (Spec.HostPID).
const HostPIDEnv = "TOOLHOST_HOST_PID"

// Mode is how the program's tree is held together: treeMode, or ModeNone.
func (b *Box) Mode() Mode { return b.mode }

// Warning says why a confined Spec runs unconfined, or "".
func (b *Box) Warning() string { return b.warning }

// Confined is false: nothing is confined on this system.
func (b *Box) Confined() bool { return false }

// ProcessesCapped is false: no limits are set on this system.
func (b *Box) ProcessesCapped() bool { return false }

// TempDir is "": no private temporary directory is made on this system.
func (b *Box) TempDir() string { return "" }

// Spec returns the box's Spec.
func (b *Box) Spec() Spec { return b.spec }

// Start starts the program and puts its tree under containment. On an error
// nothing is left running.
func (b *Box) Start() error {
	if err := b.Cmd.Start(); err != nil {
		return err
	}
	if b.mode == ModeNone {
		return nil
	}
	t, err := containTree(b.Cmd.Process)
	if err != nil {
		_ = b.Cmd.Process.Kill()
		_ = b.Cmd.Wait()
		close(b.exited)
		return fmt.Errorf("sandbox: %s: contain the process tree: %w", b.spec.Name, err)
	}
	b.tree = t
	track(b)
	return nil
}

// StdoutPipe is exec.Cmd.StdoutPipe (the Linux Box has its own, see there).
func (b *Box) StdoutPipe() (io.ReadCloser, error) { return b.Cmd.StdoutPipe() }

// StderrPipe is exec.Cmd.StderrPipe.
func (b *Box) StderrPipe() (io.ReadCloser, error) { return b.Cmd.StderrPipe() }

// StdinPipe is exec.Cmd.StdinPipe.
func (b *Box) StdinPipe() (io.WriteCloser, error) { return b.Cmd.StdinPipe() }

// ProgramPID is the program's pid, 0 before Start.
func (b *Box) ProgramPID() int { return b.PID() }

// PID is the program's pid, 0 before Start.
func (b *Box) PID() int {
	if b.Cmd.Process == nil {
		return 0
	}
	return b.Cmd.Process.Pid
}

// Wait waits for the program's exit, ends what is left of its tree and releases the
// box. The error is nil for exit status 0, else an *ExitError. Call it once.
func (b *Box) Wait() error {
	werr := b.Cmd.Wait()
	close(b.exited)
	if b.tree != nil {
		b.tree.kill()
	}
	b.Release()
	if b.mode == ModeNone {
		return werr
	}
	ee := &ExitError{Code: -1}
	if b.Cmd.ProcessState != nil {
		ee.Code = b.Cmd.ProcessState.ExitCode()
		if ws, ok := b.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ee.Signal = ws.Signal()
		}
	}
	if ee.Code == 0 && ee.Signal == 0 {
		return nil
	}
	return ee
}

// Signal asks the program to stop (see signalTree). SIGKILL is Kill.
func (b *Box) Signal(sig syscall.Signal) {
	if b.Cmd.Process == nil || b.isExited() {
		return
	}
	if sig == syscall.SIGKILL {
		b.Kill()
		return
	}
	signalTree(b.Cmd.Process, sig)
}

// Kill ends the whole tree at once. Idempotent; safe after the exit. It does not
// wait: Wait does.
func (b *Box) Kill() {
	if b.Cmd.Process == nil || b.isExited() {
		return
	}
	b.mu.Lock()
	t := b.tree
	b.mu.Unlock()
	if t != nil {
		t.kill()
	}
	_ = b.Cmd.Process.Kill()
}

func (b *Box) isExited() bool {
	select {
	case <-b.exited:
		return true
	default:
		return false
	}
}

// Release ends the containment's own resources (the watch, the job). Wait calls it;
// call it only after a failed Start or instead of starting. Idempotent.
func (b *Box) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return
	}
	b.released = true
	untrack(b)
	if b.tree != nil {
		b.tree.close()
	}
}

// Contains reports whether pid is the box's program.
func (b *Box) Contains(pid int) bool { return pid != 0 && pid == b.PID() }

// DetectMode returns the containment this system has: treeMode.
func DetectMode() Mode { return treeMode }

// Supported returns nil when mode can be forced on this system, else why not.
func Supported(mode Mode) error {
	switch mode {
	case treeMode, ModeNone, "":
		return nil
	case ModeNamespace, ModeCgroup, ModeSubreaper:
		return fmt.Errorf("sandbox: containment mode %q needs Linux; %s has %q", mode, runtime.GOOS, treeMode)
	}
	return fmt.Errorf("sandbox: unknown containment mode %q", mode)
}

// Expected returns the containment a box made from spec gets here, and false:
// nothing is confined.
func Expected(spec Spec) (mode Mode, confined bool) {
	if spec.Mode == ModeNone || !spec.Contain && spec.Confine == nil {
		return ModeNone, false
	}
	return treeMode, false
}

// LandlockABI is 0: there is no Landlock off Linux.
func LandlockABI() int { return 0 }

// CgroupAvailable is false: there are no cgroups off Linux.
func CgroupAvailable() bool { return false }

// PidsCgroupAvailable is false: there are no cgroups off Linux.
func PidsCgroupAvailable() bool { return false }

// DropReserves does nothing: nothing is kept ready off Linux.
func DropReserves() {}

var (
	boxesMu sync.Mutex
	boxes   = map[*Box]struct{}{}
)

func track(b *Box) {
	boxesMu.Lock()
	defer boxesMu.Unlock()
	boxes[b] = struct{}{}
}

func untrack(b *Box) {
	boxesMu.Lock()
	defer boxesMu.Unlock()
	delete(boxes, b)
}

// SourceOf returns the name of the source whose contained program has pid, for
// peer checks. Off Linux only the programs themselves are known, not their
// descendants.
func SourceOf(pid int) (name string, ok bool) {
	boxesMu.Lock()
	defer boxesMu.Unlock()
	for b := range boxes {
		if b.Contains(pid) {
			return b.spec.Name, true
		}
	}
	return "", false
}

// Layers names what holds the program for status and logs: here only its
// containment mode (a process group, or a Job Object); nothing confines it.
func (b *Box) Layers() []string { return []string{string(b.mode)} }

// RefusesConnect reports whether a box made from spec refuses connect(2): never
// here (there is no seccomp filter).
func RefusesConnect(Spec) bool { return false }

// RefusesConnect reports whether the program's filter refuses connect(2): never here.
func (b *Box) RefusesConnect() bool { return false }

// Package proc starts the child processes toolhost owns — MCP servers, manifest
// commands — the one way it must: exactly the configured environment (never the
// host's), its own process group (so a wrapper's children die with it), SIGKILL if the
// host dies, and pipes the caller owns. It also holds the small pieces every process
// owner needs: group signals, PATH lookup in the configured environment, and a ring
// buffer for stderr tails.
package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/toolhost/toolhost/internal/sandbox"
)

// Process is a running child in its own process group, contained (and confined) as
// its sandbox.Spec says. Stdin is the write end of its
// standard input; Stdout and Stderr are the read ends of its outputs. The caller
// closes them; reaping the process never does, so a reader can drain them after the
// exit.
type Process struct {
	Cmd    *exec.Cmd
	Box    *sandbox.Box
	Stdin  *os.File
	Stdout *os.File
	Stderr *os.File

	exited  chan struct{}
	waitErr error // set before exited closes
}

// Start runs the program at path with argv (argv[0] is the name the program sees) in
// dir with exactly env, contained and confined as spec says (its own process group
// at least, SIGKILL if the host dies), and reaps it in the background.
func Start(spec sandbox.Spec, path string, argv []string, dir string, env map[string]string) (_ *Process, err error) {
	box, err := sandbox.Command(spec, path, argv, dir, EnvList(env)) // never nil: nil would inherit the host's environment
	if err != nil {
		return nil, err
	}
	cmd := box.Cmd

	var files []*os.File
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := box.Start(); err != nil {
		return nil, err // the sandbox's error names the program
	}
	// The child has its copies; ours would keep the pipes open forever.
	inR.Close()
	outW.Close()
	errW.Close()
	p := &Process{Cmd: cmd, Box: box, Stdin: inW, Stdout: outR, Stderr: errR, exited: make(chan struct{})}
	go func() {
		p.waitErr = box.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed once the process has been reaped.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Wait waits for the exit and returns what exec.Cmd.Wait returned.
func (p *Process) Wait() error {
	<-p.exited
	return p.waitErr
}

// Status describes how the process ended ("exit status 2", "signal: killed"); call
// it after Exited is closed.
func (p *Process) Status() string {
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

// Signal sends sig to the program's process group; SIGKILL ends the whole contained
// tree (see sandbox.Box.Kill). A process already gone is fine.
func (p *Process) Signal(sig syscall.Signal) { p.Box.Signal(sig) }

// ExitState returns how the program ended: its exit code, or the signal that
// killed it (code -1). Call it after Exited is closed.
func (p *Process) ExitState() (code int, sig syscall.Signal) {
	var se *sandbox.ExitError
	var xe *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0, 0
	case errors.As(p.waitErr, &se):
		return se.Code, se.Signal
	case errors.As(p.waitErr, &xe):
		if ws, ok := xe.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -1, ws.Signal()
		}
		return xe.ExitCode(), 0
	}
	return -1, 0
}

// EnvList turns an environment map into a sorted KEY=VALUE list, never nil.
func EnvList(env map[string]string) []string {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	slices.Sort(list)
	return list
}

// LookPath resolves a command: a name with a slash is used as is (an absolute one
// must be an executable file: an error wrapping fs.ErrNotExist or fs.ErrPermission
// says so before anything starts); a bare name is looked up on the PATH of env
// (absolute entries only), never on the host's PATH.
func LookPath(name string, env map[string]string) (string, error) {
	if strings.Contains(name, "/") {
		if filepath.IsAbs(name) {
			return name, checkCommand(name)
		}
		return name, nil // relative to the working directory the program gets
	}
	path, ok := env["PATH"]
	if !ok {
		return "", fmt.Errorf("command %q is a bare name but the environment sets no PATH (the host's environment is not inherited): give an absolute path or set PATH in env", name)
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found on the configured PATH %q: %w", name, path, fs.ErrNotExist)
}

// checkCommand reports why the file at path cannot be run, if it cannot.
func checkCommand(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("command %s: %w", path, fs.ErrNotExist)
	case err != nil:
		return err // a *PathError: it names the path
	case !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0:
		return fmt.Errorf("command %s is not an executable file: %w", path, fs.ErrPermission)
	}
	return nil
}

// Ring keeps the last bytes written to it, so a failure can quote a process's real
// complaint without holding unbounded output. Safe for concurrent use.
type Ring struct {
	mu   sync.Mutex
	buf  []byte
	size int
}

// NewRing returns a Ring keeping the last size bytes.
func NewRing(size int) *Ring { return &Ring{size: size} }

func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - r.size; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	return len(p), nil
}

// String returns what is kept, oldest first.
func (r *Ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf)
}

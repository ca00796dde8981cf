package mcp

import (
	"bufio"
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
	"time"

	"github.com/hashicorp/go-hclog"
)

// process is a server process in its own process group, with pipes of our own (so
// that reaping the process never closes what the session still reads).
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File // write end
	stdout *os.File // read end
	stderr *ring

	exited     chan struct{} // closed once the process has been reaped
	exitErr    error         // set before exited closes
	stderrDone chan struct{}
	errR       *os.File
}

// startProcess launches cfg's command with exactly cfg.Env.
func startProcess(cfg Config) (_ *process, err error) {
	path, err := lookPath(cfg.Command, cfg.Env)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, cfg.Args...)
	cmd.Dir = cfg.Dir
	cmd.Env = envList(cfg.Env) // never nil: nil would inherit the host's environment
	// Own process group so a wrapper's children die with it; SIGKILL if the host's
	// thread dies, so a killed host leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

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
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	// The child has its copies; ours would keep the pipes open forever.
	inR.Close()
	outW.Close()
	errW.Close()

	p := &process{
		cmd: cmd, stdin: inW, stdout: outR, errR: errR,
		stderr: newRing(8 << 10), exited: make(chan struct{}), stderrDone: make(chan struct{}),
	}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	go p.copyStderr(cfg.Logger.Named("stderr"))
	return p, nil
}

// copyStderr keeps the tail of the server's stderr and logs its lines at debug level.
func (p *process) copyStderr(log hclog.Logger) {
	defer close(p.stderrDone)
	br := bufio.NewReaderSize(p.errR, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			p.stderr.Write(line)
			if log.IsDebug() {
				log.Debug(strings.TrimRight(string(line), "\r\n"))
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// signal sends sig to the whole process group; a group already gone is fine.
func (p *process) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) && sig == syscall.SIGKILL {
		_ = p.cmd.Process.Kill()
	}
}

// stop ends the process: it waits up to half of grace for an exit on its own (the
// caller closed its stdin), then SIGTERMs the group and waits the other half, then
// SIGKILLs the group. Whatever is left of the group afterwards (children of an exited
// wrapper) is killed too, and the read ends are closed once drained or abandoned.
func (p *process) stop(grace time.Duration) {
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-p.exited:
			return true
		case <-t.C:
			return false
		}
	}
	if !wait(grace / 2) {
		p.signal(syscall.SIGTERM)
		if !wait(grace - grace/2) {
			p.signal(syscall.SIGKILL)
			<-p.exited
		}
	}
	p.signal(syscall.SIGKILL)
	p.stdin.Close()
	// Every writer of stdout and stderr was in the group; anything that escaped it
	// (setsid) must not keep our readers alive.
	select {
	case <-p.stderrDone:
	case <-time.After(time.Second):
	}
	p.errR.Close()
	<-p.stderrDone
	p.stdout.Close()
}

// status describes how the process ended; call it after exited is closed.
func (p *process) status() string {
	if p.exitErr == nil {
		return "exit status 0"
	}
	return p.exitErr.Error()
}

// lookPath resolves a command: a name with a slash is used as is; a bare name is
// looked up on the PATH of env (absolute entries only), never on the host's PATH.
func lookPath(name string, env map[string]string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
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

func envList(env map[string]string) []string {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	slices.Sort(list)
	return list
}

// ring keeps the last bytes written to it. Safe for concurrent use.
type ring struct {
	mu   sync.Mutex
	buf  []byte
	size int
}

func newRing(size int) *ring { return &ring{size: size} }

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - r.size; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(r.buf)
}

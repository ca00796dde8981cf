package manifest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolhost/toolhost/sdk"
)

// stderrTail is how much of the end of stderr a failure quotes.
const stderrTail = 4 << 10

// CommandError reports a command that could not be started (not found, not
// executable, a missing working directory). It is an operational error: the tool is
// misconfigured, which the model cannot fix.
type CommandError struct {
	Tool string
	Err  error
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("manifest: tool %q: %v", e.Tool, e.Err)
}

func (e *CommandError) Unwrap() error { return e.Err }

// run executes one call of t; see the package documentation for the contract.
func run(ctx context.Context, t Tool, input []byte) (sdk.Output, error) {
	if err := ctx.Err(); err != nil {
		return sdk.Output{}, context.Cause(ctx)
	}
	if len(t.Command) == 0 {
		return sdk.Output{}, &CommandError{Tool: t.Name, Err: errors.New("no command")}
	}
	path, err := lookPath(t.Command[0], t.Env)
	if err != nil {
		return sdk.Output{}, &CommandError{Tool: t.Name, Err: err}
	}
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	limit := t.MaxOutputBytes
	if limit <= 0 {
		limit = DefaultMaxOutputBytes
	}

	p, err := start(path, t)
	if err != nil {
		return sdk.Output{}, &CommandError{Tool: t.Name, Err: err}
	}
	stdin := append(slices.Clip(input), '\n')
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = p.stdin.Write(stdin) // EPIPE when the command does not read it: fine
		p.stdin.Close()
	})
	stdout := &capture{limit: limit}
	stderr := &capture{limit: stderrTail, tail: true}
	wg.Go(func() { _, _ = io.Copy(stdout, p.stdout) })
	wg.Go(func() { _, _ = io.Copy(stderr, p.stderr) })

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.kill()
	case <-timer.C:
		timedOut = true
		p.kill()
	}
	<-p.exited
	// Whatever the command left running in its group goes too: a call leaves no
	// process behind. Then the pipes end; anything that escaped the group (setsid)
	// gets a moment before its pipes are closed under it.
	p.signal(syscall.SIGKILL)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		p.stdin.Close()
		p.stdout.Close()
		p.stderr.Close()
		<-done
	}
	p.stdout.Close()
	p.stderr.Close()

	switch {
	case ctx.Err() != nil:
		return sdk.Output{}, context.Cause(ctx)
	case timedOut:
		return sdk.Output{}, &sdk.ToolFailure{Message: fmt.Sprintf("the command timed out after %s and was killed", timeout) + stderr.quote()}
	}
	if state := p.cmd.ProcessState; !state.Success() {
		status := fmt.Sprintf("the command exited with status %d", state.ExitCode())
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			status = fmt.Sprintf("the command was killed by signal %d (%s)", ws.Signal(), ws.Signal())
		}
		return sdk.Output{}, &sdk.ToolFailure{Message: status + stderr.quote()}
	}

	if len(t.OutputSchema) > 0 {
		if stdout.dropped() > 0 {
			return sdk.Output{}, &sdk.ToolFailure{Message: fmt.Sprintf(
				"the output was truncated by the producer cap: %d of %d bytes dropped (max_output_bytes is %d); a truncated JSON output cannot be used",
				stdout.dropped(), stdout.total, limit)}
		}
		return sdk.Output{JSON: bytes.TrimSpace(stdout.buf.Bytes())}, nil
	}
	text := stdout.buf.Bytes()
	if stdout.dropped() > 0 {
		text = cutToRune(text)
		marker := fmt.Sprintf("[toolhost: output truncated by the producer cap: %d of %d bytes dropped]", stdout.total-int64(len(text)), stdout.total)
		if len(text) > 0 && text[len(text)-1] != '\n' {
			marker = "\n" + marker
		}
		text = append(text, marker...)
	}
	data, err := marshalString(text)
	if err != nil {
		return sdk.Output{}, &sdk.OutputEncodingError{Err: err}
	}
	return sdk.Output{JSON: data}, nil
}

// process is one running command in its own process group.
type process struct {
	cmd            *exec.Cmd
	stdin          *os.File // write end
	stdout, stderr *os.File // read ends
	exited         chan struct{}
	killOnce       sync.Once
}

func start(path string, t Tool) (_ *process, err error) {
	cmd := exec.Command(path, t.Command[1:]...)
	cmd.Args[0] = t.Command[0]
	cmd.Dir = t.Dir
	cmd.Env = envList(t.Env) // never nil: nil would inherit the host's environment
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
		return nil, err
	}
	inR.Close()
	outW.Close()
	errW.Close()
	p := &process{cmd: cmd, stdin: inW, stdout: outR, stderr: errR, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// kill ends the process group: SIGTERM, then SIGKILL after KillGrace.
func (p *process) kill() {
	p.killOnce.Do(func() {
		p.signal(syscall.SIGTERM)
		t := time.NewTimer(KillGrace)
		defer t.Stop()
		select {
		case <-p.exited:
		case <-t.C:
			p.signal(syscall.SIGKILL)
		}
	})
}

func (p *process) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) && sig == syscall.SIGKILL {
		_ = p.cmd.Process.Kill()
	}
}

// capture keeps up to limit bytes of what is written to it (the first ones, or the
// last ones when tail is set) and counts them all; it never fails, so the writer is
// drained to its end.
type capture struct {
	limit int64
	tail  bool
	buf   bytes.Buffer
	total int64
}

func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if c.tail {
		c.buf.Write(p)
		if over := int64(c.buf.Len()) - c.limit; over > 0 {
			c.buf.Next(int(over))
		}
		return len(p), nil
	}
	if room := c.limit - int64(c.buf.Len()); room > 0 {
		c.buf.Write(p[:min(int64(len(p)), room)])
	}
	return len(p), nil
}

func (c *capture) dropped() int64 { return c.total - int64(c.buf.Len()) }

// quote renders the tail of stderr for a failure message, or "".
func (c *capture) quote() string {
	text := strings.TrimRight(strings.ToValidUTF8(c.buf.String(), "\uFFFD"), "\n")
	if strings.TrimSpace(text) == "" {
		return ""
	}
	if c.total > int64(c.buf.Len()) {
		return fmt.Sprintf("\nstderr (last %d of %d bytes):\n%s", c.buf.Len(), c.total, text)
	}
	return "\nstderr:\n" + text
}

// cutToRune drops an incomplete UTF-8 sequence at the end of b.
func cutToRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}

// marshalString encodes b as a JSON string without HTML escaping.
func marshalString(b []byte) (json.RawMessage, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(string(b)); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// lookPath resolves a program: a name with a slash is used as is; a bare name is
// looked up on the PATH of env (absolute entries only), never on the host's PATH.
func lookPath(name string, env map[string]string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path, ok := env["PATH"]
	if !ok {
		return "", fmt.Errorf("command %q is a bare name but the tool's env sets no PATH (the host's environment is not inherited): give a path or set PATH in env", name)
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
	return "", fmt.Errorf("command %q not found on the tool's PATH %q: %w", name, path, fs.ErrNotExist)
}

func envList(env map[string]string) []string {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	slices.Sort(list)
	return list
}

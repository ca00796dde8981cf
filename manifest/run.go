package manifest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/toolhost/toolhost/internal/proc"
	"github.com/toolhost/toolhost/internal/sandbox"
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
	path, err := proc.LookPath(t.Command[0], t.Env)
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
		_, _ = p.Stdin.Write(stdin) // EPIPE when the command does not read it: fine
		p.Stdin.Close()
	})
	stdout := &capture{limit: limit}
	stderr := &capture{limit: stderrTail, tail: true}
	wg.Go(func() { _, _ = io.Copy(stdout, p.Stdout) })
	wg.Go(func() { _, _ = io.Copy(stderr, p.Stderr) })

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	select {
	case <-p.Exited():
	case <-ctx.Done():
		p.kill()
	case <-timer.C:
		timedOut = true
		p.kill()
	}
	<-p.Exited()
	// Whatever the command left running in its group goes too: a call leaves no
	// process behind. Then the pipes end; anything that escaped the group (setsid)
	// gets a moment before its pipes are closed under it.
	p.Signal(syscall.SIGKILL)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		p.Stdin.Close()
		p.Stdout.Close()
		p.Stderr.Close()
		<-done
	}
	p.Stdout.Close()
	p.Stderr.Close()

	switch {
	case ctx.Err() != nil:
		return sdk.Output{}, context.Cause(ctx)
	case timedOut:
		return sdk.Output{}, &sdk.ToolFailure{Message: fmt.Sprintf("the command timed out after %s and was killed", timeout) + stderr.quote()}
	}
	if code, sig := p.ExitState(); code != 0 || sig != 0 {
		status := fmt.Sprintf("the command exited with status %d", code)
		if sig != 0 {
			status = fmt.Sprintf("the command was killed by signal %d (%s)", sig, sig)
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

// process is one running command (see internal/proc).
type process struct {
	*proc.Process
	killOnce sync.Once
}

func start(path string, t Tool) (*process, error) {
	spec := sandbox.SpecOf(t.Sandbox)
	spec.Contain = true
	if spec.Name == "" {
		spec.Name = t.Name
	}
	p, err := proc.Start(spec, path, t.Command, t.Dir, t.Env)
	if err != nil {
		return nil, err
	}
	return &process{Process: p}, nil
}

// kill ends the process group: SIGTERM, then SIGKILL after KillGrace.
func (p *process) kill() {
	p.killOnce.Do(func() {
		p.Signal(syscall.SIGTERM)
		t := time.NewTimer(KillGrace)
		defer t.Stop()
		select {
		case <-p.Exited():
		case <-t.C:
			p.Signal(syscall.SIGKILL)
		}
	})
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

// Check reports, as a *CommandError, a tool whose command cannot be executed: a bare
// name not found on the PATH its env gives (none: the host's is not inherited), or a
// path that is not an executable regular file (relative paths are taken from
// t.Dir), or a working directory that does not exist. A Location checks its manifest
// tools once, at activation, and never advertises one that fails.
func Check(t Tool) error {
	if len(t.Command) == 0 || t.Command[0] == "" {
		return &CommandError{Tool: t.Name, Err: errors.New("no command")}
	}
	path, err := proc.LookPath(t.Command[0], t.Env)
	if err != nil {
		return &CommandError{Tool: t.Name, Err: err}
	}
	if !filepath.IsAbs(path) && t.Dir != "" {
		path = filepath.Join(t.Dir, path)
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return &CommandError{Tool: t.Name, Err: fmt.Errorf("command %q: %w", t.Command[0], err)}
	case !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0:
		return &CommandError{Tool: t.Name, Err: fmt.Errorf("command %q (%s) is not an executable file", t.Command[0], path)}
	}
	if t.Dir != "" {
		if fi, err := os.Stat(t.Dir); err != nil || !fi.IsDir() {
			return &CommandError{Tool: t.Name, Err: fmt.Errorf("working directory %q does not exist", t.Dir)}
		}
	}
	return nil
}

package mcp

import (
	"bufio"
	"errors"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/proc"
	"github.com/toolhost/toolhost/internal/sandbox"
)

// process is a server process (see internal/proc) whose stderr tail is kept.
type process struct {
	*proc.Process
	stderrTail *proc.Ring
	stderrDone chan struct{}
}

// startProcess launches cfg's command with exactly cfg.Env; its stderr lines are
// logged within logs' budget.
func startProcess(cfg Config, logs *loglimit.Logger) (*process, error) {
	path, err := proc.LookPath(cfg.Command, cfg.Env)
	if err != nil {
		return nil, err
	}
	spec := sandbox.SpecOf(cfg.Sandbox)
	spec.Contain = true
	if spec.Name == "" {
		spec.Name = cfg.Name
	}
	pp, err := proc.Start(spec, path, append([]string{cfg.Command}, cfg.Args...), cfg.Dir, cfg.Env)
	if err != nil {
		return nil, err
	}
	if w := pp.Box.Warning(); w != "" {
		cfg.Logger.Warn("mcp server runs unconfined", "server", cfg.Name, "reason", w)
	}
	p := &process{Process: pp, stderrTail: proc.NewRing(8 << 10), stderrDone: make(chan struct{})}
	go p.copyStderr(cfg.Name, logs)
	return p, nil
}

// copyStderr keeps the tail of the server's stderr and logs its lines at debug level.
func (p *process) copyStderr(server string, logs *loglimit.Logger) {
	defer close(p.stderrDone)
	br := bufio.NewReaderSize(p.Stderr, 4096)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			p.stderrTail.Write(line)
			logs.Log(hclog.Debug, strings.TrimRight(string(line), "\r\n"), "server", server, "stream", "stderr")
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
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
		case <-p.Exited():
			return true
		case <-t.C:
			return false
		}
	}
	if !wait(grace / 2) {
		p.Signal(syscall.SIGTERM)
		if !wait(grace - grace/2) {
			p.Signal(syscall.SIGKILL)
			<-p.Exited()
		}
	}
	p.Signal(syscall.SIGKILL)
	p.Stdin.Close()
	// Every writer of stdout and stderr was in the group; anything that escaped it
	// (setsid) must not keep our readers alive.
	select {
	case <-p.stderrDone:
	case <-time.After(time.Second):
	}
	p.Stderr.Close()
	<-p.stderrDone
	p.Stdout.Close()
}

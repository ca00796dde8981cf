package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/sandbox"
)

// procRunner runs a plugin process for go-plugin (its runner.Runner) in its sandbox
// box, killed as a whole tree, with its exit observable through exited.
type procRunner struct {
	box    *sandbox.Box
	stdout *pluginpb.StdoutFilter // the activation line taken out
	stderr io.ReadCloser          // read by log; go-plugin gets drained
	log    *pluginLog
	// drained is closed once log has read stderr to its end.
	drained chan struct{}
	// maxActivationLine bounds the activation line read off stdout.
	maxActivationLine int

	waitOnce sync.Once
	exited   chan struct{} // closed once the process has been reaped
	exitErr  error         // the process's exit status; set before exited closes

	mu         sync.Mutex
	killByTime time.Time   // Kill waits until then for a graceful exit; zero: kill at once
	killed     atomic.Bool // Kill was called: go-plugin or the host ended the process
}

func newProcRunner(box *sandbox.Box, maxActivationLine int, log *pluginLog) *procRunner {
	box.Cmd.Stdin = nil // never the host's stdin
	return &procRunner{box: box, exited: make(chan struct{}), maxActivationLine: maxActivationLine, log: log, drained: make(chan struct{})}
}

func (r *procRunner) Start(context.Context) error {
	var err error
	stdout, err := r.box.StdoutPipe()
	if err != nil {
		return err
	}
	r.stdout = pluginpb.NewStdoutFilter(stdout, r.maxActivationLine)
	if r.stderr, err = r.box.StderrPipe(); err != nil {
		return err
	}
	if err := r.box.Start(); err != nil {
		return fmt.Errorf("start %s: %w", r.Name(), err)
	}
	go func() {
		defer close(r.drained)
		r.log.readLines("stderr", r.stderr)
	}()
	return nil
}

// Wait reaps the process. go-plugin calls it once stdout and stderr are drained.
func (r *procRunner) Wait(context.Context) error {
	r.waitOnce.Do(func() {
		r.exitErr = r.box.Wait()
		close(r.exited)
	})
	<-r.exited
	return r.exitErr
}

// killAfter makes Kill wait until t for the process to exit by itself.
func (r *procRunner) killAfter(t time.Time) {
	r.mu.Lock()
	r.killByTime = t
	r.mu.Unlock()
}

// Kill kills the process tree, after the grace set by killAfter unless the process
// exits first. go-plugin calls it on a failed start and at the end of its own Kill.
func (r *procRunner) Kill(context.Context) error {
	r.killed.Store(true)
	r.mu.Lock()
	wait := time.Until(r.killByTime)
	r.mu.Unlock()
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-r.exited:
		case <-t.C:
		}
	}
	r.killGroup()
	return nil
}

// killGroup ends the plugin's whole process tree (see sandbox.Box.Kill).
func (r *procRunner) killGroup() { r.box.Kill() }

// killedByHost reports whether the process ended by a SIGKILL after Kill was called
// (go-plugin kills a plugin whose start failed); call it after exited is closed.
func (r *procRunner) killedByHost() bool {
	var ee *sandbox.ExitError
	return r.killed.Load() && errors.As(r.exitErr, &ee) && ee.Signal == syscall.SIGKILL
}

// exitStatus describes how the process ended, with the sandbox limits in force when
// it failed; call it after exited is closed.
func (r *procRunner) exitStatus() string {
	var ee *sandbox.ExitError
	switch {
	case r.exitErr == nil:
		return "exit status 0"
	case errors.As(r.exitErr, &ee):
		return ee.Detail()
	}
	return r.exitErr.Error()
}

func (r *procRunner) Stdout() io.ReadCloser           { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser           { return drainedReader(r.drained) }
func (r *procRunner) Name() string                    { return r.box.Spec().Name }
func (r *procRunner) Diagnose(context.Context) string { return "" }
func (r *procRunner) ID() string {
	if pid := r.box.PID(); pid != 0 {
		return strconv.Itoa(pid)
	}
	return ""
}
func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}
func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// attachedRunner follows a plugin process the host attached to but does not own (a
// plugin started by hand with -debug): Wait returns when the process is gone or the
// host detached; Kill only detaches.
type attachedRunner struct {
	pid      int
	detached chan struct{}
	once     sync.Once
	exited   chan struct{} // closed when the process is gone (not on detach)
}

func newAttachedRunner(pid int) *attachedRunner {
	return &attachedRunner{pid: pid, detached: make(chan struct{}), exited: make(chan struct{})}
}

func (r *attachedRunner) Wait(context.Context) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-r.detached:
			return nil
		case <-t.C:
			if processGone(r.pid) {
				close(r.exited)
				return nil
			}
		}
	}
}

func (r *attachedRunner) Kill(context.Context) error {
	r.once.Do(func() { close(r.detached) })
	return nil
}

func (r *attachedRunner) ID() string { return strconv.Itoa(r.pid) }
func (r *attachedRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}
func (r *attachedRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// drainedReader is what go-plugin reads as a plugin's stderr: nothing, and the end
// once done is closed (go-plugin reaps the process after that).
type drainedReader <-chan struct{}

func (d drainedReader) Read([]byte) (int, error) { <-d; return 0, io.EOF }
func (d drainedReader) Close() error             { return nil }

package mcp

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/toolhost/toolhost/internal/restart"
	"github.com/toolhost/toolhost/scope"
)

// State is a supervised server's condition (see restart.State).
type State = restart.State

// The states a Supervisor reports.
const (
	Running    = restart.Running
	Restarting = restart.Restarting
	Failed     = restart.Failed
	Stopped    = restart.Stopped
)

// Supervisor owns the generations of one MCP server in one Location: it starts the
// first, restarts after crashes with backoff under Config.Budget, and stops the
// current one when its scope closes. Safe for concurrent use.
type Supervisor struct {
	cfg    Config
	target Target
	scope  *scope.Scope

	mu      sync.Mutex
	cur     *Instance
	gen     uint64
	state   State
	err     error
	crashes restart.Tracker
	changed chan struct{} // closed and replaced on every change of cur or state
}

// Supervise starts the server's first generation in a child scope of parent and
// watches it. A failed first start is returned (a *StartError; nothing is left
// running); later failures are restarts' business and show in State. Closing parent
// (or the supervisor, see Close) stops everything.
func Supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target) (*Supervisor, error) {
	sc, err := parent.Child()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg.withDefaults(), target: target, scope: sc, changed: make(chan struct{})}
	inst, err := s.startNext(ctx)
	if err != nil {
		_ = sc.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	s.set(inst, Running, nil)
	_ = sc.Go(s.watch)
	return s, nil
}

func (s *Supervisor) startNext(ctx context.Context) (*Instance, error) {
	s.mu.Lock()
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	return Start(ctx, s.scope, s.cfg, s.target, gen)
}

// set records a change and wakes Changed's waiters; inst nil keeps the current one.
func (s *Supervisor) set(inst *Instance, st State, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst != nil {
		s.cur = inst
	}
	s.state, s.err = st, err
	close(s.changed)
	s.changed = make(chan struct{})
}

// watch waits for the current generation to die and restarts it.
func (s *Supervisor) watch(ctx context.Context) {
	for {
		inst := s.Current()
		select {
		case <-ctx.Done():
			s.set(nil, Stopped, nil)
			return
		case <-inst.Dead():
		}
		if ctx.Err() != nil || inst.scope.Context().Err() != nil {
			// Stopped on purpose, not crashed.
			s.set(nil, Stopped, nil)
			return
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.cfg.StopGrace)
		crash := inst.crashed(closeCtx)
		cancel()
		s.cfg.Logger.Error("MCP server crashed", "server", s.cfg.Name, "generation", inst.generation, "status", crash.Status)
		if !s.restart(ctx, crash) {
			return
		}
	}
}

// restart starts new generations until one runs, the budget is spent, or ctx ends.
func (s *Supervisor) restart(ctx context.Context, cause error) bool {
	for {
		backoff, ok := s.spend(cause)
		if !ok {
			return false
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			s.set(nil, Stopped, nil)
			return false
		case <-t.C:
		}
		inst, err := s.startNext(ctx)
		if err == nil {
			s.set(inst, Running, nil)
			s.cfg.Logger.Info("MCP server restarted", "server", s.cfg.Name, "generation", inst.generation)
			return true
		}
		if ctx.Err() != nil {
			s.set(nil, Stopped, nil)
			return false
		}
		cause = err
	}
}

// spend records one crash; it reports the backoff before the next start, or false
// when the budget is spent (the supervisor is then Failed).
func (s *Supervisor) spend(cause error) (time.Duration, bool) {
	s.mu.Lock()
	backoff, n, ok := s.crashes.Crash(s.cfg.Budget, time.Now())
	s.mu.Unlock()
	if !ok {
		err := fmt.Errorf("mcp: server %q failed: %d crashes within %s, not restarting; last: %w", s.cfg.Name, n, s.cfg.Budget.Window, cause)
		s.set(nil, Failed, err)
		s.cfg.Logger.Error("MCP server failed", "server", s.cfg.Name, "error", err)
		return 0, false
	}
	s.set(nil, Restarting, cause)
	return backoff, true
}

// Name returns the server's name.
func (s *Supervisor) Name() string { return s.cfg.Name }

// State returns the server's condition and, unless Running, why.
func (s *Supervisor) State() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.err
}

// Current returns the generation serving now (possibly stopped, when not Running).
func (s *Supervisor) Current() *Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Changed returns a channel closed at the next change of State or Current, so a
// caller can wait for a restart without polling.
func (s *Supervisor) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Close stops the watch and the current generation: its tools vanish and its
// process group is gone when Close returns. Idempotent.
func (s *Supervisor) Close(ctx context.Context) error { return s.scope.Close(ctx) }

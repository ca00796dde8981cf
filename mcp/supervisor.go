package mcp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/toolhost/toolhost/internal/restart"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
)

// State is a supervised server's condition (see restart.State).
type State = restart.State

// The states a Supervisor reports.
const (
	Starting   = restart.Starting
	Running    = restart.Running
	Restarting = restart.Restarting
	Failed     = restart.Failed
	Stopped    = restart.Stopped
)

// ErrStopped is returned by Restart once the supervisor's scope is closing.
var ErrStopped = errors.New("mcp: supervisor stopped")

// Supervisor owns the generations of one MCP server in one Location: it starts the
// first, restarts after crashes with backoff under Config.Budget, and stops the
// current one when its scope closes. While the server restarts its tools stay
// advertised (registry.Hold): a call waits for the next generation up to the start
// timeout plus the longest backoff. Safe for concurrent use.
type Supervisor struct {
	cfg    Config
	target Target
	scope  *scope.Scope
	hold   *registry.Hold

	// op serializes what starts generations: restarts after crashes and by hand.
	op sync.Mutex

	mu       sync.Mutex
	cur      *Instance
	gen      uint64
	state    State
	err      error
	restarts int
	crashes  restart.Tracker
	changed  chan struct{} // closed and replaced on every change of cur, state or err
}

// Supervise starts the server's first generation in a child scope of parent and
// watches it. A failed first start is returned (a *StartError; nothing is left
// running); later failures are restarts' business and show in State. Closing parent
// (or the supervisor, see Close) stops everything.
func Supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target) (*Supervisor, error) {
	return supervise(ctx, parent, cfg, target, false)
}

// Keep is Supervise for a Location that degrades rather than fails: a failed first
// start (a *StartError with the server's stderr) is not returned but kept as the
// last error, and the server is retried under the budget as after a crash, until a
// generation runs or the budget is spent (Failed). Keep fails only when parent is
// closed. It returns after the first attempt.
func Keep(ctx context.Context, parent *scope.Scope, cfg Config, target Target) (*Supervisor, error) {
	return supervise(ctx, parent, cfg, target, true)
}

func supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target, keep bool) (*Supervisor, error) {
	sc, err := parent.Child()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg.withDefaults(), target: target, scope: sc, state: Starting, changed: make(chan struct{})}
	if target.Registry != nil {
		wait := s.cfg.StartTimeout + s.cfg.Budget.MaxBackoff
		if h, err := target.Registry.Hold(sc.Context(), target.Location, registry.Source{Kind: "mcp", Name: s.cfg.Name}, wait); err == nil {
			s.hold = h
			_ = sc.Defer(ctx, func(context.Context) error { h.Release(); return nil })
		}
	}
	inst, err := s.startNext(ctx)
	if err != nil && (!keep || sc.Context().Err() != nil) {
		_ = sc.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err != nil {
		s.mu.Lock()
		s.state, s.err = Restarting, err // reported from now on; the retries follow
		s.mu.Unlock()
		s.cfg.Logger.Error("MCP server did not start; retrying under the crash budget", "server", s.cfg.Name, "error", err)
		_ = sc.Go(func(ctx context.Context) {
			s.restart(ctx, err, nil)
			s.watch(ctx)
		})
		return s, nil
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
	s.changedLocked()
}

func (s *Supervisor) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// watch waits for the current generation to die and restarts it; with none running
// (failed) it waits for a Restart. It runs until the supervisor's scope closes.
func (s *Supervisor) watch(ctx context.Context) {
	for {
		s.mu.Lock()
		inst, changed := s.cur, s.changed
		s.mu.Unlock()
		var dead <-chan struct{}
		if inst != nil && inst.scope.Context().Err() == nil {
			dead = inst.Dead()
		}
		select {
		case <-ctx.Done():
			s.set(nil, Stopped, nil)
			return
		case <-changed:
			continue
		case <-dead:
		}
		if ctx.Err() != nil {
			s.set(nil, Stopped, nil)
			return
		}
		if s.Current() != inst {
			continue // replaced by a Restart meanwhile
		}
		if inst.scope.Context().Err() != nil {
			// Stopped on purpose, not crashed.
			s.set(nil, Stopped, nil)
			return
		}
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.cfg.StopGrace)
		crash := inst.crashed(closeCtx)
		cancel()
		s.cfg.Logger.Error("MCP server crashed", "server", s.cfg.Name, "generation", inst.generation, "status", crash.Status)
		s.restart(ctx, crash, inst)
	}
}

// restart starts new generations until one runs, a Restart replaces crashed, the
// budget is spent, or ctx ends.
func (s *Supervisor) restart(ctx context.Context, cause error, crashed *Instance) {
	for {
		backoff, ok := s.spend(cause, crashed)
		if !ok {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			s.set(nil, Stopped, nil)
			return
		case <-t.C:
		}
		s.op.Lock()
		if s.Current() != crashed {
			s.op.Unlock()
			return // restarted by hand meanwhile
		}
		s.mu.Lock()
		s.restarts++
		s.changedLocked()
		s.mu.Unlock()
		inst, err := s.startNext(ctx)
		if err == nil {
			s.set(inst, Running, nil)
			s.op.Unlock()
			s.cfg.Logger.Info("MCP server restarted", "server", s.cfg.Name, "generation", inst.generation)
			return
		}
		s.op.Unlock()
		if ctx.Err() != nil {
			s.set(nil, Stopped, nil)
			return
		}
		cause = err
	}
}

// spend records one crash; it reports the backoff before the next start, or false
// when the budget is spent (the supervisor is then Failed) or crashed is no longer
// current.
func (s *Supervisor) spend(cause error, crashed *Instance) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != crashed {
		return 0, false
	}
	defer s.changedLocked()
	backoff, n, ok := s.crashes.Crash(s.cfg.Budget, time.Now())
	if !ok {
		s.state = Failed
		s.err = fmt.Errorf("mcp: server %q failed: %d crashes within %s, not restarting; last: %w", s.cfg.Name, n, s.cfg.Budget.Window, cause)
		s.cfg.Logger.Error("MCP server failed", "server", s.cfg.Name, "error", s.err)
		if s.hold != nil {
			s.hold.Fail(s.err)
		}
		return 0, false
	}
	s.state, s.err = Restarting, cause
	return backoff, true
}

// Restart starts a new generation by hand, with a fresh crash budget: a Failed or
// Restarting server comes back; a Running one is replaced (the new generation
// registers, then the old one stops, so a tool whose contract is unchanged is never
// absent). It returns the new generation's *StartError, if any: the server then
// keeps its state, and the error is its last error. Restarts and crash restarts are
// serialized. It fails with ErrStopped once the supervisor is closing.
func (s *Supervisor) Restart(ctx context.Context) error {
	s.op.Lock()
	defer s.op.Unlock()
	if s.scope.Context().Err() != nil {
		return ErrStopped
	}
	old := s.Current()
	inst, err := s.startNext(ctx)
	if err != nil {
		s.mu.Lock()
		s.err = err
		s.changedLocked()
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	s.crashes.Reset()
	s.mu.Unlock()
	s.set(inst, Running, nil)
	s.cfg.Logger.Info("MCP server restarted by hand", "server", s.cfg.Name, "generation", inst.generation)
	if old != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.cfg.StopGrace)
		defer cancel()
		_ = old.Stop(stopCtx)
	}
	return nil
}

// Name returns the server's name.
func (s *Supervisor) Name() string { return s.cfg.Name }

// Config returns the server's config, defaults applied.
func (s *Supervisor) Config() Config { return s.cfg }

// State returns the server's condition and its last error: why it is not Running,
// or, while Running, why the last Restart failed.
func (s *Supervisor) State() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.err
}

// Restarts returns how many times a generation was started again after a crash or a
// failed start (Restart by hand is not counted).
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Current returns the generation serving now (possibly stopped, when not Running),
// or nil when none ever started.
func (s *Supervisor) Current() *Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Changed returns a channel closed at the next change of State, Current or
// Restarts, so a caller can wait for a restart without polling.
func (s *Supervisor) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Close stops the watch and the current generation: its tools vanish and its
// process group is gone when Close returns. Idempotent.
func (s *Supervisor) Close(ctx context.Context) error { return s.scope.Close(ctx) }

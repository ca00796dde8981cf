package plugins

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/toolhost/toolhost/internal/restart"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
)

// Budget limits restarts after crashes (see restart.Budget).
type Budget = restart.Budget

// State is a supervised plugin's condition (see restart.State).
type State = restart.State

// The states a Supervisor reports.
const (
	Starting   = restart.Starting
	Running    = restart.Running
	Restarting = restart.Restarting
	Failed     = restart.Failed
	Stopped    = restart.Stopped
)

// Supervisor owns the generations of one plugin in one Location: it starts the
// first, restarts after crashes with backoff under a Budget, replaces the current one
// on Reload, and stops the current one when its scope closes. Whichever generation is
// current is the one watched for crashes. Safe for concurrent use.
type Supervisor struct {
	target Target
	budget Budget
	scope  *scope.Scope

	// op serializes what starts generations: crash restarts and reloads.
	op sync.Mutex

	mu       sync.Mutex
	cfg      Config
	cur      *Instance
	gen      uint64
	state    State
	err      error
	crashes  restart.Tracker
	restarts int
	swapped  chan struct{} // closed (and replaced) when cur changes
	changed  chan struct{} // closed (and replaced) at every change of cur, state or err
	hold     *registry.Hold
}

// Supervise starts the plugin's first generation in a child scope of parent and
// watches it. A failed first start is returned (and nothing is left running); later
// failures are restarts' business and show in State and Err. Closing parent (or the
// supervisor's own scope) stops everything.
func Supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target, budget Budget) (*Supervisor, error) {
	return supervise(ctx, parent, cfg, target, budget, false)
}

// Keep is Supervise for a Location that degrades rather than fails: a failed first
// start is not returned but kept. The supervisor then reports Restarting with the
// start's error (a *StartError with the plugin's stderr) and retries under the
// budget, like after a crash, until a generation runs or the budget is spent
// (Failed). Keep fails only when parent is closed. It returns after the first
// attempt, so a plugin that starts has registered its tools.
func Keep(ctx context.Context, parent *scope.Scope, cfg Config, target Target, budget Budget) (*Supervisor, error) {
	return supervise(ctx, parent, cfg, target, budget, true)
}

func supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target, budget Budget, keep bool) (*Supervisor, error) {
	sc, err := parent.Child()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg.withDefaults(), target: target, budget: budget.WithDefaults(), scope: sc,
		state: Starting, swapped: make(chan struct{}), changed: make(chan struct{})}
	if target.Registry != nil {
		// While the plugin restarts its tools stay advertised, and calls wait for the
		// successor up to its start timeout (plus the backoff before it).
		wait := s.cfg.StartTimeout + s.budget.MaxBackoff
		if h, err := target.Registry.Hold(sc.Context(), target.Location, registry.Source{Kind: "plugin", Name: s.cfg.Name}, wait); err == nil {
			s.hold = h
			_ = sc.Defer(ctx, func(context.Context) error { h.Release(); return nil })
		}
	}
	inst, err := s.startNext(ctx, s.cfg)
	if err != nil && (!keep || sc.Context().Err() != nil) {
		_ = sc.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err != nil {
		s.mu.Lock()
		s.state, s.err = Restarting, err // reported from now on; the retries follow
		s.mu.Unlock()
		s.cfg.Logger.Error("plugin did not start; retrying under the crash budget", "plugin", s.cfg.Name, "error", err)
		_ = sc.Go(func(ctx context.Context) {
			if !s.restart(ctx, err, nil) {
				s.down(ctx)
			}
			s.watch(ctx)
		})
		return s, nil
	}
	s.setRunning(inst, s.cfg)
	_ = sc.Go(s.watch)
	return s, nil
}

// down waits, with the plugin down (failed or stopped), for a reload or the end.
func (s *Supervisor) down(ctx context.Context) {
	s.mu.Lock()
	swapped := s.swapped
	cur := s.cur
	s.mu.Unlock()
	if cur != nil {
		return
	}
	select {
	case <-ctx.Done():
	case <-swapped:
	}
}

// startNext starts the next generation with cfg. A start that fails does not use up
// its number: generations that ran are numbered without gaps. The caller holds s.op
// (or, in Supervise, owns s alone).
func (s *Supervisor) startNext(ctx context.Context, cfg Config) (*Instance, error) {
	s.mu.Lock()
	gen := s.gen + 1
	s.mu.Unlock()
	inst, err := Start(ctx, s.scope, cfg, s.target, gen)
	if err == nil {
		s.mu.Lock()
		s.gen = gen
		s.mu.Unlock()
	}
	return inst, err
}

// setRunning makes inst, started with cfg, the current generation and wakes the
// watch, so that it watches inst from now on.
func (s *Supervisor) setRunning(inst *Instance, cfg Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg, s.cur, s.state, s.err = cfg, inst, Running, nil
	close(s.swapped)
	s.swapped = make(chan struct{})
	s.changedLocked()
}

// changedLocked wakes Changed's waiters; s.mu is held.
func (s *Supervisor) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// watch waits for the current generation to exit and restarts it. It runs until the
// supervisor's scope closes. A generation retired by a reload is not current any
// more, so its exit is not a crash. When the plugin stays down (stopped by hand, or
// the crash budget spent) the watch waits for a reload to bring a generation back.
func (s *Supervisor) watch(ctx context.Context) {
	for {
		s.mu.Lock()
		inst, swapped := s.cur, s.swapped
		s.mu.Unlock()
		var exited <-chan struct{}
		if inst != nil {
			exited = inst.Exited()
		}
		select {
		case <-ctx.Done():
			s.setState(nil, Stopped, nil)
			return
		case <-swapped:
			continue
		case <-exited:
		}
		switch {
		case ctx.Err() != nil:
			s.setState(nil, Stopped, nil)
			return
		case s.Current() != inst:
			continue // replaced by a reload meanwhile
		case inst.scope.Context().Err() != nil:
			// Stopped on purpose, not crashed.
			s.setState(inst, Stopped, nil)
		default:
			crash := inst.crashed(context.WithoutCancel(ctx))
			cfg := s.Config()
			cfg.Logger.Error("plugin crashed", "plugin", cfg.Name, "generation", inst.generation, "status", crash.Status)
			if s.restart(ctx, crash, inst) {
				continue
			}
		}
		select { // down until a reload or the end
		case <-ctx.Done():
			s.setState(nil, Stopped, nil)
			return
		case <-swapped:
		}
	}
}

// restart starts new generations until one runs, a reload replaces crashed, the
// budget is spent, or ctx ends. It reports whether a generation runs.
func (s *Supervisor) restart(ctx context.Context, cause error, crashed *Instance) bool {
	for {
		backoff, ok := s.spend(cause, crashed)
		if !ok {
			return s.Current() != crashed
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		s.op.Lock()
		if s.Current() != crashed {
			s.op.Unlock()
			return true // a reload started a generation meanwhile
		}
		s.mu.Lock()
		s.restarts++
		s.changedLocked()
		s.mu.Unlock()
		cfg := s.Config()
		inst, err := s.startNext(ctx, cfg)
		if err == nil {
			s.setRunning(inst, cfg)
			s.op.Unlock()
			cfg.Logger.Info("plugin restarted", "plugin", cfg.Name, "generation", inst.generation)
			return true
		}
		s.op.Unlock()
		if ctx.Err() != nil {
			return false
		}
		cause = err
	}
}

// spend records one crash of crashed; it reports the backoff before the next start,
// or false when the budget is spent (the supervisor is then Failed) or crashed is no
// longer current.
func (s *Supervisor) spend(cause error, crashed *Instance) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != crashed {
		return 0, false
	}
	defer s.changedLocked()
	backoff, n, ok := s.crashes.Crash(s.budget, time.Now())
	if !ok {
		s.state = Failed
		s.err = fmt.Errorf("plugins: plugin %q failed: %d crashes within %s, not restarting; last: %w", s.cfg.Name, n, s.budget.Window, cause)
		s.cfg.Logger.Error("plugin failed", "plugin", s.cfg.Name, "error", s.err)
		if s.hold != nil {
			s.hold.Fail(s.err)
		}
		return 0, false
	}
	s.state, s.err = Restarting, cause
	return backoff, true
}

// setState sets the state, unless inst is set and no longer current (a reload has
// replaced it: its state is the new generation's).
func (s *Supervisor) setState(inst *Instance, st State, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst != nil && s.cur != inst {
		return
	}
	s.state, s.err = st, err
	s.changedLocked()
}

// Name returns the plugin's name.
func (s *Supervisor) Name() string { return s.Config().Name }

// Config returns the config the current generation was started with (defaults
// applied). Reload takes a modified copy.
func (s *Supervisor) Config() Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// State returns the plugin's condition and its last error: why it is not Running,
// or, while Running, why the last Reload (or Restart) failed — the old generation
// keeps serving then, and the error stays until a generation starts.
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

// Restarts returns how many times a generation was started again after a crash or
// a failed start (reloads and Restart are not counted).
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Changed returns a channel closed at the next change of State, Current or Restarts,
// so a caller can follow the plugin's health without polling. Call it again after
// it is closed.
func (s *Supervisor) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Restart starts a new generation by hand with the current config: a Failed (or
// Restarting) plugin comes back with a fresh crash budget, a Running one is replaced
// as by Reload. It returns the new generation's start error, if any (the source
// then keeps its state, and the error is its last error).
func (s *Supervisor) Restart(ctx context.Context) error {
	_, err := s.Reload(ctx, s.Config())
	return err
}

// Close stops the watch and the current generation. Idempotent.
func (s *Supervisor) Close(ctx context.Context) error { return s.scope.Close(ctx) }

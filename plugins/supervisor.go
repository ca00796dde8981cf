package plugins

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/toolhost/toolhost/scope"
)

// Budget limits restarts after crashes: at most Crashes crashes within Window; past
// that the plugin stays failed. Backoff doubles from MinBackoff up to MaxBackoff.
type Budget struct {
	Crashes    int           // default 5
	Window     time.Duration // default 1m
	MinBackoff time.Duration // default 100ms
	MaxBackoff time.Duration // default 5s
}

func (b Budget) withDefaults() Budget {
	if b.Crashes <= 0 {
		b.Crashes = 5
	}
	if b.Window <= 0 {
		b.Window = time.Minute
	}
	if b.MinBackoff <= 0 {
		b.MinBackoff = 100 * time.Millisecond
	}
	if b.MaxBackoff <= 0 {
		b.MaxBackoff = 5 * time.Second
	}
	return b
}

// State is a supervised plugin's condition.
type State string

const (
	// Running: a generation is serving.
	Running State = "running"
	// Restarting: the last generation crashed; a new one is being started.
	Restarting State = "restarting"
	// Failed: the crash budget is spent; the plugin stays down (see Supervisor.Err).
	Failed State = "failed"
	// Stopped: the supervisor's scope closed.
	Stopped State = "stopped"
)

// Supervisor owns the generations of one plugin in one Location: it starts the
// first, restarts after crashes with backoff under a Budget, and stops the current
// one when its scope closes. Safe for concurrent use.
type Supervisor struct {
	cfg    Config
	target Target
	budget Budget
	scope  *scope.Scope

	mu      sync.Mutex
	cur     *Instance
	gen     uint64
	state   State
	err     error
	crashes []time.Time
}

// Supervise starts the plugin's first generation in a child scope of parent and
// watches it. A failed first start is returned (and nothing is left running); later
// failures are restarts' business and show in State and Err. Closing parent (or the
// supervisor's own scope) stops everything.
func Supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target, budget Budget) (*Supervisor, error) {
	sc, err := parent.Child()
	if err != nil {
		return nil, err
	}
	s := &Supervisor{cfg: cfg.withDefaults(), target: target, budget: budget.withDefaults(), scope: sc}
	inst, err := s.startNext(ctx)
	if err != nil {
		_ = sc.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	s.setRunning(inst)
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

func (s *Supervisor) setRunning(inst *Instance) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur, s.state, s.err = inst, Running, nil
}

// watch waits for the current generation to exit and restarts it.
func (s *Supervisor) watch(ctx context.Context) {
	for {
		s.mu.Lock()
		inst := s.cur
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			s.setState(Stopped, nil)
			return
		case <-inst.Exited():
		}
		if ctx.Err() != nil || inst.scope.Context().Err() != nil {
			// Stopped on purpose, not crashed.
			s.setState(Stopped, nil)
			return
		}
		crash := inst.crashed(context.WithoutCancel(ctx))
		s.cfg.Logger.Error("plugin crashed", "plugin", s.cfg.Name, "generation", inst.generation, "status", crash.Status)
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
		select {
		case <-ctx.Done():
			s.setState(Stopped, nil)
			return false
		case <-time.After(backoff):
		}
		inst, err := s.startNext(ctx)
		if err == nil {
			s.setRunning(inst)
			s.cfg.Logger.Info("plugin restarted", "plugin", s.cfg.Name, "generation", inst.generation)
			return true
		}
		if ctx.Err() != nil {
			s.setState(Stopped, nil)
			return false
		}
		cause = err
	}
}

// spend records one crash; it reports the backoff before the next start, or false
// when the budget is spent (the supervisor is then Failed).
func (s *Supervisor) spend(cause error) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	recent := s.crashes[:0]
	for _, t := range s.crashes {
		if now.Sub(t) < s.budget.Window {
			recent = append(recent, t)
		}
	}
	s.crashes = append(recent, now)
	if len(s.crashes) > s.budget.Crashes {
		s.state = Failed
		s.err = fmt.Errorf("plugins: plugin %q failed: %d crashes within %s, not restarting; last: %w", s.cfg.Name, len(s.crashes), s.budget.Window, cause)
		s.cfg.Logger.Error("plugin failed", "plugin", s.cfg.Name, "error", s.err)
		return 0, false
	}
	s.state, s.err = Restarting, cause
	backoff := s.budget.MinBackoff << (len(s.crashes) - 1)
	return min(backoff, s.budget.MaxBackoff), true
}

func (s *Supervisor) setState(st State, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.err = st, err
}

// Name returns the plugin's name.
func (s *Supervisor) Name() string { return s.cfg.Name }

// State returns the plugin's condition and, unless Running, why.
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

// Close stops the watch and the current generation. Idempotent.
func (s *Supervisor) Close(ctx context.Context) error { return s.scope.Close(ctx) }

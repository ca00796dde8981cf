package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
)

// ErrStopped is returned by Reload and Restart once the supervisor's scope is
// closing or closed.
var ErrStopped = errors.New("supervise: the supervisor is stopped")

// Generation is one started generation of a supervised program: one process (or
// session) and one scope. Its methods must be safe for concurrent use.
type Generation interface {
	// Generation returns the number the supervisor started it as.
	Generation() uint64
	// PID returns its process's id, or 0 when the host launched no process for it.
	PID() int
	// Stderr returns the tail of what it wrote to stderr ("" when none).
	Stderr() string
	// Scope returns its scope: its tools are registered into it and its calls
	// tracked by it; closing the scope stops the generation.
	Scope() *scope.Scope
	// Done returns a channel closed when the generation has ended, for whatever
	// reason: its process exited, or its session ended.
	Done() <-chan struct{}
	// Crash says why a generation ended on its own. The supervisor calls it once
	// Done is closed and before it closes the scope with it as the cause.
	Crash() error
	// Release unregisters the generation's tools; its calls in flight go on. A
	// reload calls it before it drains the generation.
	Release()
}

// Program is how a Supervisor starts one kind of program.
type Program[C any, G Generation] interface {
	// Prepare returns cfg with its defaults applied, and what the supervisor needs
	// to know of it.
	Prepare(cfg C) (C, Settings)
	// Start starts generation gen from cfg (as Prepare returned it) in a new child
	// scope of parent and returns once it serves (its tools are registered). On an
	// error nothing it started is left running.
	Start(ctx context.Context, parent *scope.Scope, cfg C, gen uint64) (G, error)
}

// Settings is what a Supervisor needs to know of a program and its config.
type Settings struct {
	// Kind is the registry source kind of the program's tools ("plugin", "mcp");
	// Name is its name in the Location config. Kind:Name identifies it in logs.
	Kind, Name string
	// Noun names a program of the kind for a person: "plugin", "MCP server".
	Noun string
	// StartTimeout bounds one start; a caller waits for a restarting program's next
	// generation up to StartTimeout plus Budget.MaxBackoff.
	StartTimeout time.Duration
	// StopGrace bounds the close of a crashed generation, and both the drain and the
	// stop of a retired one.
	StopGrace time.Duration
	// Budget limits restarts after crashes; zero fields take the defaults.
	Budget Budget
	// Logger receives the supervisor's reports (crashes, restarts, reloads).
	Logger hclog.Logger
	// Registry, if set, holds the program's tools (registry.Hold) in Location while
	// it restarts.
	Registry *registry.Registry
	Location string
}

// Status is a consistent snapshot of a supervised program.
type Status struct {
	// State is its condition; Err its last error (see Supervisor.State).
	State State
	Err   error
	// Restarts counts the generations started again after a crash or failed start.
	Restarts int
	// Current is the generation serving now (possibly stopped, when not Running), or
	// nil when none ever started.
	Current Generation
}

// Reload reports what one Reload did and how long each phase took.
type Reload struct {
	// From is the generation that was serving before (0 if none was), To the new one.
	From, To uint64
	// OldPID and NewPID are the two generations' process ids (0 when not launched by
	// the host).
	OldPID, NewPID int
	// Start is the time to start the new generation, up to its tools being
	// registered: from then on it serves.
	Start time.Duration
	// Swap is the time to retire the old generation: drain its calls in flight, then
	// stop it.
	Swap time.Duration
	// Interrupted is set when calls in flight on the old generation outlived the
	// drain and were interrupted by its stop.
	Interrupted bool
}

// Supervisor owns the generations of one program in one Location (see the package
// documentation for its rules). Safe for concurrent use.
type Supervisor[C any, G Generation] struct {
	prog  Program[C, G]
	scope *scope.Scope
	hold  *registry.Hold

	// op serializes what starts generations: crash restarts and reloads.
	op sync.Mutex

	mu       sync.Mutex
	cfg      C
	set      Settings
	cur      G
	curGen   uint64 // cur's generation; 0 while none ever started
	gen      uint64 // the last generation that started
	state    State
	err      error
	crashes  tracker
	restarts int
	swapped  chan struct{} // closed (and replaced) when cur changes
	changed  chan struct{} // closed (and replaced) at every change of cur, state or err
}

// Start starts the program's first generation in a child scope of parent and
// watches it. A failed first start is returned (and nothing is left running); later
// failures are restarts' business and show in State. Closing parent (or the
// supervisor, see Close) stops everything.
func Start[C any, G Generation](ctx context.Context, parent *scope.Scope, prog Program[C, G], cfg C) (*Supervisor[C, G], error) {
	return start(ctx, parent, prog, cfg, false)
}

// Keep is Start for a Location that degrades rather than fails: a failed first start
// is not returned (nor logged) but kept as the last error (state Restarting), for the
// caller to report, and the program is
// retried under the budget as after a crash, until a generation runs or the budget
// is spent (Failed). Keep fails only when parent is closed. It returns after the
// first attempt, so a program that starts has registered its tools.
func Keep[C any, G Generation](ctx context.Context, parent *scope.Scope, prog Program[C, G], cfg C) (*Supervisor[C, G], error) {
	return start(ctx, parent, prog, cfg, true)
}

func start[C any, G Generation](ctx context.Context, parent *scope.Scope, prog Program[C, G], cfg C, keep bool) (*Supervisor[C, G], error) {
	sc, err := parent.Child()
	if err != nil {
		return nil, err
	}
	cfg, set := prepare(prog, cfg)
	s := &Supervisor[C, G]{prog: prog, scope: sc, cfg: cfg, set: set, state: Starting,
		swapped: make(chan struct{}), changed: make(chan struct{})}
	if set.Registry != nil {
		// While the program restarts its tools stay advertised, and calls wait for the
		// successor up to its start timeout (plus the backoff before it).
		wait := set.StartTimeout + set.Budget.MaxBackoff
		if h, err := set.Registry.Hold(sc.Context(), set.Location, registry.Source{Kind: set.Kind, Name: set.Name}, wait); err == nil {
			s.hold = h
			_ = sc.Defer(ctx, func(context.Context) error { h.Release(); return nil })
		}
	}
	g, err := s.startNext(ctx, cfg)
	if err != nil && (!keep || sc.Context().Err() != nil) {
		_ = sc.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err != nil {
		// Not logged: the caller reports it (a Location lists the sources that do not
		// serve), and State says it from now on; the retries follow.
		s.mu.Lock()
		s.state, s.err = Restarting, err
		s.mu.Unlock()
		_ = sc.Go(func(ctx context.Context) {
			s.restart(ctx, err, 0)
			s.watch(ctx)
		})
		return s, nil
	}
	s.setRunning(g, cfg, set)
	_ = sc.Go(s.watch)
	return s, nil
}

func prepare[C any, G Generation](prog Program[C, G], cfg C) (C, Settings) {
	cfg, set := prog.Prepare(cfg)
	set.Budget = set.Budget.WithDefaults()
	if set.Logger == nil {
		set.Logger = hclog.NewNullLogger()
	}
	return cfg, set
}

func (set Settings) id() string { return set.Kind + ":" + set.Name }

// startNext starts the next generation with cfg. A start that fails does not use up
// its number: generations that ran are numbered without gaps. The caller holds s.op
// (or, in start, owns s alone).
func (s *Supervisor[C, G]) startNext(ctx context.Context, cfg C) (G, error) {
	s.mu.Lock()
	gen := s.gen + 1
	s.mu.Unlock()
	g, err := s.prog.Start(ctx, s.scope, cfg, gen)
	if err == nil {
		s.mu.Lock()
		s.gen = gen
		s.mu.Unlock()
	}
	return g, err
}

// setRunning makes g, started with cfg, the current generation and wakes the watch,
// so that it watches g from now on. g has registered what it registers as it
// starts, so the hold stops advertising what g did not register again.
func (s *Supervisor[C, G]) setRunning(g G, cfg C, set Settings) {
	s.mu.Lock()
	s.cfg, s.set, s.cur, s.curGen, s.state, s.err = cfg, set, g, g.Generation(), Running, nil
	close(s.swapped)
	s.swapped = make(chan struct{})
	s.changedLocked()
	s.mu.Unlock()
	if s.hold != nil {
		s.hold.Up()
	}
}

// changedLocked wakes Changed's waiters; s.mu is held.
func (s *Supervisor[C, G]) changedLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// current returns the current generation's number (0: none).
func (s *Supervisor[C, G]) current() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.curGen
}

// watch waits for the current generation to end and restarts it. It runs until the
// supervisor's scope closes. A generation retired by a reload is not current any
// more, so its end is not a crash. When the program stays down (stopped on purpose,
// or the crash budget spent) the watch waits for a reload to bring a generation back.
func (s *Supervisor[C, G]) watch(ctx context.Context) {
	for {
		s.mu.Lock()
		g, gen, swapped := s.cur, s.curGen, s.swapped
		s.mu.Unlock()
		var done <-chan struct{}
		if gen != 0 {
			done = g.Done()
		}
		select {
		case <-ctx.Done():
			s.setState(0, Stopped, nil)
			return
		case <-swapped:
			continue
		case <-done:
		}
		switch {
		case ctx.Err() != nil:
			s.setState(0, Stopped, nil)
			return
		case s.current() != gen:
			continue // replaced by a reload meanwhile
		case g.Scope().Context().Err() != nil:
			// Stopped on purpose, not crashed.
			s.setState(gen, Stopped, nil)
		default:
			crash := s.crashed(ctx, g)
			if s.restart(ctx, crash, gen) {
				continue
			}
		}
		select { // down until a reload or the end
		case <-ctx.Done():
			s.setState(0, Stopped, nil)
			return
		case <-swapped:
		}
	}
}

// crashed closes the scope of a generation that ended on its own, with its crash as
// the cause, so its calls in flight fail with the crash rather than as
// interruptions.
func (s *Supervisor[C, G]) crashed(ctx context.Context, g G) error {
	set := s.settings()
	crash := g.Crash()
	set.Logger.Error(set.Noun+" crashed", "source", set.id(), "generation", g.Generation(), "error", crash)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), set.StopGrace)
	defer cancel()
	_ = g.Scope().CloseWithCause(cctx, crash)
	return crash
}

// restart starts new generations until one runs, a reload replaces generation
// crashed (0: the first start failed), the budget is spent, or ctx ends. It reports
// whether a generation runs.
func (s *Supervisor[C, G]) restart(ctx context.Context, cause error, crashed uint64) bool {
	for {
		backoff, ok := s.spend(cause, crashed)
		if !ok {
			return s.current() != crashed
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		s.op.Lock()
		if s.current() != crashed {
			s.op.Unlock()
			return true // a reload started a generation meanwhile
		}
		s.mu.Lock()
		s.restarts++
		s.changedLocked()
		cfg, set := s.cfg, s.set
		s.mu.Unlock()
		g, err := s.startNext(ctx, cfg)
		if err == nil {
			s.setRunning(g, cfg, set)
			s.op.Unlock()
			set.Logger.Info(set.Noun+" restarted", "source", set.id(), "generation", g.Generation())
			return true
		}
		s.op.Unlock()
		if ctx.Err() != nil {
			return false
		}
		cause = err
	}
}

// spend records one crash of generation crashed; it reports the backoff before the
// next start, or false when the budget is spent (the supervisor is then Failed) or
// crashed is no longer current.
func (s *Supervisor[C, G]) spend(cause error, crashed uint64) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.curGen != crashed {
		return 0, false
	}
	defer s.changedLocked()
	backoff, n, ok := s.crashes.crash(s.set.Budget, time.Now())
	if !ok {
		s.state = Failed
		s.err = fmt.Errorf("not restarting after %d crashes within %s: %w", n, s.set.Budget.Window, cause)
		s.set.Logger.Error(s.set.Noun+" failed", "source", s.set.id(), "error", s.err)
		if s.hold != nil {
			s.hold.Fail(s.err)
		}
		return 0, false
	}
	s.state, s.err = Restarting, cause
	return backoff, true
}

// setState sets the state, unless gen is set and no longer current (a reload has
// replaced it: its state is the new generation's).
func (s *Supervisor[C, G]) setState(gen uint64, st State, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != 0 && s.curGen != gen {
		return
	}
	s.state, s.err = st, err
	s.changedLocked()
}

// Reload replaces the serving generation with a new one started from cfg (usually
// Config() with a part changed, such as a rebuilt binary; the name must not change).
//
// It starts generation N+1 in the supervisor's scope and lets it register its tools,
// which win over the old ones; only then does it retire generation N: N's
// registrations are released, so a call settled from then on on a Request that
// captured N runs on N+1 when the tool's contract fingerprint is unchanged and
// settles unavailable when it changed (the registry's capture rule); the calls
// already executing on N are given N's stop grace to finish (the drain); then N's
// scope closes, interrupting what is left, and its process is stopped. Reload
// returns once N's process is gone.
//
// If the new generation fails to start, the old one keeps serving untouched and the
// error is returned (the kind's start error, with the program's stderr); it is also
// the supervisor's last error (State), while the state stays what it was. A
// successful reload resets the crash budget, brings a Failed program back, and from
// then on the new generation is the one restarted after a crash. Reloads and crash
// restarts are serialized. Reload fails with ErrStopped once the supervisor is
// closing.
func (s *Supervisor[C, G]) Reload(ctx context.Context, cfg C) (Reload, error) {
	return s.Replace(ctx, func(context.Context, C) (C, error) { return cfg, nil }, nil)
}

// Replace is Reload for a changed config that has to be made first, and that the
// caller shows as serving only once it serves. next makes the new config from the
// current one (Config); it may take long (build a binary, run a helper) and runs
// without blocking crash restarts. If next fails, or the new generation fails to
// start, the current generation keeps serving untouched, commit is not called, and
// the error is returned and is the last error (State), as a failed Reload's, until
// a generation starts or ClearError. Otherwise commit (if not nil) is called once the
// new generation has registered its tools, before it becomes current and before the
// old one is retired, so that what the caller records as the serving config changes
// with the generation and never ahead of it. Replace then returns as Reload does.
func (s *Supervisor[C, G]) Replace(ctx context.Context, next func(ctx context.Context, cur C) (C, error), commit func()) (Reload, error) {
	var r Reload
	if s.scope.Context().Err() != nil {
		return r, ErrStopped
	}
	cfg, err := next(ctx, s.Config())
	if err != nil {
		s.failReload(err)
		return r, err
	}
	s.op.Lock()
	defer s.op.Unlock()
	if s.scope.Context().Err() != nil {
		return r, ErrStopped
	}
	cfg, set := prepare(s.prog, cfg)
	s.mu.Lock()
	old, oldGen, oldSet := s.cur, s.curGen, s.set
	s.mu.Unlock()
	if set.Name != oldSet.Name {
		return r, fmt.Errorf("supervise: reload %s %q: the config names another, %q", oldSet.Noun, oldSet.Name, set.Name)
	}
	if oldGen != 0 {
		r.From, r.OldPID = oldGen, old.PID()
	}

	begin := time.Now()
	g, err := s.startNext(ctx, cfg)
	r.Start = time.Since(begin)
	if err != nil {
		if s.scope.Context().Err() != nil {
			return r, errors.Join(ErrStopped, err)
		}
		s.failReload(err)
		return r, err
	}
	r.To, r.NewPID = g.Generation(), g.PID()
	s.mu.Lock()
	s.crashes.reset()
	s.mu.Unlock()
	if commit != nil {
		commit()
	}
	s.setRunning(g, cfg, set)
	set.Logger.Info(set.Noun+" reloaded", "source", set.id(), "generation", r.To)

	begin = time.Now()
	if oldGen != 0 {
		r.Interrupted = retire(ctx, old, oldSet.StopGrace)
	}
	r.Swap = time.Since(begin)
	return r, nil
}

// failReload makes err, why a reload did not start its generation, the last error;
// the old generation (if any) keeps serving, and the state stays what it was.
func (s *Supervisor[C, G]) failReload(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
	s.changedLocked()
}

// ClearError forgets the last error of a Running program: the error of a failed
// Reload, Replace or Restart, once the caller no longer wants what failed (the
// config it tried was edited back to the serving one). In another state the last
// error says why the program does not serve, and ClearError changes nothing.
func (s *Supervisor[C, G]) ClearError() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != Running || s.err == nil {
		return
	}
	s.err = nil
	s.changedLocked()
}

// retire releases old's registrations, drains its calls in flight (within grace, or
// until ctx ends) and stops it. It reports whether calls were still in flight when
// the drain gave up (they are then interrupted by the stop).
//
// The drain is exact: every call of old holds its scope's tracking from the moment
// it resolved its registration, so once the scope drains, a call that arrives finds
// old closed and the capture rule sends it to the successor.
func retire(ctx context.Context, old Generation, grace time.Duration) (interrupted bool) {
	old.Release()
	dctx, cancel := context.WithTimeout(ctx, grace)
	interrupted = old.Scope().Drain(dctx) != nil
	cancel()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	_ = old.Scope().Close(stopCtx)
	return interrupted
}

// Restart starts a new generation by hand with the current config: a Failed (or
// Restarting) program comes back with a fresh crash budget, a Running one is
// replaced as by Reload. It returns the new generation's start error, if any (the
// program then keeps its state, and the error is its last error).
func (s *Supervisor[C, G]) Restart(ctx context.Context) error {
	_, err := s.Reload(ctx, s.Config())
	return err
}

func (s *Supervisor[C, G]) settings() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.set
}

// Name returns the program's name.
func (s *Supervisor[C, G]) Name() string { return s.settings().Name }

// Config returns the config the current generation was started with (defaults
// applied). Reload takes a modified copy.
func (s *Supervisor[C, G]) Config() C {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// State returns the program's condition and its last error: why it is not Running,
// or, while Running, why the last Reload (or Restart) failed — the old generation
// keeps serving then, and the error stays until a generation starts.
func (s *Supervisor[C, G]) State() (State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.err
}

// Current returns the generation serving now (possibly stopped, when not Running),
// or G's zero value (nil) when none ever started.
func (s *Supervisor[C, G]) Current() G {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Restarts returns how many times a generation was started again after a crash or
// a failed start (reloads and Restart are not counted).
func (s *Supervisor[C, G]) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Status returns the state, last error, restarts and current generation at once.
func (s *Supervisor[C, G]) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{State: s.state, Err: s.err, Restarts: s.restarts}
	if s.curGen != 0 {
		st.Current = s.cur
	}
	return st
}

// Changed returns a channel closed at the next change of State, Current or
// Restarts, so a caller can follow the program's health without polling. Call it
// again after it is closed.
func (s *Supervisor[C, G]) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Close stops the watch and the current generation: its tools vanish and its
// process is gone when Close returns. Idempotent.
func (s *Supervisor[C, G]) Close(ctx context.Context) error { return s.scope.Close(ctx) }

package plugins

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrStopped is returned by Reload when the supervisor's scope is closing or closed.
var ErrStopped = errors.New("plugins: supervisor stopped")

// Reload reports what one Reload did and how long each phase took.
type Reload struct {
	// From is the generation that was serving before (0 if none was), To the new one.
	From, To uint64
	// OldPID and NewPID are the two generations' process ids (0 when not launched by
	// the host).
	OldPID, NewPID int
	// Start is the time to launch the new generation and run its activation, which
	// registers its tools: from then on it serves.
	Start time.Duration
	// Swap is the time to retire the old generation: drain its calls in flight, then
	// stop it.
	Swap time.Duration
	// Interrupted is set when calls in flight on the old generation outlived the
	// drain and were interrupted by its stop.
	Interrupted bool
}

// Reload replaces the serving generation with a new one started from cfg (usually
// Config() with a rebuilt Path; Name must not change).
//
// It starts generation N+1 in the supervisor's scope and lets it activate, so its
// tools are registered and win over the old ones; only then does it retire
// generation N: N's registrations are released, so a call settled from then on on a
// Request that captured N runs on N+1 when the tool's contract fingerprint is
// unchanged and settles unavailable when it changed (the registry's capture rule);
// the calls already executing on N are given until cfg.StopGrace to finish (the
// drain); then N's scope closes, interrupting what is left, and its process is
// stopped. Reload returns once N's process is gone.
//
// If the new generation fails to start, the old one keeps serving untouched and the
// error (a *StartError with the plugin's stderr) is returned; it is also the
// supervisor's last error (State), while the state stays Running. A successful reload
// resets the crash budget, brings a Failed plugin back, and from then on the new
// generation is the one restarted after a crash. Reloads and crash restarts are
// serialized. Reload fails with ErrStopped once the supervisor is closing.
func (s *Supervisor) Reload(ctx context.Context, cfg Config) (Reload, error) {
	s.op.Lock()
	defer s.op.Unlock()
	var r Reload
	if s.scope.Context().Err() != nil {
		return r, ErrStopped
	}
	cfg = cfg.withDefaults()
	if name := s.Config().Name; cfg.Name != name {
		return r, fmt.Errorf("plugins: reload %q: the config names another plugin, %q", name, cfg.Name)
	}
	old := s.Current()
	if old != nil {
		r.From, r.OldPID = old.generation, old.PID()
	}

	begin := time.Now()
	inst, err := s.startNext(ctx, cfg)
	r.Start = time.Since(begin)
	if err != nil {
		if s.scope.Context().Err() != nil {
			return r, errors.Join(ErrStopped, err)
		}
		// Visible as the last error; the old generation (if any) keeps serving, and
		// the state stays what it was.
		s.mu.Lock()
		s.err = err
		s.changedLocked()
		s.mu.Unlock()
		return r, err
	}
	r.To, r.NewPID = inst.generation, inst.PID()
	s.mu.Lock()
	s.crashes.Reset()
	s.mu.Unlock()
	s.setRunning(inst, cfg)
	cfg.Logger.Info("plugin reloaded", "plugin", cfg.Name, "generation", inst.generation)

	begin = time.Now()
	if old != nil {
		r.Interrupted = s.retire(ctx, old)
	}
	r.Swap = time.Since(begin)
	return r, nil
}

// retire releases old's registrations, drains its executions in flight (within its
// stop grace, or until ctx ends) and stops it. It reports whether executions were
// still in flight when the drain gave up (they are then interrupted by the stop).
//
// The drain is exact: every execution of old holds its scope's tracking from the
// moment it resolved its registration, so once the scope drains, a call that arrives
// finds old closed and the capture rule sends it to the successor.
func (s *Supervisor) retire(ctx context.Context, old *Instance) (interrupted bool) {
	old.releaseAll()
	grace := old.cfg.StopGrace
	dctx, cancel := context.WithTimeout(ctx, grace)
	interrupted = old.scope.Drain(dctx) != nil
	cancel()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	_ = old.Stop(stopCtx)
	return interrupted
}

package plugins

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/toolhost/toolhost/sdk"
)

// ErrStopped is returned by Reload when the supervisor's scope is closing or closed.
var ErrStopped = errors.New("plugins: supervisor stopped")

// drainQuiet is how long a retiring generation must have had no execution in
// flight before its scope closes. It covers a call that captured the retiring
// generation's registration just before the swap and has not reached the plugin yet
// (input validation runs in between).
const drainQuiet = 20 * time.Millisecond

// drainPoll is how often a retiring generation's in-flight count is checked.
const drainPoll = time.Millisecond

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
// error (a *StartError with the plugin's stderr) is returned. A successful reload
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
		return r, err
	}
	r.To, r.NewPID = inst.generation, inst.PID()
	s.mu.Lock()
	s.crashes = nil
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

// callCount counts the executions of one generation of an untrusted plugin from the
// moment they reach the host's authorization (Config.Authorize) until they end, so
// the drain also waits for calls whose permission ask is still waiting for a person,
// which have not reached the plugin (Instance.InFlight) yet.
type callCount struct{ n atomic.Int64 }

// wrap counts each call of authorize until the execution's context ends (the
// registry ends it when the execution returns).
func (c *callCount) wrap(authorize func(context.Context, string, sdk.Invocation) error) func(context.Context, string, sdk.Invocation) error {
	return func(ctx context.Context, tool string, inv sdk.Invocation) error {
		c.n.Add(1)
		context.AfterFunc(ctx, func() { c.n.Add(-1) })
		return authorize(ctx, tool, inv)
	}
}

// busy reports whether old has executions in flight.
func (s *Supervisor) busy(old *Instance) bool {
	s.mu.Lock()
	count := s.authorizing[old]
	s.mu.Unlock()
	return old.InFlight() > 0 || (count != nil && count.n.Load() > 0)
}

// retire releases old's registrations, drains its executions in flight (within
// its stop grace, or until ctx ends) and stops it. It reports whether executions were
// still in flight when the drain gave up.
//
// The drain sees an execution once it reaches the host's authorization (untrusted
// plugins) or the plugin; one that captured old's registration just before the
// release and is still validating its input is covered by drainQuiet only.
func (s *Supervisor) retire(ctx context.Context, old *Instance) (interrupted bool) {
	defer s.forget(old)
	old.releaseAll()
	grace := old.cfg.StopGrace
	deadline := time.Now().Add(grace)
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	var idleSince time.Time
	for {
		now := time.Now()
		if s.busy(old) {
			idleSince = time.Time{}
		} else if idleSince.IsZero() {
			idleSince = now
		}
		if !idleSince.IsZero() && now.Sub(idleSince) >= drainQuiet {
			break
		}
		if now.After(deadline) || ctx.Err() != nil {
			interrupted = s.busy(old)
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		case <-old.Exited():
			// Gone already (crashed while draining): nothing left to wait for.
			idleSince = time.Now().Add(-drainQuiet)
		}
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	_ = old.Stop(stopCtx)
	return interrupted
}

//go:build unix

package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// reload reloads s with its own config changed by edit, tracking the new process.
func (h *host) reload(t *testing.T, s *plugins.Supervisor, edit func(*plugins.Config)) (supervise.Reload, error) {
	t.Helper()
	cfg := s.Config()
	if edit != nil {
		edit(&cfg)
	}
	r, err := s.Reload(t.Context(), cfg)
	if err == nil {
		h.track(s.Current())
	}
	return r, err
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func TestReloadSameContractRunsCapturedCallsOnTheNewGeneration(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	old := s.Current()
	q, _ := h.reg.Prepare(h.loc) // captures generation 1
	r, err := h.reload(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.From != 1 || r.To != 2 || r.OldPID != old.PID() || r.NewPID != s.Current().PID() || r.Interrupted {
		t.Fatalf("reload report %+v", r)
	}
	if !gone(r.OldPID) {
		t.Fatalf("old generation's process %d still exists after the swap", r.OldPID)
	}
	if st, _ := s.State(); st != supervise.Running || s.Current().Generation() != 2 {
		t.Fatalf("state %s, generation %d", st, s.Current().Generation())
	}
	// The Request captured generation 1; the contract is unchanged, so it runs on 2.
	got, err := q.Settle(t.Context(), registry.Call{Name: "whoami"})
	if err != nil || got.Outcome != registry.Completed {
		t.Fatalf("captured call after reload: %+v, %v", got, err)
	}
	var pid int
	if err := json.Unmarshal(got.Structured, &pid); err != nil || hostPIDOf(pid) != r.NewPID {
		t.Fatalf("captured call ran in pid %d (%v), want the new generation's %d", pid, err, r.NewPID)
	}
}

func TestReloadChangedContractSettlesUnavailable(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	// Generation 1's echo is overridden by a runtime batch with another description;
	// generation 2 starts without it, so echo's contract changes with the reload.
	if got := h.mustCall("toggle", `{}`).Text(); got != "registered" {
		t.Fatal(got)
	}
	q, _ := h.reg.Prepare(h.loc)
	if _, err := h.reload(t, s, nil); err != nil {
		t.Fatal(err)
	}
	got, err := q.Settle(t.Context(), registry.Call{Name: "echo", Input: json.RawMessage(`{"text":"x"}`)})
	if err != nil || got.Outcome != registry.Unavailable {
		t.Fatalf("changed contract: %+v, %v; want unavailable", got, err)
	}
	// Unchanged tools of the same Request still run.
	if got, err := q.Settle(t.Context(), registry.Call{Name: "whoami"}); err != nil || got.Outcome != registry.Completed {
		t.Fatalf("unchanged tool: %+v, %v", got, err)
	}
}

func TestReloadFailedStartKeepsTheOldGeneration(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	old := s.Current()
	_, err = h.reload(t, s, func(c *plugins.Config) { c.Options = json.RawMessage(`{"mode":"fail_activate"}`) })
	var serr *plugins.StartError
	if !errors.As(err, &serr) || serr.Plugin != "fault" {
		t.Fatalf("reload error %v, want a *plugins.StartError", err)
	}
	if s.Current() != old || gone(old.PID()) {
		t.Fatal("a failed reload replaced or stopped the serving generation")
	}
	if st, _ := s.State(); st != supervise.Running {
		t.Fatalf("state %s after a failed reload", st)
	}
	if got := h.mustCall("echo", `{"text":"still"}`).Text(); got != "still" {
		t.Fatalf("old generation answered %q", got)
	}
	// The next good reload recovers.
	if _, err := h.reload(t, s, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.mustCall("echo", `{"text":"new"}`).Text(); got != "new" || !gone(old.PID()) {
		t.Fatalf("after the good reload: %q, old process gone: %v", got, gone(old.PID()))
	}
	if g := s.Current().Generation(); g != old.Generation()+1 {
		t.Fatalf("the good reload is generation %d, want %d: a failed start used up a number", g, old.Generation()+1)
	}
}

func TestCrashAfterReloadRestartsTheNewGeneration(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{Crashes: 1, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.reload(t, s, nil); err != nil {
		t.Fatal(err)
	}
	reloaded := s.Current()
	if _, err := h.call(context.Background(), "crash", `{}`); err == nil {
		t.Fatal("crash settled")
	}
	proctest.Until(t, func() bool { st, _ := s.State(); return s.Current() != reloaded && st == supervise.Running })
	h.track(s.Current())
	if g := s.Current().Generation(); g != reloaded.Generation()+1 {
		t.Fatalf("restarted as generation %d, want %d", g, reloaded.Generation()+1)
	}
	if got := h.mustCall("echo", `{"text":"up"}`).Text(); got != "up" {
		t.Fatalf("restarted generation answered %q", got)
	}
}

func TestReloadRevivesAFailedPlugin(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{Crashes: 1, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cur := s.Current()
		h.call(context.Background(), "crash", `{}`)
		proctest.Until(t, func() bool { st, _ := s.State(); return s.Current() != cur || st == supervise.Failed })
		h.track(s.Current())
	}
	proctest.Until(t, func() bool { st, _ := s.State(); return st == supervise.Failed })
	if _, err := h.reload(t, s, nil); err != nil {
		t.Fatal(err)
	}
	if st, err := s.State(); st != supervise.Running {
		t.Fatalf("state %s (%v) after reloading a failed plugin", st, err)
	}
	if got := h.mustCall("echo", `{"text":"alive"}`).Text(); got != "alive" {
		t.Fatalf("revived plugin answered %q", got)
	}
	// And the watch follows it: a crash restarts it again (the budget was reset).
	cur := s.Current()
	h.call(context.Background(), "crash", `{}`)
	proctest.Until(t, func() bool { st, _ := s.State(); return s.Current() != cur && st == supervise.Running })
	h.track(s.Current())
}

func TestReloadInterruptsCallsThatOutliveTheDrain(t *testing.T) {
	h := newHost(t)
	mark := filepath.Join(t.TempDir(), "mark")
	cfg := h.config(map[string]string{"FAULT_MARK": mark}, "")
	cfg.StopGrace = 300 * time.Millisecond
	s, err := h.supervise(cfg, supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := h.call(context.Background(), "wait", `{}`)
		errc <- err
	}()
	proctest.Until(t, func() bool { _, err := os.Stat(mark + ".started"); return err == nil })
	r, err := h.reload(t, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Interrupted || r.Swap < cfg.StopGrace {
		t.Fatalf("reload %+v: want the call drained for the grace, then interrupted", r)
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("call outliving the drain ended with %v, want an interruption", err)
	}
	if !gone(r.OldPID) {
		t.Fatal("old generation survived")
	}
}

func TestReloadAfterCloseFails(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reload(t.Context(), s.Config()); !errors.Is(err, supervise.ErrStopped) {
		t.Fatalf("reload after close: %v, want ErrStopped", err)
	}
}

func TestReloadDrainsCallsWaitingForAuthorization(t *testing.T) {
	h := newHost(t)
	asked := make(chan struct{}, 1)
	answer := make(chan error)
	cfg := h.config(nil, "")
	cfg.StopGrace = 10 * time.Second
	cfg.Authorize = func(ctx context.Context, tool string, _ sdk.Invocation) error {
		if tool != "whoami" {
			return nil
		}
		asked <- struct{}{}
		select { // a person thinking it over
		case err := <-answer:
			return err
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	s, err := h.supervise(cfg, supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	old := s.Current().PID()
	oldReported := reportedPID(old) // as the plugin reports it, while it runs
	type res struct {
		s   *registry.Settlement
		err error
	}
	done := make(chan res, 1)
	go func() {
		s, err := h.call(context.Background(), "whoami", `{}`)
		done <- res{s, err}
	}()
	<-asked
	reloaded := make(chan supervise.Reload, 1)
	go func() {
		r, err := h.reload(t, s, nil)
		if err != nil {
			t.Error(err)
		}
		reloaded <- r
	}()
	// The reload's drain waits for the call that is waiting for its answer.
	proctest.Until(t, func() bool { return s.Current().PID() != old })
	select {
	case r := <-reloaded:
		t.Fatalf("reload finished while a call waited for authorization: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	answer <- nil
	got := <-done
	var pid int
	if got.err != nil || json.Unmarshal(got.s.Structured, &pid) != nil || pid != oldReported {
		t.Fatalf("authorized call: %+v, %v; want it run by the old generation %d", got.s, got.err, old)
	}
	if r := <-reloaded; r.Interrupted || !gone(old) {
		t.Fatalf("reload %+v; old process gone: %v", r, gone(old))
	}
}

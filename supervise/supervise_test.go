package supervise_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/supervise"
)

// fixture is testdata/fixture: the same tools served as a plugin or an MCP server.
var fixture string

func TestMain(m *testing.M) {
	hosttest.Main(m, map[string]*string{"./testdata/fixture": &fixture})
}

// supervisor is what the tests use of a supervisor, whatever it supervises.
type supervisor interface {
	Status() supervise.Status
	State() (supervise.State, error)
	Changed() <-chan struct{}
	Restart(context.Context) error
	Close(context.Context) error
}

// kind is one kind of supervised program, running the fixture.
type kind struct {
	name string
	// start supervises the fixture with budget; stop is its stop grace.
	start func(h *host, budget supervise.Budget, stop time.Duration) (supervisor, error)
	// tool returns the registered name of the fixture's tool.
	tool func(string) string
	// reloadBroken reloads s with a config whose start fails.
	reloadBroken func(ctx context.Context, s supervisor) error
	// replace replaces s's generation (Supervisor.Replace) with its current config
	// edited by edit: a config whose start fails, or errNext to make next fail.
	replace func(ctx context.Context, s supervisor, edit replaceEdit, commit func()) error
}

// replaceEdit is what a test's next does to the current config in Replace.
type replaceEdit int

const (
	keepConfig replaceEdit = iota
	brokenConfig
	failNext
)

var errNext = errors.New("the next config cannot be made")

var kinds = []kind{
	{
		name: "Plugin",
		start: func(h *host, budget supervise.Budget, stop time.Duration) (supervisor, error) {
			cfg := plugins.Config{Name: "fixture", Path: fixture, Args: []string{"plugin"}, StartTimeout: 10 * time.Second, StopGrace: stop}
			s, err := plugins.Supervise(h.t.Context(), h.root, cfg, plugins.Target{Registry: h.reg, Location: h.loc, Directory: h.loc}, budget)
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		tool: func(name string) string { return name },
		reloadBroken: func(ctx context.Context, s supervisor) error {
			p := s.(*plugins.Supervisor)
			cfg := p.Config()
			cfg.Path = filepath.Join(filepath.Dir(fixture), "missing")
			_, err := p.Reload(ctx, cfg)
			return err
		},
		replace: func(ctx context.Context, s supervisor, edit replaceEdit, commit func()) error {
			_, err := s.(*plugins.Supervisor).Replace(ctx, func(_ context.Context, cfg plugins.Config) (plugins.Config, error) {
				switch edit {
				case brokenConfig:
					cfg.Path = filepath.Join(filepath.Dir(fixture), "missing")
				case failNext:
					return cfg, errNext
				}
				return cfg, nil
			}, commit)
			return err
		},
	},
	{
		name: "MCPServer",
		start: func(h *host, budget supervise.Budget, stop time.Duration) (supervisor, error) {
			cfg := mcp.Config{Name: "fixture", Command: fixture, Args: []string{"mcp"}, StartTimeout: 10 * time.Second, StopGrace: stop, Budget: budget}
			s, err := mcp.Supervise(h.t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc})
			if err != nil {
				return nil, err
			}
			return s, nil
		},
		tool: func(name string) string {
			n, err := mcp.ToolName("fixture", name)
			if err != nil {
				panic(err)
			}
			return n
		},
		reloadBroken: func(ctx context.Context, s supervisor) error {
			m := s.(*mcp.Supervisor)
			cfg := m.Config()
			cfg.Command = filepath.Join(filepath.Dir(fixture), "missing")
			_, err := m.Reload(ctx, cfg)
			return err
		},
		replace: func(ctx context.Context, s supervisor, edit replaceEdit, commit func()) error {
			_, err := s.(*mcp.Supervisor).Replace(ctx, func(_ context.Context, cfg mcp.Config) (mcp.Config, error) {
				switch edit {
				case brokenConfig:
					cfg.Command = filepath.Join(filepath.Dir(fixture), "missing")
				case failNext:
					return cfg, errNext
				}
				return cfg, nil
			}, commit)
			return err
		},
	},
}

// TestSupervisor runs every behaviour of the supervisor for every kind of program.
func TestSupervisor(t *testing.T) {
	behaviours := []struct {
		name string
		test func(t *testing.T, h *host, k kind)
	}{
		{"CrashRestartsWhileTheToolsAreHeld", crashRestartsWhileTheToolsAreHeld},
		{"SpentBudgetFailsUntilRestarted", spentBudgetFailsUntilRestarted},
		{"RestartDrainsCallsInFlight", restartDrainsCallsInFlight},
		{"FailedReloadKeepsTheServingGeneration", failedReloadKeepsTheServingGeneration},
		{"ReplaceCommitsOnlyWhatServes", replaceCommitsOnlyWhatServes},
		{"CloseStops", closeStops},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			for _, b := range behaviours {
				t.Run(b.name, func(t *testing.T) { b.test(t, newHost(t), k) })
			}
		})
	}
}

func crashRestartsWhileTheToolsAreHeld(t *testing.T, h *host, k kind) {
	// The backoff leaves the program down long enough to call it while it is.
	s := h.start(k, supervise.Budget{Crashes: 2, MinBackoff: 2 * time.Second}, time.Second)
	first := s.Status().Current
	token := h.text(k.tool("id"))
	stale := h.prepare() // captured before the crash

	if _, err := h.call(h.prepare(), k.tool("crash")); err == nil {
		t.Fatal("the call that crashed the program succeeded")
	}
	waitStatus(t, s, func(st supervise.Status) bool { return st.State == supervise.Restarting })
	<-first.Scope().Done() // closed with the crash as its cause
	var crash *supervise.CrashError
	if err := context.Cause(first.Scope().Context()); !errors.As(err, &crash) || !strings.Contains(crash.Status, "exit status 7") || crash.Generation != first.Generation() {
		t.Errorf("the crashed generation's scope ended with %v, want its *supervise.CrashError with exit status 7", err)
	}
	if _, err := s.State(); err == nil || !strings.Contains(err.Error(), "exit status 7") {
		t.Errorf("restarting state's error %v, want the crash", err)
	}
	// Held: the tools stay advertised, and a call waits for the next generation.
	if !h.names()[k.tool("id")] {
		t.Error("the tools are not advertised while the program restarts")
	}
	if got := h.text(k.tool("id")); got == token || got == "" {
		t.Errorf("a call during the restart answered %q (the crashed generation's %q)", got, token)
	}
	// The call ran as soon as the new generation registered its tools, which an MCP
	// server does before its start completes: wait for the supervisor's report.
	waitStatus(t, s, func(st supervise.Status) bool { return st.State != supervise.Restarting })
	st := s.Status()
	if st.State != supervise.Running || st.Current.Generation() != first.Generation()+1 || st.Restarts != 1 {
		t.Fatalf("after the restart: %s, generation %d, %d restarts; want running generation %d after 1 restart",
			st.State, st.Current.Generation(), st.Restarts, first.Generation()+1)
	}
	// A Request prepared before the crash runs on the new generation: same contract.
	if got, err := h.call(stale, k.tool("id")); err != nil || got.Text() == token {
		t.Errorf("stale Request: %v, %v; want it served by the new generation", got, err)
	}
}

func spentBudgetFailsUntilRestarted(t *testing.T, h *host, k kind) {
	s := h.start(k, supervise.Budget{Crashes: 1, MinBackoff: time.Millisecond}, time.Second)
	for range 2 {
		cur := s.Status().Current
		_, _ = h.call(h.prepare(), k.tool("crash"))
		waitStatus(t, s, func(st supervise.Status) bool {
			return st.State == supervise.Failed || st.State == supervise.Running && st.Current != cur
		})
	}
	st := s.Status()
	if st.State != supervise.Failed || st.Err == nil || !strings.Contains(st.Err.Error(), "not restarting after 2 crashes") {
		t.Fatalf("after two crashes on a budget of one: %s, %v", st.State, st.Err)
	}
	if h.names()[k.tool("id")] {
		t.Error("a failed program's tools are still advertised")
	}
	if got, err := h.call(h.prepare(), k.tool("id")); err != nil || got.Outcome != registry.Unknown {
		t.Errorf("calling a failed program: %v, %v; want an unknown tool", got, err)
	}

	// By hand, with a fresh budget: the next generation, numbered on.
	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	st = s.Status()
	if st.State != supervise.Running || st.Err != nil || st.Current.Generation() != 3 {
		t.Fatalf("after Restart: %s (%v), generation %d; want running generation 3", st.State, st.Err, st.Current.Generation())
	}
	if h.text(k.tool("id")) == "" {
		t.Error("the restarted program does not answer")
	}
}

func restartDrainsCallsInFlight(t *testing.T, h *host, k kind) {
	s := h.start(k, supervise.Budget{}, 30*time.Second)
	old := s.Status().Current
	token := h.text(k.tool("id"))
	captured := h.prepare()

	type result struct {
		s   *registry.Settlement
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Long enough to outlast the next generation's start.
		got, err := h.call(h.prepare(), k.tool("sleep"), `{"ms":2000}`)
		done <- result{got, err}
	}()
	proctest.Until(t, func() bool { return old.(interface{ InFlight() int }).InFlight() == 1 })
	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.s.Outcome != registry.Completed || r.s.Text() != token {
			t.Errorf("the call in flight: %v, %v; want it completed by the old generation (%s)", r.s, r.err, token)
		}
	default:
		t.Error("Restart returned before the old generation's call in flight finished")
	}
	select {
	case <-old.Done():
	default:
		t.Error("the old generation's process is still running after Restart")
	}
	st := s.Status()
	if st.State != supervise.Running || st.Current.Generation() != old.Generation()+1 || st.Restarts != 0 {
		t.Errorf("after Restart: %s, generation %d, %d restarts", st.State, st.Current.Generation(), st.Restarts)
	}
	// A Request captured before runs on the new generation: the contract is unchanged.
	if got, err := h.call(captured, k.tool("id")); err != nil || got.Outcome != registry.Completed || got.Text() == token {
		t.Errorf("captured Request after Restart: %v, %v; want the new generation's answer", got, err)
	}
}

func failedReloadKeepsTheServingGeneration(t *testing.T, h *host, k kind) {
	s := h.start(k, supervise.Budget{}, time.Second)
	old := s.Status().Current
	token := h.text(k.tool("id"))
	err := k.reloadBroken(t.Context(), s)
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("reload with a missing program: %v, want its start error", err)
	}
	st := s.Status()
	if st.State != supervise.Running || !errors.Is(st.Err, err) || st.Current != old {
		t.Fatalf("after a failed reload: %s, %v, generation %d; want generation %d running with the error",
			st.State, st.Err, st.Current.Generation(), old.Generation())
	}
	if got := h.text(k.tool("id")); got != token {
		t.Errorf("the serving generation answered %q, want %q", got, token)
	}
	if err := s.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	if g := s.Status().Current.Generation(); g != old.Generation()+1 {
		t.Errorf("the good restart is generation %d, want %d: a failed start used up a number", g, old.Generation()+1)
	}
}

// replaceCommitsOnlyWhatServes: Replace calls commit once the new generation has
// registered and before it becomes current, and never when next or the start
// fails; those errors are the last error, which ClearError forgets.
func replaceCommitsOnlyWhatServes(t *testing.T, h *host, k kind) {
	s := h.start(k, supervise.Budget{}, time.Second)
	old := s.Status().Current
	commits := 0
	commit := func() {
		commits++
		if cur := s.Status().Current; cur != old {
			t.Errorf("commit ran with generation %d current, want the old %d still current", cur.Generation(), old.Generation())
		}
	}
	for _, tt := range []struct {
		edit    replaceEdit
		wantErr string
	}{{failNext, errNext.Error()}, {brokenConfig, "missing"}} {
		err := k.replace(t.Context(), s, tt.edit, commit)
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Fatalf("a replace that cannot serve: %v, want an error naming %q", err, tt.wantErr)
		}
		st := s.Status()
		if commits != 0 || st.State != supervise.Running || !errors.Is(st.Err, err) || st.Current != old {
			t.Errorf("after a failed replace: %d commits, %s, %v, generation %d; want no commit and generation %d running with the error",
				commits, st.State, st.Err, st.Current.Generation(), old.Generation())
		}
	}
	s.(interface{ ClearError() }).ClearError()
	if st := s.Status(); st.State != supervise.Running || st.Err != nil {
		t.Errorf("after ClearError: %s, %v; want running without an error", st.State, st.Err)
	}
	if err := k.replace(t.Context(), s, keepConfig, commit); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); commits != 1 || st.Current.Generation() != old.Generation()+1 || st.Err != nil {
		t.Errorf("after a replace that serves: %d commits, generation %d, %v; want 1 commit and generation %d", commits, st.Current.Generation(), st.Err, old.Generation()+1)
	}
}

func closeStops(t *testing.T, h *host, k kind) {
	s := h.start(k, supervise.Budget{}, time.Second)
	cur := s.Status().Current
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, s, func(st supervise.Status) bool { return st.State == supervise.Stopped })
	<-cur.Done()
	if len(h.names()) != 0 {
		t.Errorf("tools left after Close: %v", h.names())
	}
	if err := s.Restart(t.Context()); !errors.Is(err, supervise.ErrStopped) {
		t.Errorf("Restart after Close: %v, want ErrStopped", err)
	}
}

// host is one registry and Location placement with a root scope, closed at the end
// of the test, which then checks that no fixture process is left.
type host struct {
	t    *testing.T
	reg  *registry.Registry
	root *scope.Scope
	loc  string
}

func newHost(t *testing.T) *host {
	t.Helper()
	t.Cleanup(func() { proctest.AssertMarkedGone(t, fixture) }) // after the host's own cleanups
	hh := hosttest.NewHost(t, registry.Options{})
	return &host{t: t, reg: hh.Registry, root: hh.Root, loc: hh.Location}
}

func (h *host) start(k kind, budget supervise.Budget, stop time.Duration) supervisor {
	h.t.Helper()
	s, err := k.start(h, budget, stop)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *host) prepare() *registry.Request {
	h.t.Helper()
	q, err := h.reg.Prepare(h.loc)
	if err != nil {
		h.t.Fatal(err)
	}
	return q
}

// call settles one call of tool on q; input is "{}" unless given.
func (h *host) call(q *registry.Request, tool string, input ...string) (*registry.Settlement, error) {
	in := "{}"
	if len(input) > 0 {
		in = input[0]
	}
	return q.Settle(h.t.Context(), registry.Call{Name: tool, Input: []byte(in)})
}

// text settles a call of tool that must complete and returns its text.
func (h *host) text(tool string) string {
	h.t.Helper()
	got, err := h.call(h.prepare(), tool)
	if err != nil || got.Outcome != registry.Completed {
		h.t.Fatalf("%s: %v, %v", tool, got, err)
	}
	return got.Text()
}

// names returns the names advertised now.
func (h *host) names() map[string]bool {
	out := map[string]bool{}
	for _, d := range h.prepare().Definitions() {
		out[d.Name] = true
	}
	return out
}

// waitStatus waits, following Changed, until cond holds for s's status.
func waitStatus(t *testing.T, s supervisor, cond func(supervise.Status) bool) {
	t.Helper()
	for {
		changed := s.Changed()
		if cond(s.Status()) {
			return
		}
		select {
		case <-changed:
		case <-t.Context().Done():
			t.Fatalf("status %+v", s.Status())
		}
	}
}

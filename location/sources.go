package location

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/manifest"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// The kinds of source a Location has.
const (
	KindBuiltin  = "builtin"
	KindPlugin   = "plugin"
	KindMCP      = "mcp"
	KindManifest = "manifest"
)

// SourceStatus is the health of one source of a Location.
type SourceStatus struct {
	// Kind is KindBuiltin, KindPlugin, KindMCP or KindManifest; Name is the source's
	// name in the config ("" for the built-ins). ID is "kind:name" ("builtin" alone),
	// as permission rules name sources and as RestartSource takes them.
	Kind, Name, ID string
	// State is the source's condition. Starting: its first generation (or one asked
	// for with RestartSource) is starting. Running: it serves; Err may still be set,
	// by a reload or restart by hand that failed while the serving generation went
	// on. Restarting: it crashed or failed to start and is retried under its restart
	// budget; its tools stay advertised and calls wait for the next generation.
	// Failed: it cannot serve (its budget is spent, its build failed, or its command
	// cannot run); its tools are not advertised, and RestartSource tries again.
	// Stopped: the Location is closing.
	State supervise.State
	// Generation counts the source's generations that started (0: none yet). PID is
	// the current generation's process (0: none, or not a process of its own).
	Generation uint64
	PID        int
	// Containment is how the source's process tree is held together
	// ("namespace", "cgroup", "subreaper", "none"; "" without a process of its own);
	// Confined reports whether Landlock confines it.
	Containment string
	Confined    bool
	// Layers names what holds its process (see sandbox.Box.Layers).
	Layers []string
	// Restarts counts the generations started again after a crash or failed start.
	Restarts int
	// Err is the last error: why the source is not running, or the last failed
	// reload or restart by hand while it kept running (a config edit that could not
	// replace it says that the edit is not applied). nil when none.
	Err error
	// Stderr is the tail of what the current (or last failed) generation wrote to
	// stderr, or a failed build's compiler output.
	Stderr string
}

// Errors of RestartSource.
var (
	// ErrUnknownSource: no source has the name.
	ErrUnknownSource = errors.New("location: no such source")
	// ErrAmbiguousSource: several sources have the bare name; give "kind:name".
	ErrAmbiguousSource = errors.New("location: the name is ambiguous: say which source, as kind:name")
	// ErrNotRestartable: the built-ins run in the host and cannot be restarted.
	ErrNotRestartable = errors.New("location: the built-ins cannot be restarted")
)

// source is one configured source and what is known of its health.
type source struct {
	kind, name string

	mu     sync.Mutex
	sup    supervised      // a plugin that got as far as starting, or an MCP server
	state  supervise.State // static sources (built-ins, manifest tools, unbuilt plugins)
	err    error
	stderr string

	pc   *PluginConfig
	mc   *MCPServerConfig
	tool *manifest.Tool
	sc   *scope.Scope // the child scope a plugin, MCP server or manifest tool runs in
	op   sync.Mutex   // serializes RestartSource and replacing the source

	// The config above is the one that serves (committed once its generation
	// serves). tried is set when a reload's changed config for the source failed to
	// replace it: its error is the source's last error (its supervisor's, or err).
	tried bool
	// release unregisters a manifest tool's registration (nil while it has none).
	release func()
}

// commit records, under s.mu, that the config set has just started serving.
func (s *source) commit(set func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set()
	s.tried = false
}

// setTried records that a reload's changed config for s failed to replace it.
func (s *source) setTried() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tried = true
}

// forgetTried clears the error of a failed replace once the config is edited back
// to the serving one: no change is pending any more.
func (s *source) forgetTried() {
	s.mu.Lock()
	tried, sup := s.tried, s.sup
	s.tried = false
	if tried && sup == nil {
		s.err = nil
	}
	s.mu.Unlock()
	if tried && sup != nil {
		sup.ClearError()
	}
}

// serving reports whether a manifest tool's source has its tool registered.
func (s *source) serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == supervise.Running && s.release != nil
}

// fail marks the source Failed with err.
func (s *source) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state, s.err = supervise.Failed, err
}

// supervised is what a Location needs of a supervisor, whatever it supervises
// (*plugins.Supervisor, *mcp.Supervisor).
type supervised interface {
	Status() supervise.Status
	Changed() <-chan struct{}
	Restart(context.Context) error
	ClearError()
}

func (s *source) id() string {
	if s.name == "" {
		return s.kind
	}
	return s.kind + ":" + s.name
}

// supervisor returns the source's supervisor, or nil when it has none.
func (s *source) supervisor() supervised {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sup
}

func (s *source) status() SourceStatus {
	s.mu.Lock()
	sup := s.sup
	st := SourceStatus{Kind: s.kind, Name: s.name, ID: s.id(), State: s.state, Err: s.err, Stderr: s.stderr}
	tried := s.tried
	s.mu.Unlock()
	if sup != nil {
		sst := sup.Status()
		st.State, st.Err, st.Restarts = sst.State, sst.Err, sst.Restarts
		if g := sst.Current; g != nil {
			st.Generation, st.PID, st.Stderr = g.Generation(), g.PID(), g.Stderr()
			if c, ok := g.(interface {
				Containment() (sandbox.Mode, bool)
			}); ok {
				mode, confined := c.Containment()
				st.Containment, st.Confined = string(mode), confined
			}
			if l, ok := g.(interface{ Layers() []string }); ok {
				st.Layers = l.Layers()
			}
		}
	}
	if tried && st.State == supervise.Running && st.Err != nil {
		st.Err = fmt.Errorf("location: %s: the edited config is not applied, the running one serves on (save it again to retry): %w", st.ID, st.Err)
	}
	// A start that failed says why on its stderr; prefer that to a live tail.
	var pse *plugins.StartError
	var mse *mcp.StartError
	var be *BuildError
	switch {
	case errors.As(st.Err, &pse):
		st.Stderr = pse.Stderr
	case errors.As(st.Err, &mse):
		st.Stderr = mse.Stderr
	case errors.As(st.Err, &be):
		st.Stderr = be.Output
	}
	return st
}

func (s *source) changed() <-chan struct{} {
	if sup := s.supervisor(); sup != nil {
		return sup.Changed()
	}
	return nil
}

// Sources returns the health of every source of the Location: the built-ins, then
// the plugins, MCP servers and manifest tools in config order (manifest tool files
// after the config's tools). Safe for concurrent use.
func (l *Location) Sources() []SourceStatus {
	srcs := l.sourceList()
	out := make([]SourceStatus, 0, len(srcs))
	for _, s := range srcs {
		st := s.status()
		if l.scope.Context().Err() != nil {
			st.State = supervise.Stopped
		}
		out = append(out, st)
	}
	if err := l.ConfigErr(); err != nil && l.scope.Context().Err() == nil {
		out = append(out, SourceStatus{Kind: KindConfig, ID: KindConfig, State: supervise.Failed, Err: err})
	}
	return out
}

// SourcesChanged returns a channel closed at the next change of any source's
// status (state, generation, restarts, last error). Call Sources then, and
// SourcesChanged again for the next change. It is closed when the Location closes.
func (l *Location) SourcesChanged() <-chan struct{} {
	l.changedMu.Lock()
	defer l.changedMu.Unlock()
	return l.changedCh
}

func (l *Location) bump() {
	l.changedMu.Lock()
	defer l.changedMu.Unlock()
	close(l.changedCh)
	l.changedCh = make(chan struct{})
}

// follow forwards the changes of s's supervisor to SourcesChanged until the
// Location closes.
func (l *Location) follow(s *source) {
	_ = l.scope.Go(func(ctx context.Context) {
		for {
			ch := s.changed()
			if ch == nil {
				return
			}
			select {
			case <-ctx.Done():
				l.bump()
				return
			case <-ch:
				l.bump()
			}
		}
	})
}

// lookup finds a source by ID ("plugin:text") or by bare name when only one source
// has it.
func (l *Location) lookup(name string) (*source, error) {
	var found []*source
	for _, s := range l.sourceList() {
		if s.id() == name {
			return s, nil
		}
		if s.name == name {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("%w: %q in %s", ErrUnknownSource, name, l.id)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("%w: %q in %s", ErrAmbiguousSource, name, l.id)
}

// RestartSource restarts one source by name ("kind:name", or the bare name when it
// is unambiguous) without touching the rest of the Location, and with a fresh
// restart budget, with the config it serves with (not an edit a reload could not
// apply: Reload retries that): a plugin given as Go source is built again first, a plugin or MCP
// server starts a new generation (a running one is replaced once the new one has
// registered, so calls in flight on it finish, within its stop grace), and a manifest
// tool's command is checked again and, if it can run now, its tool registered. The
// built-ins cannot be restarted. It returns once the new generation serves, or with
// the error that kept it from serving (also the source's last error). It fails with
// ErrUnknownSource for an unknown name and with ErrClosing once the Location closes.
// Safe for concurrent use; restarts of one source are serialized.
func (l *Location) RestartSource(ctx context.Context, name string) error {
	s, err := l.lookup(name)
	if err != nil {
		return err
	}
	if l.scope.Context().Err() != nil {
		return fmt.Errorf("%w: %s", ErrClosing, l.id)
	}
	s.op.Lock()
	defer s.op.Unlock()
	defer l.bump()
	switch s.kind {
	case KindPlugin:
		return l.restartPlugin(ctx, s)
	case KindMCP:
		sup := s.supervisor()
		if sup == nil { // its entry cannot run as configured, or it is still starting
			s.mu.Lock()
			err := s.err
			s.mu.Unlock()
			if err == nil {
				err = fmt.Errorf("location: %s is still starting", s.id())
			}
			return err
		}
		return sup.Restart(ctx)
	case KindManifest:
		return l.restartManifest(ctx, s)
	}
	return ErrNotRestartable
}

func (l *Location) restartPlugin(ctx context.Context, s *source) error {
	s.mu.Lock()
	sup, _ := s.sup.(*plugins.Supervisor)
	state := s.state
	s.mu.Unlock()
	if sup == nil && state == supervise.Starting { // Options.StartInBackground
		return fmt.Errorf("location: %s is still starting", s.id())
	}
	if sup == nil { // its build failed: build and start it now
		psc, err := l.scope.Child()
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.state, s.err = supervise.Starting, nil
		s.mu.Unlock()
		sup, err := l.startPlugin(ctx, psc, *s.pc, l.Config().WorkspaceID)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			_ = psc.Close(context.WithoutCancel(ctx))
			s.state, s.err = supervise.Failed, err
			var be *BuildError
			if errors.As(err, &be) {
				s.stderr = be.Output
			}
			return err
		}
		s.sup, s.sc = sup, psc
		l.follow(s)
		_, err = sup.State()
		return err
	}
	cfg := sup.Config()
	if (s.pc.Source != "" || s.pc.Module != "") && cfg.Reattach == nil {
		path, err := l.build(ctx, *s.pc)
		if err != nil {
			return err
		}
		cfg.Path = path
	}
	_, err := sup.Reload(ctx, cfg)
	return err
}

func (l *Location) restartManifest(ctx context.Context, s *source) error {
	s.mu.Lock()
	state := s.state
	s.mu.Unlock()
	if state == supervise.Running {
		return nil // nothing runs between calls: a manifest tool has nothing to restart
	}
	if err := manifest.Check(*s.tool); err != nil {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	sc := s.sc
	s.mu.Unlock()
	release, warnings := manifest.Register(l.reg, l.id, sc, []manifest.Tool{*s.tool}, l.manifestAuthorizer(), l.logger)
	if len(warnings) > 0 {
		err := errors.Join(warnings...)
		release()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		return err
	}
	if err := sc.Defer(ctx, func(context.Context) error { release(); return nil }); err != nil {
		return err
	}
	s.mu.Lock()
	s.state, s.err, s.stderr, s.release = supervise.Running, nil, "", release
	s.mu.Unlock()
	return nil
}

func (l *Location) manifestAuthorizer() func(context.Context, string, sdk.Invocation) error {
	return func(ctx context.Context, tool string, inv sdk.Invocation) error {
		return l.perm.AssertToolFrom(ctx, "manifest:"+tool, tool, inv)
	}
}

// registerManifestTools checks and registers the config's manifest tools and those
// of .toolhost/tools/*.json, each in a child scope of the Location scope. A tool
// whose command cannot run is a Failed source, never advertised; a tool that cannot
// be registered is Failed too, with why. The others register and run.
func (l *Location) registerManifestTools(ctx context.Context, logger hclog.Logger) error {
	for _, t := range l.manifestTools(l.cfg) {
		s := l.newManifestSource(t)
		if slices.ContainsFunc(l.sourceList(), func(o *source) bool { return o.id() == s.id() }) {
			continue // a config tool wins over a file's of the same name
		}
		if err := l.startManifestSource(ctx, s); err != nil {
			return err
		}
		l.addSources(s)
	}
	return nil
}

// manifestTools lists the manifest tools of cfg and of .toolhost/tools/*.json, a
// config tool before a file's of the same name. A file that cannot be read is
// logged and skipped.
func (l *Location) manifestTools(cfg *Config) []manifest.Tool {
	tools := make([]manifest.Tool, 0, len(cfg.Tools))
	for _, t := range cfg.Tools {
		tools = append(tools, manifest.Tool{
			Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
			Command: t.Command, Dir: t.Dir, Env: t.Env, Timeout: t.Timeout, MaxOutputBytes: t.MaxOutputBytes,
			Overrides: t.Overrides,
			Sandbox:   sandboxSpec(t.Name, t.Sandbox, t.RequireSandbox, false, l.opts.SandboxMode),
		})
	}
	loaded, problems := manifest.Load(l.id)
	for _, p := range problems {
		l.logger.Warn("skipping a manifest tool file", "location", l.id, "error", p)
	}
	for _, t := range loaded {
		t.Sandbox.Mode = l.opts.SandboxMode
		tools = append(tools, t)
	}
	return tools
}

func (l *Location) newManifestSource(t manifest.Tool) *source {
	name, err := registry.NormalizeName(t.Name)
	if err != nil {
		name = t.Name
	}
	return &source{kind: KindManifest, name: name, tool: &t, state: supervise.Running}
}

// startManifestSource checks and registers the manifest tool of s in a child
// scope of the Location scope, kept in s. It returns an error only when the
// Location is closing.
func (l *Location) startManifestSource(ctx context.Context, s *source) error {
	tsc, err := l.scope.Child()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sc = tsc
	if err := manifest.Check(*s.tool); err != nil {
		s.state, s.err = supervise.Failed, err
		l.logger.Warn("manifest tool not advertised: its command cannot run", "location", l.id, "error", err)
		return nil
	}
	release, warnings := manifest.Register(l.reg, l.id, tsc, []manifest.Tool{*s.tool}, l.manifestAuthorizer(), l.logger)
	if len(warnings) > 0 {
		s.state, s.err = supervise.Failed, errors.Join(warnings...)
	} else {
		s.release = release
	}
	return tsc.Defer(ctx, func(context.Context) error { release(); return nil })
}

// startPlugin builds (when given as Go source) and supervises one plugin in sc,
// activated with workspaceID. A plugin that does not start is kept and retried
// (plugins.Keep); a failed build is returned (a *BuildError).
func (l *Location) startPlugin(ctx context.Context, sc *scope.Scope, pc PluginConfig, workspaceID string) (*plugins.Supervisor, error) {
	cfg := l.pluginConfig(pc, workspaceID)
	if r, ok := l.reattach[pc.Name]; ok {
		cfg.Reattach = &plugins.Reattach{Pid: r.Pid, Network: r.Network, Address: r.Address}
		l.logger.Info("attaching to a plugin started by hand: not contained or confined by the host", "plugin", pc.Name, "pid", r.Pid, "address", r.Address)
	} else if pc.Source != "" || pc.Module != "" {
		path, err := l.build(ctx, pc)
		if err != nil {
			return nil, err
		}
		cfg.Path = path
	}
	target := plugins.Target{Registry: l.reg, Location: l.id, Directory: l.id}
	sup, err := plugins.Keep(ctx, sc, cfg, target, supervise.Budget{})
	if err != nil {
		err = fmt.Errorf("location: plugin %q: %w", pc.Name, err)
	}
	return sup, err
}

// build builds a plugin given as Go source, or as a Go module at its locked version,
// into the Location's build cache.
func (l *Location) build(ctx context.Context, pc PluginConfig) (string, error) {
	if pc.Module != "" {
		locked := l.lockedModules()[pc.Name]
		path, built, err := BuildModule(ctx, l.env, l.cacheDir, pc.Name, locked)
		if err == nil && built {
			l.logger.Info("built plugin", "plugin", pc.Name, "module", pc.Module, "version", locked.Version, "binary", path)
		}
		return path, err
	}
	path, built, err := BuildPlugin(ctx, l.cacheDir, pc.Name, pc.Source)
	for try := 1; errors.Is(err, ErrSourcesChanged) && try < 3; try++ {
		path, built, err = BuildPlugin(ctx, l.cacheDir, pc.Name, pc.Source) // being edited: build what is there now
	}
	if err == nil && built {
		l.logger.Info("built plugin", "plugin", pc.Name, "source", pc.Source, "binary", path)
	}
	return path, err
}

// describe summarizes the sources that do not serve, one line each, for logs.
func describe(sts []SourceStatus) string {
	var b strings.Builder
	for _, st := range sts {
		if st.State == supervise.Running {
			continue
		}
		fmt.Fprintf(&b, "\n  %s: %s: %v", st.ID, st.State, st.Err)
	}
	return b.String()
}

// Done returns a channel closed once the Location's Close has begun.
func (l *Location) Done() <-chan struct{} { return l.scope.Context().Done() }

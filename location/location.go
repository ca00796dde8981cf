package location

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/pluginpb"

	"github.com/toolhost/toolhost/builtin"
	"github.com/toolhost/toolhost/fsys"
	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// BuildCacheEnv names the environment variable that overrides the default build cache
// directory (see Options.BuildCache).
const BuildCacheEnv = "TOOLHOST_BUILD_CACHE"

// Options configure activation.
type Options struct {
	// Registry receives the Location's placement and tools. Required.
	Registry *registry.Registry
	// Logger receives activation warnings and, through Logger.Named(plugin name),
	// each plugin's logs. Default: discard.
	Logger hclog.Logger
	// BuildCache is where plugins given as Go source are built (see BuildPlugin).
	// Default: $TOOLHOST_BUILD_CACHE if set, else $XDG_CACHE_HOME/toolhost/build if
	// XDG_CACHE_HOME is absolute, else $HOME/.cache/toolhost/build, all read from Env.
	BuildCache string
	// SocketDir is passed to every plugin's plugins.Config.SocketDir.
	SocketDir string
	// Env is the environment TOOLHOST_REATTACH and the build cache variables are read
	// from. Default: os.Environ(). It is never passed to plugins: their environment is
	// the config's env alone.
	Env []string
	// Asker reaches a person when a permission rule says "ask". nil: nobody to ask,
	// so those requests are denied (with a hint, for the runner, saying how to allow them).
	Asker permission.Asker
	// StateDir is where "always" approvals persist, one file per Location. Default:
	// $XDG_DATA_HOME/toolhost/permissions (else ~/.local/share/...), read from Env.
	// Never inside the workspace: a cloned repository must not carry approvals.
	StateDir string
	// StartInBackground makes Activate return once the built-ins serve, before any
	// plugin or MCP server has started: those build and start in the background
	// (see Location.Started), their tools registering as each one starts, and
	// closing the Location cancels a build or start in progress. Manifest tools
	// register once they have all made their first attempt. For a front end that
	// must answer at once (toolhost mcp). Default: Activate waits.
	StartInBackground bool
	// WatchConfig makes the Location watch its config files while it is active and
	// apply each valid edit (see Location.Reload). For the long-lived front ends
	// (serve, dev, mcp). Default: the config is read once.
	WatchConfig bool
	// SandboxMode forces every source's containment mechanism ("namespace",
	// "cgroup", "subreaper"; see sandbox.Mode); "" picks the strongest the machine
	// allows. A forced mode the kernel refuses fails the source's start.
	SandboxMode sandbox.Mode
	// ObservePermission, if set, is told of every decision of the Location's
	// permission service, with the Location's id (see permission.Options.Observe).
	ObservePermission func(ctx context.Context, location string, d permission.Decision)
}

// Location is one activated workspace: a Location scope holding the registry placement
// and the supervised plugins. Its methods are safe for concurrent use.
type Location struct {
	id       string
	cfg      *Config
	opts     Options
	scope    *scope.Scope
	srcMu    sync.Mutex
	sources  []*source     // built-ins, plugins, MCP servers, manifest tools; added to by Activate
	started  chan struct{} // see Started
	reload   reloadState
	reg      *registry.Registry
	perm     *permission.Service
	fs       *fsys.FS
	logger   hclog.Logger
	cacheDir string
	reattach map[string]pluginpb.Reattach
	env      []string
	modules  map[string]LockedModule // module plugins' lock entries (module.go)

	changedMu sync.Mutex
	changedCh chan struct{} // closed and replaced at every change of a source's status
}

// Activate activates the Location at dir in a fresh child scope of parent.
//
// It canonicalizes dir (see Canonicalize), loads its config (see LoadConfig), opens
// the registry placement (id = the canonical directory, limits from the config's
// tool_output), builds the Location's services (FileSystem rooted at dir, Permission
// with the config's rules and opts.Asker) and registers the built-in tools. Then it
// starts every plugin and MCP server in parallel, each supervised in its own child
// scope of the Location scope, and registers the manifest tools. Plugins given as Go
// source are built first (see BuildPlugin); plugins given as Go modules are locked
// first if the lock file has no entry for them as configured (see LockModules, which
// writes the lock file), then fetched, checked against the lock and built (see
// BuildModule: a hash that differs is a *ModuleHashError); a plugin named in TOOLHOST_REATTACH is
// attached to instead of launched. Trusted plugins receive the services; untrusted
// plugins, MCP servers and manifest tools are checked by permission before each call.
// Activate returns once every source has made its first attempt to start (each
// bounded by its start timeout), so the tools of those that started are registered.
//
// A Location degrades rather than fails: a source that does not build, start,
// initialize or activate is reported by Sources (its state, error and stderr tail)
// and, for plugins and MCP servers, retried under its restart budget, while the
// others serve; a manifest tool whose command cannot be executed is Failed and never
// advertised. RestartSource tries a source again by hand. What still refuses the
// whole Location, with everything started closed before Activate returns (the
// placement included): a config error (a *ConfigError), no build cache directory
// for plugins given as source, an invalid TOOLHOST_REATTACH, ctx ending during
// activation, or parent closing.
// Activating a directory that is already active fails with registry.ErrLocationOpen.
//
// The Location lives until Close, or until parent closes. The placement is released
// last, after every plugin has stopped. ctx bounds activation only.
func Activate(ctx context.Context, parent *scope.Scope, dir string, opts Options) (*Location, error) {
	if opts.Registry == nil {
		return nil, errors.New("location: Options.Registry is required")
	}
	if parent == nil {
		return nil, errors.New("location: nil parent scope")
	}
	logger := opts.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}

	id, err := Canonicalize(dir)
	if err != nil {
		return nil, err
	}
	cfg, err := LoadConfig(id)
	if err != nil {
		return nil, err
	}
	// A host killed while it wrote the lock file left a temporary file beside it.
	lockFile := filepath.Join(id, filepath.FromSlash(LockPath))
	if removed, err := filestore.Clean(lockFile); err != nil {
		logger.Warn("could not remove what a killed writer of the lock file left", "file", lockFile, "error", err)
	} else if len(removed) > 0 {
		logger.Info("removed the temporary files a killed writer of the lock file left", "files", strings.Join(removed, ", "))
	}
	reattach, err := parseReattach(env)
	if err != nil {
		return nil, err
	}
	warnUnmatchedReattach(logger, id, cfg, reattach)
	for _, n := range cfg.Notes {
		logger.Info(n)
	}
	cacheDir := ""
	if needsBuild(cfg, reattach) {
		if cacheDir, err = BuildCacheDir(opts.BuildCache, env); err != nil {
			return nil, err
		}
	}
	var lock *Lock
	if hasModules(cfg) { // resolves and locks module plugins not locked yet
		if lock, _, err = LockModules(ctx, id, cfg, LockOptions{Env: env, TmpDir: cacheDir, Logger: logger}); err != nil {
			return nil, err
		}
	}

	release, err := opts.Registry.OpenLocation(id, cfg.ToolOutput.limits())
	if err != nil {
		if errors.Is(err, registry.ErrInvalidLimits) {
			return nil, fmt.Errorf("location: %s: /tool_output: %w", filepath.Join(id, filepath.FromSlash(ConfigPath)), err)
		}
		return nil, fmt.Errorf("location: activate %s: %w", id, err)
	}
	sc, err := parent.Child()
	if err != nil {
		release()
		return nil, fmt.Errorf("location: activate %s: %w", id, err)
	}
	// Deferred first, so released last: after every plugin scope has closed.
	if err := sc.Defer(ctx, func(context.Context) error { release(); return nil }); err != nil {
		return nil, fmt.Errorf("location: activate %s: %w", id, err) // parent closed meanwhile
	}

	l := &Location{id: id, cfg: cfg, opts: opts, scope: sc, reg: opts.Registry, logger: logger, cacheDir: cacheDir,
		reattach: reattach, env: env, changedCh: make(chan struct{}), started: make(chan struct{})}
	if lock != nil {
		l.modules = lock.Plugins
	}
	if err := l.startServices(ctx, opts, env, logger); err != nil {
		_ = sc.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("location: activate %s: %w", id, err)
	}
	l.addSources(&source{kind: KindBuiltin, state: supervise.Running})
	if opts.StartInBackground {
		// The scope's context ends when the Location closes, cancelling a build or
		// start in progress.
		if err := sc.Go(func(ctx context.Context) {
			defer close(l.started)
			if err := l.startSources(ctx); err != nil {
				if ctx.Err() == nil {
					logger.Error("Location's sources not started", "location", id, "error", err)
				}
				return
			}
			l.activated()
			l.startWatching()
		}); err != nil {
			_ = sc.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("location: activate %s: %w", id, err)
		}
		return l, nil
	}
	if err := l.startSources(ctx); err != nil {
		// Rollback: every source that started stops within its own grace.
		if cerr := sc.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("location: roll back %s: %w", id, cerr))
		}
		return nil, fmt.Errorf("location: activate %s: %w", id, err)
	}
	l.activated()
	close(l.started)
	l.startWatching()
	return l, nil
}

// startWatching watches the config files when Options.WatchConfig asks for it.
func (l *Location) startWatching() {
	if !l.opts.WatchConfig {
		return
	}
	if err := l.watchConfig(); err != nil && l.scope.Context().Err() == nil {
		l.logger.Warn("config edits will not apply while the Location is active: cannot watch its files", "location", l.id, "error", err)
	}
}

// startSources starts every plugin and MCP server of the config in parallel, each
// in its own child scope of the Location scope, waits for each one's first attempt,
// then registers the manifest tools. The sources are listed (Starting) before they
// start. An error refuses the whole Location: a scope closing, ctx ending.
func (l *Location) startSources(ctx context.Context) error {
	cfg, logger := l.cfg, l.logger
	plugs := make([]*source, len(cfg.Plugins))
	for i, pc := range cfg.Plugins {
		plugs[i] = &source{kind: KindPlugin, name: pc.Name, pc: &cfg.Plugins[i], state: supervise.Starting}
	}
	servers := make([]*source, len(cfg.MCPServers))
	for i, mc := range cfg.MCPServers {
		servers[i] = &source{kind: KindMCP, name: mc.Name, mc: &cfg.MCPServers[i], state: supervise.Starting}
	}
	l.addSources(plugs...)
	l.addSources(servers...)
	l.bump()

	var wg sync.WaitGroup
	errs := make([]error, len(plugs)+len(servers)) // what refuses the whole Location
	for i, pc := range cfg.Plugins {
		wg.Go(func() { errs[i] = l.startPluginSource(ctx, plugs[i], pc, cfg.WorkspaceID) })
	}
	for i, mc := range cfg.MCPServers {
		wg.Go(func() { errs[len(plugs)+i] = l.startServerSource(ctx, servers[i], mc) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		errs = append(errs, context.Cause(ctx))
	}
	if errors.Join(errs...) == nil {
		errs = append(errs, l.registerManifestTools(ctx, logger))
	}
	return errors.Join(errs...)
}

// startPluginSource builds (when given as Go source) and starts the plugin of src
// in a child scope of the Location scope, kept in src. A plugin that cannot build
// or start is src's error; only a Location closing is returned.
func (l *Location) startPluginSource(ctx context.Context, src *source, pc PluginConfig, workspaceID string) error {
	psc, err := l.scope.Child()
	if err != nil {
		src.fail(err)
		return fmt.Errorf("location: plugin %q: %w", pc.Name, err)
	}
	sup, err := l.startPlugin(ctx, psc, pc, workspaceID)
	src.mu.Lock()
	defer src.mu.Unlock()
	src.sc = psc
	if sup != nil {
		src.sup = sup
	} else {
		_ = psc.Close(context.WithoutCancel(ctx))
		src.state, src.err = supervise.Failed, err
	}
	return nil
}

// startServerSource starts the MCP server of src in a child scope of the Location
// scope, kept in src. A server that cannot start is src's error; only a Location
// closing is returned.
func (l *Location) startServerSource(ctx context.Context, src *source, mc MCPServerConfig) error {
	msc, err := l.scope.Child()
	if err != nil {
		src.fail(err)
		return fmt.Errorf("location: mcp server %q: %w", mc.Name, err)
	}
	cfg, err := l.serverConfig(ctx, mc)
	if err != nil {
		// Like a server that cannot start: the source fails, the Location serves.
		_ = msc.Close(context.WithoutCancel(ctx))
		src.fail(err)
		return nil
	}
	sup, err := mcp.Keep(ctx, msc, cfg, mcp.Target{Registry: l.reg, Location: l.id})
	src.mu.Lock()
	defer src.mu.Unlock()
	src.sc = msc
	if sup != nil {
		src.sup = sup
	} else { // only when the Location scope closed meanwhile
		src.state, src.err = supervise.Failed, fmt.Errorf("location: mcp server %q: %w", mc.Name, err)
		return src.err
	}
	return nil
}

// serverConfig is the mcp.Config of mc in this Location: its variables expanded
// and its headers helper run.
func (l *Location) serverConfig(ctx context.Context, mc MCPServerConfig) (mcp.Config, error) {
	lookup := envLookup(l.env)
	mc, err := mc.Expand(lookup)
	if err == nil {
		mc, err = mc.RunHeadersHelper(ctx, l.env)
	}
	if err != nil {
		return mcp.Config{}, err
	}
	tokenDir, _ := mcp.DefaultTokenDir(func(k string) string { v, _ := lookup(k); return v })
	return mcp.Config{
		Name: mc.Name,
		Remote: mcp.Remote{
			URL: mc.URL, Transport: mc.Transport, Headers: mc.Headers, TokenDir: tokenDir,
			LoginHint: "toolhost mcp-login " + mc.Name + " --location " + l.id,
		},
		Command:      mc.Command,
		Args:         mc.Args,
		Env:          mc.Env,
		Dir:          mc.Dir,
		Timeout:      mc.Timeout,
		StartTimeout: mc.StartTimeout,
		Authorize:    l.authorizer("mcp:" + mc.Name), // MCP tools are untrusted
		Overrides:    mc.Overrides,
		Limits:       mc.Sharing.limits(),
		Sandbox:      sandboxSpec(mc.Name, mc.Sandbox, mc.RequireSandbox, false, l.opts.SandboxMode),
		MaxHeldBytes: mc.MaxHeldBytes,
		Asks:         mc.askLimits(),
		Logger:       l.logger.Named(mc.Name),
	}, nil
}

// activated follows every source's changes and logs those that do not serve.
func (l *Location) activated() {
	for _, s := range l.sourceList() {
		l.follow(s)
	}
	l.bump()
	if bad := describe(l.Sources()); bad != "" {
		l.logger.Warn("Location activated without some of its sources" + bad)
	}
}

// Started returns a channel closed once every plugin and MCP server has made its
// first attempt to start and the manifest tools are registered: at once for a
// Location activated in the foreground; with Options.StartInBackground, when the
// background start is done (or ended by Close).
func (l *Location) Started() <-chan struct{} { return l.started }

// addSources lists sources of the Location.
func (l *Location) addSources(srcs ...*source) {
	l.srcMu.Lock()
	defer l.srcMu.Unlock()
	l.sources = append(l.sources, srcs...)
}

// sourceList returns the Location's sources in order.
func (l *Location) sourceList() []*source {
	l.srcMu.Lock()
	defer l.srcMu.Unlock()
	return slices.Clone(l.sources)
}

// startServices builds the Location's services — the FileSystem rooted at the
// directory and the Permission service with the config's rules — and registers the
// built-in tools, which capture them, before any plugin starts.
func (l *Location) startServices(ctx context.Context, opts Options, env []string, logger hclog.Logger) error {
	var err error
	if l.fs, err = fsys.New(l.id); err != nil {
		return err
	}
	if err := l.scope.Defer(ctx, func(context.Context) error { return l.fs.Close() }); err != nil {
		return err
	}
	stateFile := ""
	stateDir := opts.StateDir
	if stateDir == "" {
		stateDir = defaultStateDir(env)
	}
	if stateDir != "" {
		sum := sha256.Sum256([]byte(l.id))
		stateFile = filepath.Join(stateDir, hex.EncodeToString(sum[:12])+".json")
	} else {
		logger.Warn("no XDG_DATA_HOME or HOME: \"always\" approvals will last only while the Location is active", "location", l.id)
	}
	rules := make([]permission.Rule, len(l.cfg.Permission))
	for i, r := range l.cfg.Permission {
		rules[i] = permission.Rule{Action: r.Action, Resource: r.Resource, Effect: permission.Effect(r.Effect), Source: r.Source}
	}
	l.perm, err = permission.New(permission.Options{
		Rules:      rules,
		StateFile:  stateFile,
		Asker:      opts.Asker,
		ConfigHint: filepath.Join(l.id, filepath.FromSlash(ConfigPath)),
		Observe:    observeIn(l.id, opts.ObservePermission),
	})
	if err != nil {
		return err
	}
	// Closing declines every pending ask of the Location.
	_ = l.scope.Defer(ctx, func(context.Context) error { l.perm.Close(); return nil })

	release, err := l.reg.Register(registry.Batch{
		Location: l.id,
		Source:   registry.Source{Kind: "builtin"},
		Tools:    builtin.Tools(l.fs, l.perm),
		Owner:    l.scope,
	})
	if err != nil {
		return err
	}
	return l.scope.Defer(ctx, func(context.Context) error { release(); return nil })
}

// observeIn binds observe to the Location id; nil stays nil.
func observeIn(id string, observe func(context.Context, string, permission.Decision)) func(context.Context, permission.Decision) {
	if observe == nil {
		return nil
	}
	return func(ctx context.Context, d permission.Decision) { observe(ctx, id, d) }
}

// defaultStateDir is where saved approvals live by default, or "" when env names no
// data directory.
func defaultStateDir(env []string) string {
	if dir := lookupEnv(env, "XDG_DATA_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "toolhost", "permissions")
	}
	if home := lookupEnv(env, "HOME"); filepath.IsAbs(home) {
		return filepath.Join(home, ".local", "share", "toolhost", "permissions")
	}
	return ""
}

// pluginConfig is the plugins.Config of pc in this Location, given the config's
// workspace id (Path unset for a plugin given as source).
func (l *Location) pluginConfig(pc PluginConfig, workspaceID string) plugins.Config {
	cfg := plugins.Config{
		Name:         pc.Name,
		Path:         pc.Path,
		SHA256:       pc.SHA256,
		Env:          pc.Env,
		Options:      pc.Options,
		WorkspaceID:  workspaceID,
		StartTimeout: pc.StartTimeout,
		StopGrace:    pc.StopGrace,
		CallTimeout:  pc.CallTimeout,
		Overrides:    pc.Overrides,
		Limits:       pc.Sharing.limits(),
		MaxHeldBytes: pc.MaxHeldBytes,
		SocketDir:    l.opts.SocketDir,
		Logger:       l.logger.Named(pc.Name),
		// Untrusted plugins are confined; the sandbox block widens that.
		Sandbox: sandboxSpec(pc.Name, pc.Sandbox, pc.RequireSandbox, !pc.Trusted, l.opts.SandboxMode),
	}
	// Sharing the tool type does not mean sharing authority: only a trusted plugin
	// gets the Location's services; an untrusted one is checked by the host instead.
	if pc.Trusted {
		cfg.Services = &plugins.Services{FS: l.fs, Permission: l.perm}
		cfg.Grants = []plugins.Grant{plugins.GrantAsk, plugins.GrantSample}
	} else {
		cfg.Authorize = l.authorizer("plugin:" + pc.Name)
		for _, g := range pc.Grants {
			cfg.Grants = append(cfg.Grants, plugins.Grant(g))
		}
	}
	return cfg
}

// authorizer is the host's permission check before a call reaches the untrusted
// source named source (see permission.Source.ToolSource).
func (l *Location) authorizer(source string) func(context.Context, string, sdk.Invocation) error {
	return func(ctx context.Context, tool string, inv sdk.Invocation) error {
		return l.perm.AssertToolFrom(ctx, source, tool, inv)
	}
}

// Permission returns the Location's permission service (to answer asks out of
// band, list pending ones, or end a session).
func (l *Location) Permission() *permission.Service { return l.perm }

// FileSystem returns the Location's file system service.
func (l *Location) FileSystem() *fsys.FS { return l.fs }

// ID returns the Location's id: its canonical directory.
func (l *Location) ID() string { return l.id }

// Config returns the config in force: the one the Location was activated with, or
// the last one Reload applied. Do not modify it.
func (l *Location) Config() *Config {
	l.reload.cfg.Lock()
	defer l.reload.cfg.Unlock()
	return l.cfg
}

// Plugins returns the supervisors of the Location's plugins, in config order,
// leaving out those that never got as far as starting (a failed build; see Sources).
func (l *Location) Plugins() []*plugins.Supervisor {
	var out []*plugins.Supervisor
	for _, s := range l.sourceList() {
		if sup, ok := s.supervisor().(*plugins.Supervisor); ok {
			out = append(out, sup)
		}
	}
	return out
}

// MCPServers returns the supervisors of the Location's MCP servers, in config order.
func (l *Location) MCPServers() []*mcp.Supervisor {
	var out []*mcp.Supervisor
	for _, s := range l.sourceList() {
		if sup, ok := s.supervisor().(*mcp.Supervisor); ok {
			out = append(out, sup)
		}
	}
	return out
}

// Prepare captures a registry Request for the Location's placement: its tools and the
// application's, sorted by name, that the Location's permission rules leave visible
// (a tool whose source and action a rule denies for every resource is not offered;
// see permission.Visibility), narrowed further by opts (registry.Offer). A runner
// that wants every tool, denied ones included, passes registry.OfferAll(); calls
// still go through permission either way. It fails with ErrClosing once the
// Location's Close has begun (its tools are going away).
func (l *Location) Prepare(opts ...registry.PrepareOption) (*registry.Request, error) {
	if l.scope.Context().Err() != nil {
		return nil, fmt.Errorf("%w: %s", ErrClosing, l.id)
	}
	return l.reg.Prepare(l.id, append([]registry.PrepareOption{registry.Offer(l.perm.Visible)}, opts...)...)
}

// ErrClosing is returned by Location.Prepare once the Location is closing or closed.
// It wraps registry.ErrLocationNotOpen.
var ErrClosing = fmt.Errorf("location: closing, no Request can be prepared: %w", registry.ErrLocationNotOpen)

// Close deactivates the Location: it closes the Location scope, so in-flight
// executions end as interruptions, every tool of the Location disappears, every
// process it started is stopped (gracefully, then killed after its grace or ctx's
// deadline), and the placement is released. It blocks until all that is done and is
// idempotent: later calls return the first call's result.
func (l *Location) Close(ctx context.Context) error { return l.scope.Close(ctx) }

// warnUnmatchedReattach warns about TOOLHOST_REATTACH entries that name no plugin of
// the Location: a misspelt name would otherwise silently launch the host's own copy.
func warnUnmatchedReattach(logger hclog.Logger, id string, cfg *Config, reattach map[string]pluginpb.Reattach) {
	names := make([]string, 0, len(cfg.Plugins))
	for _, p := range cfg.Plugins {
		names = append(names, p.Name)
	}
	for name := range reattach {
		if !slices.Contains(names, name) {
			logger.Warn(fmt.Sprintf("%s names plugin %q, which this Location does not configure, so nothing attaches to that process here; the Location's plugins are %q",
				pluginpb.ReattachEnv, name, names), "location", id)
		}
	}
}

// parseReattach reads TOOLHOST_REATTACH from env (the last definition wins, as for
// exec). Unset or empty means no plugin is reattached.
func parseReattach(env []string) (map[string]pluginpb.Reattach, error) {
	v := lookupEnv(env, pluginpb.ReattachEnv)
	if v == "" {
		return nil, nil
	}
	m, err := pluginpb.ParseReattach(v)
	if err != nil {
		return nil, fmt.Errorf("location: invalid %s: %w", pluginpb.ReattachEnv, err)
	}
	return m, nil
}

func needsBuild(cfg *Config, reattach map[string]pluginpb.Reattach) bool {
	for _, p := range cfg.Plugins {
		if _, ok := reattach[p.Name]; (p.Source != "" || p.Module != "") && !ok {
			return true
		}
	}
	return false
}

// BuildCacheDir resolves the build cache as Options.BuildCache describes: configured
// if set, else from env. Hot reload uses it to rebuild into the cache the Location
// used.
func BuildCacheDir(configured string, env []string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	if dir := lookupEnv(env, BuildCacheEnv); dir != "" {
		return dir, nil
	}
	if dir := lookupEnv(env, "XDG_CACHE_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "toolhost", "build"), nil
	}
	if home := lookupEnv(env, "HOME"); filepath.IsAbs(home) {
		return filepath.Join(home, ".cache", "toolhost", "build"), nil
	}
	return "", fmt.Errorf("location: no build cache directory: set %s, XDG_CACHE_HOME or HOME", BuildCacheEnv)
}

func lookupEnv(env []string, key string) string {
	for _, kv := range slices.Backward(env) {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

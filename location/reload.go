package location

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/toolhost/toolhost/manifest"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/supervise"
)

// Config reload: while a Location is active its config files are watched (see
// Options.WatchConfig) and a valid edit is applied as a reconciliation of the
// running sources against the new config (Reload). An invalid edit changes
// nothing: the running config keeps serving and the error shows as the "config"
// entry of Sources until an edit applies.

// KindConfig is the Kind (and ID) of the entry Sources adds while the config on
// disk cannot be applied: State Failed, Err the *ConfigError (file and JSON
// pointer) or the reading error. It is not a source: RestartSource does not know it.
const KindConfig = "config"

// reloadDebounce is how long the config files must be quiet before a change is
// read: an editor's save (write, rename) or a git checkout is one reload.
const reloadDebounce = 50 * time.Millisecond

// reloadMaxDelay bounds how long changes that never go quiet (a program rewriting
// a file without pause) hold a reload back: while they go on, the files are read
// at least this often.
const reloadMaxDelay = time.Second

// reloadState is a Location's config as reloaded.
//
// A reload has two steps (Reload takes both): reading the files and putting their
// permission rules and tool_output limits in force (readConfig, quick), then
// reconciling the sources with the config read last (reconcilePending, which can
// take a build and a start). A reconciliation in progress never holds back the
// next read, so a deny saved while a plugin rebuilds holds at once.
type reloadState struct {
	read sync.Mutex // serializes readConfig
	mu   sync.Mutex // serializes reconcilePending
	kick chan struct{}

	cfg     sync.Mutex // guards Location.cfg, err, ruled and pending
	err     error      // the last reload's error, nil once a config applied
	ruled   *Config    // the config whose rules and limits are in force; nil: Location.cfg's
	pending *Config    // read and in force, its sources not reconciled yet
}

// Reload reads the Location's config files again (config.json, the imported MCP
// configs, .toolhost/tools/*.json, the lock file) and applies them, blocking until
// done:
//
//   - permission rules are in force for every check that starts after Reload has
//     read them (a new deny holds at once, also for Requests prepared before),
//     also while an earlier reload is still building or starting a source;
//   - a source whose entry is unchanged keeps running untouched; an added one
//     starts; a removed one stops (its calls in flight end as interruptions);
//   - a changed plugin (rebuilt first when given as source or module) or MCP
//     server is replaced by its next generation once that has registered its
//     tools: new calls go to it, and the calls in flight on the old one finish
//     within its stop grace. A changed manifest tool is replaced once its new
//     definition has registered: new calls run the new command, and the calls in
//     flight run to their end on the old one (Reload does not wait for them). A
//     changed source that does not serve (its build failed, its command cannot
//     run, it is still starting) is stopped and started anew;
//   - a changed source's new entry becomes its config only once it serves. If it
//     cannot (the build fails, the new generation does not start, the new command
//     cannot run), the old generation keeps serving with its config, the error is
//     the source's last error (Sources, State Running), and every later Reload
//     tries the entry again, also when the same file is saved again; an edit back
//     to the serving entry clears the error;
//   - tool_output (the placement's limits) holds for every Request prepared after
//     Reload has read it; a Request prepared before keeps the limits it was
//     prepared with;
//   - workspace_id shows at once (Config); a plugin learns it only when it is
//     activated, so a change to it replaces every running plugin, as a change of
//     its entry does.
//
// An invalid config changes nothing and is returned (a *ConfigError naming the file
// and JSON pointer); it shows as the KindConfig entry of Sources and in the log
// until a Reload applies. A valid config whose modules cannot be locked (or whose
// build cache cannot be made) has its rules and tool_output in force but leaves
// the sources as they run, with the error shown the same way. Reload fails with ErrClosing once the Location closes.
// Safe for concurrent use; reloads are serialized.
func (l *Location) Reload(ctx context.Context) error {
	if err := l.readConfig(ctx); err != nil {
		return err
	}
	return l.reconcilePending(ctx)
}

// readConfig reads the config files and, when they are valid, puts their
// permission rules and tool_output limits in force and leaves the config for
// reconcilePending. An invalid config changes nothing and is returned (and shown,
// see Reload).
func (l *Location) readConfig(ctx context.Context) error {
	l.reload.read.Lock()
	defer l.reload.read.Unlock()
	if l.scope.Context().Err() != nil {
		return fmt.Errorf("%w: %s", ErrClosing, l.id)
	}
	select { // the first start is done: its sources are listed
	case <-l.started:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	// A Location whose directory is gone (removed, renamed) has no config to
	// read: LoadConfig would find none and read an empty one, stopping every
	// source. The running config serves on until the directory is back.
	if fi, err := os.Stat(l.id); err != nil || !fi.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return l.notApplied(fmt.Errorf("location: %s: the Location's directory is gone (%w): removed or renamed while active; "+
			"put it back to apply edits, or deactivate the Location", l.id, err))
	}
	cfg, err := LoadConfig(l.id)
	if err != nil {
		return l.notApplied(err)
	}
	l.reload.cfg.Lock()
	old := l.reload.ruled
	if old == nil {
		old = l.cfg
	}
	l.reload.cfg.Unlock()
	if cfg.ToolOutput != old.ToolOutput {
		if err = l.reg.SetLocationLimits(l.id, cfg.ToolOutput.limits()); err != nil {
			if errors.Is(err, registry.ErrInvalidLimits) {
				err = fmt.Errorf("location: %s: /tool_output: %w", filepath.Join(l.id, filepath.FromSlash(ConfigPath)), err)
			}
			return l.notApplied(err)
		}
	}
	if err = l.perm.SetRules(permissionRules(cfg)); err != nil {
		if cfg.ToolOutput != old.ToolOutput {
			_ = l.reg.SetLocationLimits(l.id, old.ToolOutput.limits()) // valid: they applied
		}
		return l.notApplied(err)
	}
	for _, n := range cfg.Notes {
		l.logger.Info(n)
	}
	l.reload.cfg.Lock()
	l.reload.ruled, l.reload.pending = cfg, cfg
	l.reload.cfg.Unlock()
	return nil
}

// reconcilePending makes the running sources those of the config readConfig read
// last (locking its modules and building first), if no other call has. It
// returns the error that kept it from doing so.
func (l *Location) reconcilePending(ctx context.Context) error {
	l.reload.mu.Lock()
	defer l.reload.mu.Unlock()
	l.reload.cfg.Lock()
	cfg := l.reload.pending
	l.reload.pending = nil
	l.reload.cfg.Unlock()
	if cfg == nil {
		return nil
	}
	if l.scope.Context().Err() != nil {
		return fmt.Errorf("%w: %s", ErrClosing, l.id)
	}
	oldModules := l.lockedModules()
	var err error
	if hasModules(cfg) {
		var lock *Lock
		if lock, _, err = LockModules(ctx, l.id, cfg, LockOptions{Env: l.env, TmpDir: l.cacheDir, Logger: l.logger}); err == nil {
			l.setModules(lock.Plugins)
		}
	}
	if err == nil && needsBuild(cfg, l.reattach) && l.cacheDir == "" {
		l.cacheDir, err = BuildCacheDir(l.opts.BuildCache, l.env)
	}
	if err != nil {
		return l.notApplied(err)
	}
	changes := l.reconcile(ctx, cfg, oldModules)
	l.reload.cfg.Lock()
	l.cfg, l.reload.err = cfg, nil
	l.reload.cfg.Unlock()
	l.bump()
	if len(changes) > 0 {
		l.logger.Info("config applied: "+strings.Join(changes, ", "), "location", l.id)
	}
	return nil
}

// notApplied records and logs err as the reason the config on disk is not
// applied, and returns it.
func (l *Location) notApplied(err error) error {
	l.setConfigErr(err)
	l.logger.Error("config not applied: the running config keeps serving until the error is fixed", "location", l.id, "error", err)
	return err
}

// ConfigErr returns why the config on disk is not applied (the last Reload's
// error), or nil.
func (l *Location) ConfigErr() error {
	l.reload.cfg.Lock()
	defer l.reload.cfg.Unlock()
	return l.reload.err
}

func (l *Location) setConfigErr(err error) {
	l.reload.cfg.Lock()
	l.reload.err = err
	l.reload.cfg.Unlock()
	l.bump()
}

func (l *Location) setModules(m map[string]LockedModule) {
	l.reload.cfg.Lock()
	defer l.reload.cfg.Unlock()
	l.modules = m
}

func (l *Location) lockedModules() map[string]LockedModule {
	l.reload.cfg.Lock()
	defer l.reload.cfg.Unlock()
	return l.modules
}

// permissionRules is the permission service's form of cfg's rules.
func permissionRules(cfg *Config) []permission.Rule {
	rules := make([]permission.Rule, len(cfg.Permission))
	for i, r := range cfg.Permission {
		rules[i] = permission.Rule{Action: r.Action, Resource: r.Resource, Effect: permission.Effect(r.Effect), Source: r.Source}
	}
	return rules
}

// reconcile makes the running sources those of cfg (see Reload) and returns what
// changed, one "added plugin:x"-style item each.
func (l *Location) reconcile(ctx context.Context, cfg *Config, oldModules map[string]LockedModule) []string {
	newModules := l.lockedModules()
	running := map[string]*source{}
	var builtin *source
	for _, s := range l.sourceList() {
		if s.kind == KindBuiltin {
			builtin = s
			continue
		}
		running[s.id()] = s
	}
	var (
		next     = []*source{builtin}
		changes  []string
		stop     []*source
		start    []func()
		reloaded []func()
		fresh    []*source // new plugins and MCP servers, to follow
	)
	// Plugins.
	for i := range cfg.Plugins {
		pc := &cfg.Plugins[i]
		s, ok := running[KindPlugin+":"+pc.Name]
		delete(running, KindPlugin+":"+pc.Name)
		var sup *plugins.Supervisor
		if ok {
			sup, _ = s.supervisor().(*plugins.Supervisor)
		}
		same := ok && reflect.DeepEqual(*s.pc, *pc) && (pc.Module == "" || reflect.DeepEqual(oldModules[pc.Name], newModules[pc.Name]))
		switch {
		case same && (sup == nil || sup.Config().WorkspaceID == cfg.WorkspaceID):
			next = append(next, s)
			s.forgetTried()
			continue
		case sup != nil:
			// Replaced by its next generation, as a restart by hand is; a plugin
			// learns a new workspace_id only by activating again.
			next = append(next, s)
			changes = append(changes, "changed "+s.id())
			reloaded = append(reloaded, func() { l.replacePlugin(ctx, s, sup, pc, cfg.WorkspaceID) })
			continue
		case ok:
			stop = append(stop, s)
			changes = append(changes, "changed "+s.id())
		default:
			changes = append(changes, "added "+KindPlugin+":"+pc.Name)
		}
		n := &source{kind: KindPlugin, name: pc.Name, pc: pc, state: supervise.Starting}
		next, fresh = append(next, n), append(fresh, n)
		start = append(start, func() { _ = l.startPluginSource(ctx, n, *pc, cfg.WorkspaceID) })
	}
	// MCP servers.
	for i := range cfg.MCPServers {
		mc := &cfg.MCPServers[i]
		s, ok := running[KindMCP+":"+mc.Name]
		delete(running, KindMCP+":"+mc.Name)
		var sup *mcp.Supervisor
		if ok {
			sup, _ = s.supervisor().(*mcp.Supervisor)
		}
		switch {
		case ok && reflect.DeepEqual(*s.mc, *mc):
			next = append(next, s)
			s.forgetTried()
			continue
		case sup != nil:
			// Replaced by its next generation, as a plugin is.
			next = append(next, s)
			changes = append(changes, "changed "+s.id())
			reloaded = append(reloaded, func() { l.replaceServer(ctx, s, sup, mc) })
			continue
		case ok:
			stop = append(stop, s)
			changes = append(changes, "changed "+s.id())
		default:
			changes = append(changes, "added "+KindMCP+":"+mc.Name)
		}
		n := &source{kind: KindMCP, name: mc.Name, mc: mc, state: supervise.Starting}
		next, fresh = append(next, n), append(fresh, n)
		start = append(start, func() { _ = l.startServerSource(ctx, n, *mc) })
	}
	// Manifest tools, registered after the others as at activation. A changed one
	// that serves is replaced once its successor has registered.
	var (
		manifests []*source
		replaced  = map[*source]*source{} // successor: the serving source it replaces
	)
	for _, t := range l.manifestTools(cfg) {
		n := l.newManifestSource(t)
		if slices.ContainsFunc(manifests, func(o *source) bool { return o.id() == n.id() }) {
			continue // a config tool wins over a file's of the same name
		}
		s, ok := running[n.id()]
		delete(running, n.id())
		switch {
		case ok && reflect.DeepEqual(*s.tool, *n.tool):
			manifests = append(manifests, s)
			s.forgetTried()
			continue
		case ok && s.serving():
			replaced[n] = s
			changes = append(changes, "changed "+s.id())
		case ok:
			stop = append(stop, s)
			changes = append(changes, "changed "+s.id())
		default:
			changes = append(changes, "added "+n.id())
		}
		manifests = append(manifests, n)
	}
	for _, id := range slices.Sorted(maps.Keys(running)) {
		stop = append(stop, running[id])
		changes = append(changes, "removed "+id)
	}

	// Stop first, so a name a removed source held is free for an added one.
	var wg sync.WaitGroup
	for _, s := range stop {
		wg.Go(func() { l.stopSource(ctx, s) })
	}
	wg.Wait()
	shown := slices.Clone(manifests) // a replaced manifest tool serves until its successor does
	for i, s := range shown {
		if old := replaced[s]; old != nil {
			shown[i] = old
		}
	}
	l.srcMu.Lock()
	l.sources = append(slices.Clip(next), shown...)
	l.srcMu.Unlock()
	l.bump()
	for _, f := range append(start, reloaded...) {
		wg.Go(f)
	}
	wg.Wait()
	for i, s := range manifests {
		if s.sc != nil {
			continue
		}
		_ = l.startManifestSource(ctx, s) // fails only when the Location closes
		if old := replaced[s]; old != nil {
			manifests[i] = l.replaceManifest(ctx, old, s)
		}
	}
	if len(replaced) > 0 {
		l.srcMu.Lock()
		l.sources = append(slices.Clip(next), manifests...)
		l.srcMu.Unlock()
		l.bump()
	}
	for _, s := range fresh {
		l.follow(s)
	}
	return changes
}

// replacePlugin replaces the serving generation of a changed plugin (sup, s's
// supervisor) by one of pc activated with workspaceID, rebuilt first when given as
// source or module (supervise.Supervisor.Replace): the next generation starts and
// registers, then the old one is released, its calls in flight finishing. pc
// becomes s's config only then; if the build or the start fails, the running
// generation keeps serving with its config, the error is the source's last error,
// and the next reload tries pc again.
func (l *Location) replacePlugin(ctx context.Context, s *source, sup *plugins.Supervisor, pc *PluginConfig, workspaceID string) {
	s.op.Lock()
	defer s.op.Unlock()
	_, err := sup.Replace(ctx, func(ctx context.Context, cur plugins.Config) (plugins.Config, error) {
		cfg := l.pluginConfig(*pc, workspaceID)
		if cur.Reattach != nil {
			cfg.Reattach = cur.Reattach
		} else if pc.Source != "" || pc.Module != "" {
			path, err := l.build(ctx, *pc)
			if err != nil {
				return cfg, err
			}
			cfg.Path = path
		}
		return cfg, nil
	}, func() { s.commit(func() { s.pc = pc }) })
	if err != nil {
		s.setTried()
		l.logger.Error("changed plugin not replaced: the running generation keeps serving its config", "plugin", pc.Name, "error", err)
	}
}

// replaceServer replaces the serving generation of a changed MCP server (sup, s's
// supervisor) by one of mc (supervise.Supervisor.Replace): the next generation
// starts and lists its tools, then the old one is released, its calls in flight
// finishing within its stop grace. mc becomes s's config only then; if mc cannot
// be made (a variable, the headers helper) or its server does not start, the
// running generation keeps serving with its config, the error is the source's last
// error, and the next reload tries mc again.
func (l *Location) replaceServer(ctx context.Context, s *source, sup *mcp.Supervisor, mc *MCPServerConfig) {
	s.op.Lock()
	defer s.op.Unlock()
	_, err := sup.Replace(ctx, func(ctx context.Context, _ mcp.Config) (mcp.Config, error) {
		return l.serverConfig(ctx, *mc)
	}, func() { s.commit(func() { s.mc = mc }) })
	if err != nil {
		s.setTried()
		l.logger.Error("changed MCP server not replaced: the running generation keeps serving its config", "server", mc.Name, "error", err)
	}
}

// replaceManifest replaces the serving manifest tool old by its changed successor
// n, just registered (startManifestSource), and returns the source that serves
// from now on. When n registered, old's registration is released, so new calls run
// n's command, and old's calls in flight finish on old's command (old's scope
// drains, within its tool's timeout and kill grace) before old's scope closes; the
// drain goes on in the background, so the reload does not wait for it. When n did
// not register (its command cannot run, its schema does not compile), old keeps
// serving with its definition and n's error as its last error, and the next reload
// tries the edit again.
func (l *Location) replaceManifest(ctx context.Context, old, n *source) *source {
	n.mu.Lock()
	err := n.err
	n.mu.Unlock()
	if err != nil {
		_ = n.sc.Close(context.WithoutCancel(ctx))
		old.mu.Lock()
		old.err, old.tried = err, true
		old.mu.Unlock()
		l.logger.Error("changed manifest tool not replaced: the running definition keeps serving", "tool", old.name, "error", err)
		return old
	}
	old.op.Lock()
	old.mu.Lock()
	sc, release, timeout := old.sc, old.release, old.tool.Timeout
	old.mu.Unlock()
	old.op.Unlock()
	release()
	if timeout <= 0 {
		timeout = manifest.DefaultTimeout
	}
	// A call runs at most its timeout, then its command is killed within the kill grace.
	grace := timeout + manifest.KillGrace
	if err := l.scope.Go(func(ctx context.Context) {
		dctx, cancel := context.WithTimeout(ctx, grace)
		_ = sc.Drain(dctx)
		cancel()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), manifest.KillGrace)
		defer cancel()
		_ = sc.Close(cctx)
	}); err != nil { // the Location is closing, and closes sc
		_ = sc.Close(context.WithoutCancel(ctx))
	}
	return n
}

// stopSource stops a removed or replaced source: its scope closes, so its calls in
// flight end as interruptions, its tools are released and its processes stop.
func (l *Location) stopSource(ctx context.Context, s *source) {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	sc := s.sc
	s.mu.Unlock()
	if sc == nil {
		return
	}
	if err := sc.Close(context.WithoutCancel(ctx)); err != nil {
		l.logger.Warn("source stopped with an error", "source", s.id(), "error", err)
	}
}

// watchConfig reloads the Location whenever one of its config files changes, once
// the files have been quiet for reloadDebounce (or reloadMaxDelay after the first
// change, if they never are), until the Location closes. A change made during a
// reload is read by the next one. The watch is one of the process's shared
// watcher (configWatches), so a process's Locations spend one inotify instance
// of the user's between them.
//
// A directory that holds config files (the Location's own, .toolhost,
// .toolhost/tools, those of the imported configs) made, removed or renamed counts
// as a change of its files: a .toolhost renamed into place brings a config no
// event names. The parent of the Location's directory is watched too, so that the
// directory made again or renamed back after it went is watched again. A
// directory is watched again (all of them are, since one may come with the others
// inside) before the change is read, so what was written into it before its watch
// is read then, and what comes after is seen. Events the watcher lost (an
// overflow of its queue) count as a change.
func (l *Location) watchConfig() error {
	dirs := map[string]bool{l.id: true, filepath.Join(l.id, ".toolhost"): true, filepath.Join(l.id, ".toolhost", "tools"): true}
	for rel := range importFormats {
		dirs[filepath.Join(l.id, filepath.Dir(filepath.FromSlash(rel)))] = true
	}
	watched := slices.Sorted(maps.Keys(dirs))
	if parent := filepath.Dir(l.id); parent != l.id {
		watched = append(watched, parent) // only its events naming l.id count
	}
	cw, err := configWatches.watch(watched, func(path string, op fsnotify.Op) (relevant, rewatch bool) {
		switch {
		case dirs[path]:
			return true, op.Has(fsnotify.Create)
		case l.isConfigFile(path):
			return true, false
		}
		return false, false
	})
	if err != nil {
		return err
	}
	l.reload.kick = make(chan struct{}, 1)
	if err := l.scope.Go(func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				return
			case <-l.reload.kick:
				_ = l.reconcilePending(ctx) // an error is logged and shown by Sources
			}
		}
	}); err != nil {
		cw.Close()
		return err
	}
	if err := l.scope.Go(func(ctx context.Context) {
		defer cw.Close()
		var timer reloadTimer
		for {
			select {
			case <-ctx.Done():
				return
			case <-cw.changed:
				if err := cw.Err(); err != nil {
					l.logger.Warn("watching the config files: reading them again", "location", l.id, "error", err)
				}
				timer.changed()
			case <-timer.quiet:
				timer = reloadTimer{}
				l.readAndKick(ctx)
			case <-timer.due:
				timer = reloadTimer{}
				l.readAndKick(ctx)
			}
		}
	}); err != nil {
		cw.Close()
		return err
	}
	return nil
}

// readAndKick reads the config files and, when they are valid, has the
// reconciling goroutine of watchConfig apply their sources: the watcher goes on
// reading edits while a reconciliation builds and starts.
func (l *Location) readAndKick(ctx context.Context) {
	if l.readConfig(ctx) != nil {
		return // logged and shown by Sources
	}
	select {
	case l.reload.kick <- struct{}{}:
	default: // a kick is pending: it reconciles the config read last
	}
}

// reloadTimer says when changes to the config files are read: quiet fires once
// they have been quiet for reloadDebounce, due reloadMaxDelay after the first
// change, whichever comes first. The zero value waits for a change; reset it to
// the zero value once it fired.
type reloadTimer struct {
	quiet, due <-chan time.Time
}

// changed records a change to a config file.
func (t *reloadTimer) changed() {
	t.quiet = time.After(reloadDebounce)
	if t.due == nil {
		t.due = time.After(reloadMaxDelay)
	}
}

// isConfigFile reports whether path is one of the files Reload reads.
func (l *Location) isConfigFile(path string) bool {
	rel, err := filepath.Rel(l.id, path)
	if err != nil {
		return false
	}
	rel = filepath.ToSlash(rel)
	switch {
	case rel == ConfigPath, rel == LockPath:
		return true
	case strings.HasPrefix(rel, ".toolhost/tools/") && strings.HasSuffix(rel, ".json"):
		return true
	}
	_, imported := importFormats[rel]
	return imported
}

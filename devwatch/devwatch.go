// Package devwatch is `toolhost dev`'s hot reload: it watches the plugins of an
// active Location and reloads a plugin when its source or binary changes.
//
// For a plugin configured with `source`, every directory under the source is watched
// (hidden directories and testdata excluded; hidden files, editor temporaries and
// _test.go files ignored). For a plugin configured with `path`, the binary is
// watched (through its directory, so a rebuild that replaces the file is seen). A
// plugin attached with TOOLHOST_REATTACH is not the host's to reload and is not
// watched.
//
// A change to a source plugin that is not reloading starts its reload at once, so a
// single save costs no debounce. Changes that arrive while a reload is building
// cancel that build (it is not reported), and the reload starts over once the files
// have been quiet for Options.Debounce, so a burst (an editor's rename dance, a git
// checkout) costs one build of its final state. Binary plugins are always debounced:
// a binary being written is seen in pieces. The plugin is rebuilt with
// location.BuildPlugin — content-addressed, so a source that is back to a state
// already built costs no compilation, and a build that yields the binary already
// serving reloads nothing — and reloaded with
// plugins.Supervisor.Reload: the new generation starts and registers, then the old
// one is drained and stopped. A failed build or start leaves the old generation
// serving. Each attempt is reported as one Event.
package devwatch

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/supervise"
)

// DefaultDebounce is the quiet period that ends a burst of changes (see the package
// doc).
const DefaultDebounce = 50 * time.Millisecond

// Options configure a Watcher.
type Options struct {
	// BuildCache is where plugins given as source are built. It must be the cache the
	// Location was activated with (location.Options.BuildCache), so that rebuilding
	// unchanged sources finds the binary already serving. Required when the Location
	// has such plugins.
	BuildCache string
	// Debounce is the quiet period after the last change of a plugin's files before a
	// binary plugin is reloaded, or a source plugin whose build was cancelled by the
	// change is rebuilt; default DefaultDebounce.
	Debounce time.Duration
	// Logger receives watch errors. Default: discard.
	Logger hclog.Logger
	// Report receives one Event per reload attempt, from the plugin's own goroutine
	// (one at a time per plugin). Default: none.
	Report func(Event)
}

// Event is one reload attempt of one plugin.
type Event struct {
	// Location is the Location's id, Plugin the plugin's name.
	Location, Plugin string
	// Changed are the changed files, relative to the plugin's source directory (or
	// the binary's name), sorted.
	Changed []string
	// Build is how long building took (0 for a binary plugin); Built is false when
	// the build cache already had the result.
	Build time.Duration
	Built bool
	// Unchanged is set when the build gave the binary already serving: nothing was
	// reloaded.
	Unchanged bool
	// Reload is what the supervisor did: generations, start and swap times.
	Reload supervise.Reload
	// ToolsChanged names the Location's tools whose definitions were added, changed
	// or removed by the reload (calls captured before it settle unavailable for
	// these); empty when the contract is the same.
	ToolsChanged []string
	// Serving is the generation serving after the attempt.
	Serving uint64
	// Err is why the attempt failed (a *location.BuildError quoting the compiler, a
	// *plugins.StartError with the plugin's stderr, ...); the old generation keeps
	// serving.
	Err error
}

// String is the one line `toolhost dev` prints (followed, on failure, by the
// compiler output or the start error on the next lines).
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reload %s: %s changed", e.Plugin, describeFiles(e.Changed))
	phase := func(name string, d time.Duration) { fmt.Fprintf(&b, "; %s %s", name, round(d)) }
	if e.Build > 0 || e.Built {
		if e.Built {
			phase("build", e.Build)
		} else {
			phase("build (cached)", e.Build)
		}
	}
	switch {
	case e.Err != nil:
		fmt.Fprintf(&b, "; FAILED, generation %d keeps serving:\n%s", e.Serving, indent(e.Err.Error()))
		return b.String()
	case e.Unchanged:
		fmt.Fprintf(&b, "; same binary as generation %d, nothing to reload", e.Serving)
		return b.String()
	}
	phase(fmt.Sprintf("start generation %d", e.Reload.To), e.Reload.Start)
	phase(fmt.Sprintf("swap out generation %d", e.Reload.From), e.Reload.Swap)
	if len(e.ToolsChanged) > 0 {
		fmt.Fprintf(&b, "; contract changed: %s", strings.Join(e.ToolsChanged, ", "))
	} else {
		b.WriteString("; same contract")
	}
	if e.Reload.Interrupted {
		b.WriteString("; calls still running after the drain were interrupted")
	}
	return b.String()
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Microsecond)
}

func describeFiles(files []string) string {
	switch len(files) {
	case 0:
		return "nothing"
	case 1, 2, 3:
		return strings.Join(files, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(files[:3], ", "), len(files)-3)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// Watcher watches one Location's plugins. Close it before (or when) the Location
// closes.
type Watcher struct {
	loc    *location.Location
	opts   Options
	fsw    *fsnotify.Watcher
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	watched []*watchedPlugin

	closeOnce sync.Once
	closeErr  error
}

// watchedPlugin is one plugin's watch state.
type watchedPlugin struct {
	w      *Watcher
	sup    *plugins.Supervisor
	name   string
	source string // source directory, or ""
	binary string // binary path (for path plugins)
	digest [sha256.Size]byte
	kick   chan struct{}

	mu      sync.Mutex
	changed map[string]bool // changes not yet taken by a reload
	timer   *time.Timer
	busy    bool                    // a reload is due or running
	cancel  context.CancelCauseFunc // cancels the running reload's build; nil outside it
}

// errSuperseded cancels a build whose sources changed while it ran.
var errSuperseded = errors.New("devwatch: sources changed during the build")

// Watch starts watching loc's plugins. It returns once every watch is in place; a
// change made after it returns is seen. It fails when the plugins' directories cannot
// be watched. ctx bounds the Watcher's life like Close does.
func Watch(ctx context.Context, loc *location.Location, opts Options) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Report == nil {
		opts.Report = func(Event) {}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("devwatch: %w", err)
	}
	w := &Watcher{loc: loc, opts: opts, fsw: fsw}
	w.ctx, w.cancel = context.WithCancel(ctx)

	configs := map[string]location.PluginConfig{}
	for _, pc := range loc.Config().Plugins {
		configs[pc.Name] = pc
	}
	for _, sup := range loc.Plugins() {
		pc, ok := configs[sup.Name()]
		if !ok || sup.Config().Reattach != nil {
			continue
		}
		p := &watchedPlugin{w: w, sup: sup, name: pc.Name, kick: make(chan struct{}, 1), changed: map[string]bool{}}
		switch {
		case pc.Module != "":
			continue // a locked module version: nothing to watch
		case pc.Source != "":
			if opts.BuildCache == "" {
				w.abort()
				return nil, fmt.Errorf("devwatch: plugin %q is built from source, but Options.BuildCache is not set", pc.Name)
			}
			p.source = pc.Source
			err = w.addTree(pc.Source)
		default:
			p.binary = pc.Path
			p.digest, _ = fileDigest(pc.Path)
			err = fsw.Add(filepath.Dir(pc.Path))
		}
		if err != nil {
			w.abort()
			return nil, fmt.Errorf("devwatch: watch plugin %q: %w", pc.Name, err)
		}
		w.watched = append(w.watched, p)
	}
	w.wg.Go(w.loop)
	for _, p := range w.watched {
		w.wg.Go(p.work)
	}
	return w, nil
}

func (w *Watcher) abort() {
	w.cancel()
	w.fsw.Close()
}

// Close stops watching. A reload in progress is cancelled (a build is killed; a
// generation being started is stopped) and Close waits for it. Idempotent.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.cancel()
		w.closeErr = w.fsw.Close()
		w.wg.Wait()
		for _, p := range w.watched {
			p.mu.Lock()
			if p.timer != nil {
				p.timer.Stop()
			}
			p.mu.Unlock()
		}
	})
	return w.closeErr
}

// addTree watches dir and every directory below it but hidden ones and testdata.
func (w *Watcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path != dir && errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != dir && ignoredDir(d.Name()) {
			return filepath.SkipDir
		}
		return w.fsw.Add(path)
	})
}

func ignoredDir(name string) bool {
	return strings.HasPrefix(name, ".") || name == "testdata"
}

// ignoredFile reports files that never change a build: hidden files, editor
// temporaries and backups, tests.
func ignoredFile(name string) bool {
	switch {
	case strings.HasPrefix(name, "."), strings.HasPrefix(name, "#"),
		strings.HasSuffix(name, "~"), strings.HasSuffix(name, ".swp"), strings.HasSuffix(name, ".swx"),
		strings.HasSuffix(name, ".tmp"), strings.HasSuffix(name, "___jb_tmp___"), strings.HasSuffix(name, "___jb_old___"),
		strings.HasSuffix(name, "_test.go"), name == "4913":
		return true
	}
	return false
}

// loop routes file events to plugins.
func (w *Watcher) loop() {
	for {
		select {
		case <-w.ctx.Done():
			return
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.opts.Logger.Warn("watching plugin files", "location", w.loc.ID(), "error", err)
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			w.route(ev)
		}
	}
}

func (w *Watcher) route(ev fsnotify.Event) {
	if ev.Op == fsnotify.Chmod {
		return
	}
	name := filepath.Base(ev.Name)
	for _, p := range w.watched {
		switch {
		case p.binary != "":
			if ev.Name == p.binary {
				p.touch(name)
			}
		case within(p.source, ev.Name):
			rel, _ := filepath.Rel(p.source, ev.Name)
			if hiddenPath(rel) {
				continue // inside a directory that is not watched
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
					if ignoredDir(name) {
						continue
					}
					if err := w.addTree(ev.Name); err != nil {
						w.opts.Logger.Warn("watching a new directory", "dir", ev.Name, "error", err)
					}
					p.touch(filepath.ToSlash(rel) + "/")
					continue
				}
			}
			if !ignoredFile(name) && !ignoredDir(name) {
				p.touch(filepath.ToSlash(rel))
			}
		}
	}
}

// hiddenPath reports a path (relative to a source root) inside an ignored directory.
func hiddenPath(rel string) bool {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	return slices.ContainsFunc(parts[:len(parts)-1], ignoredDir)
}

func within(root, path string) bool {
	return path == root || strings.HasPrefix(path, root+string(filepath.Separator))
}

// touch records a change. A source plugin that is not reloading is kicked at once;
// otherwise the change cancels a build in progress and (re)starts the debounce timer,
// whose kick runs the next reload.
func (p *watchedPlugin) touch(file string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changed[file] = true
	if !p.busy && p.source != "" {
		p.busy = true
		p.kickNow()
		return
	}
	p.busy = true
	if p.cancel != nil {
		p.cancel(errSuperseded)
		p.cancel = nil
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(p.w.opts.Debounce, p.kickNow)
		return
	}
	p.timer.Reset(p.w.opts.Debounce)
}

func (p *watchedPlugin) kickNow() {
	select {
	case p.kick <- struct{}{}:
	default: // a reload is already due; it will take these changes too
	}
}

// work runs the plugin's reloads, one at a time.
func (p *watchedPlugin) work() {
	for {
		select {
		case <-p.w.ctx.Done():
			return
		case <-p.kick:
		}
		ctx, cancel := context.WithCancelCause(p.w.ctx)
		p.mu.Lock()
		changed := p.takeChanged()
		if p.source != "" {
			p.cancel = cancel // only a build is cancelled; a binary's start is not
		}
		p.mu.Unlock()
		if len(changed) == 0 {
			cancel(nil) // a kick whose changes an earlier reload already took
			p.settle(nil)
			continue
		}
		ev, ok := p.reload(ctx, changed)
		superseded := errors.Is(context.Cause(ctx), errSuperseded)
		cancel(nil)
		if superseded {
			// Not reported: the changes made during the build start a new one, and
			// it reports these files too.
			p.settle(changed)
			continue
		}
		if ok && p.w.ctx.Err() == nil {
			p.w.opts.Report(ev)
		}
		p.settle(nil)
	}
}

// takeChanged empties the change set and returns what to report, sorted: a file that
// no longer exists and is not a Go or module file was an editor's temporary (written,
// then renamed onto the real file, which is reported itself), not a change. The
// caller holds p.mu.
func (p *watchedPlugin) takeChanged() []string {
	changed := slices.Sorted(maps.Keys(p.changed))
	p.changed = map[string]bool{}
	root := p.source
	if root == "" {
		return changed
	}
	return slices.DeleteFunc(changed, func(rel string) bool {
		if strings.HasSuffix(rel, "/") || strings.HasSuffix(rel, ".go") || slices.Contains([]string{"go.mod", "go.sum", "go.work"}, path.Base(rel)) {
			return false
		}
		_, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
		return errors.Is(err, fs.ErrNotExist)
	})
}

// settle ends a reload attempt: files it leaves to the next reload go back into the
// change set, and the plugin is idle again unless changes are waiting (their timer
// kicks the next reload).
func (p *watchedPlugin) settle(carry []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cancel = nil
	for _, f := range carry {
		p.changed[f] = true
	}
	p.busy = len(p.changed) > 0
}

// reload rebuilds (source plugins) and reloads the plugin. It reports false when
// there was nothing to do (a binary plugin whose binary did not change).
func (p *watchedPlugin) reload(ctx context.Context, changed []string) (Event, bool) {
	ev := Event{Location: p.w.loc.ID(), Plugin: p.name, Changed: changed, Serving: serving(p.sup)}
	cfg := p.sup.Config()
	// What the serving generation defines, taken before the build so that nothing
	// between the build and the start waits for it.
	before := p.definitions()
	if p.source != "" {
		begin := time.Now()
		path, built, err := location.BuildPlugin(ctx, p.w.opts.BuildCache, p.name, p.source)
		ev.Build, ev.Built = time.Since(begin), built || err != nil // a failed build was no cache hit
		// From here on, changes wait for this reload instead of cancelling it.
		p.mu.Lock()
		p.cancel = nil
		p.mu.Unlock()
		if err != nil {
			ev.Err = err
			return ev, true
		}
		if path == cfg.Path {
			ev.Unchanged = true
			return ev, true
		}
		cfg.Path = path
	} else {
		digest, err := fileDigest(p.binary)
		if err != nil || digest == p.digest {
			return ev, false // gone for now (being replaced), or the same bytes
		}
		p.digest = digest
	}
	r, err := p.sup.Reload(ctx, cfg)
	ev.Reload, ev.Err, ev.Serving = r, err, serving(p.sup)
	if err == nil {
		ev.ToolsChanged = diff(before, p.definitions())
	}
	return ev, true
}

func serving(sup *plugins.Supervisor) uint64 {
	if inst := sup.Current(); inst != nil {
		return inst.Generation()
	}
	return 0
}

// definitions returns the Location's tool definitions by name, encoded.
func (p *watchedPlugin) definitions() map[string]string {
	q, err := p.w.loc.Prepare()
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, d := range q.Definitions() {
		data, _ := json.Marshal(d)
		out[d.Name] = string(data)
	}
	return out
}

func diff(before, after map[string]string) []string {
	var names []string
	for name, def := range before {
		if after[name] != def {
			names = append(names, name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func fileDigest(path string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	f, err := os.Open(path)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	h.Sum(sum[:0])
	return sum, nil
}

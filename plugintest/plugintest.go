package plugintest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/fsys"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// closeTimeout bounds the cleanup's close. A plugin is killed after its stop grace
// well before this; it only guards against a test hanging for ever.
const closeTimeout = time.Minute

// Options configure the plugin that [Start] launches. The zero value is a plugin
// with no options, an empty environment and a fresh temporary Location.
type Options struct {
	// Options is the plugin's activation options: what the "options" object of the
	// plugin's entry in a Location config would hold. It must be a JSON object, or
	// nil for none.
	Options json.RawMessage
	// Env is the plugin's whole environment, as the "env" object of a Location
	// config: the test process's environment is not inherited.
	Env map[string]string
	// Directory is the Location directory, passed to the plugin's activation and
	// used as its working directory. Default: a new t.TempDir().
	Directory string
	// Trusted gives the plugin the Location's FileSystem (rooted at Directory) and
	// Permission services, as "trusted": true in a Location config does. Untrusted
	// (the default), the host asserts permission before each call instead.
	Trusted bool
	// Permission is the Location's rule list; nil allows every request. Asker
	// answers "ask" rules; nil means nobody to ask (a deny).
	Permission []permission.Rule
	Asker      permission.Asker
}

// Host is a real toolhost host running one plugin in a temporary Location: a
// registry with its own managed output storage, a Location placement, and the
// plugin's process under the plugins package's supervisor.
//
// [Start] makes one and the test's cleanup closes it; there is nothing to close by
// hand. A Host is safe for concurrent use: calls may settle from many goroutines.
type Host struct {
	t   testing.TB
	reg *registry.Registry
	dir string

	root  *scope.Scope
	sup   *plugins.Supervisor
	calls atomic.Uint64

	mu   sync.Mutex
	pids []int // every plugin process seen, checked for exit at cleanup
}

// Build compiles the Go main package at dir (for example "." from the plugin's own
// test, which runs in the package directory) and returns the binary's absolute path,
// whose base name is the package directory's. It builds the way a Location builds a
// plugin given as "source": into toolhost's content-addressed build cache
// ($TOOLHOST_BUILD_CACHE, else $XDG_CACHE_HOME/toolhost/build, else
// ~/.cache/toolhost/build, else a directory under the system's temporary directory),
// keyed by the package's sources, its module's go.mod and go.sum and the go version.
// So every test (and every later run) with unchanged sources gets the same binary at
// once: call Build from each test, or once in TestMain through [BuildOnce]. A failed
// build fails the test with the compiler's output.
//
// Build blocks until the build (or the cache lookup) finishes.
func Build(t testing.TB, dir string) string {
	t.Helper()
	path, err := build(t.Context(), dir)
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	return path
}

// BuildOnce is [Build] for TestMain, where there is no testing.TB: it returns the
// binary's path or the build's error (a *location.BuildError quotes the compiler's
// output).
func BuildOnce(dir string) (string, error) { return build(context.Background(), dir) }

func build(ctx context.Context, dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("build %s: %w", dir, err)
	}
	cache, err := location.BuildCacheDir("", os.Environ())
	if err != nil {
		cache = filepath.Join(os.TempDir(), "toolhost-plugintest-build")
	}
	path, _, err := location.BuildPlugin(ctx, cache, filepath.Base(abs), abs)
	return path, err
}

// Start launches the plugin binary at path (see [Build]) the way a Location does:
// through plugins.Supervise, into a fresh registry (managed output storage in a
// t.TempDir()) and a Location placement for opts.Directory. It returns once the
// plugin's activation has returned, so the tools it registered there are
// advertised. A plugin that fails to start or to activate fails the test with the
// reason and the tail of the plugin's stderr.
//
// Start registers a cleanup on t that closes the host — in-flight calls end as
// interruptions, the plugin's registrations are removed and its process is stopped
// — and then fails the test if any plugin process it saw still exists. The
// plugin's logs go to t.Log. Start must be called from the test's goroutine.
func Start(t testing.TB, path string, opts Options) *Host {
	t.Helper()
	h, err := TryStart(t, path, opts)
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	return h
}

// TryStart is [Start] for a test that asserts how a plugin fails to start or
// activate: instead of failing the test it returns the error, a
// *plugins.StartError carrying the plugin's message and the tail of its stderr
// (errors.As finds it). Misuse (a bad Options value) still fails the test, and the
// cleanup still checks that no plugin process is left.
func TryStart(t testing.TB, path string, opts Options) (*Host, error) {
	t.Helper()
	bin, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("plugintest: plugin binary %s: %v", path, err)
	}
	if opts.Options != nil && !json.Valid(opts.Options) {
		t.Fatalf("plugintest: Options.Options is not valid JSON: %s", opts.Options)
	}
	dir := opts.Directory
	if dir == "" {
		dir = t.TempDir()
	}
	if dir, err = canonical(dir); err != nil {
		t.Fatalf("plugintest: Location directory: %v", err)
	}
	storage, err := registry.OpenStorage(t.TempDir(), registry.StorageOptions{})
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	reg, err := registry.New(registry.Options{Storage: storage})
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	closeLocation, err := reg.OpenLocation(dir, registry.Limits{})
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}

	h := &Host{t: t, reg: reg, dir: dir, root: scope.New(context.Background())}
	logs := &testLog{t: t}
	t.Cleanup(func() {
		defer logs.stop() // t.Log must not be called once the test has finished
		h.close(closeLocation)
	})

	name := filepath.Base(bin)
	cfg := plugins.Config{
		Name:    name,
		Path:    bin,
		Env:     opts.Env,
		Options: opts.Options,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:        "plugin." + name,
			Level:       hclog.Info,
			Output:      logs,
			DisableTime: true,
		}),
	}
	rules := opts.Permission
	if rules == nil {
		rules = []permission.Rule{{Action: "*", Resource: "*", Effect: permission.Allow}}
	}
	perm, err := permission.New(permission.Options{Rules: rules, Asker: opts.Asker})
	if err != nil {
		t.Fatalf("plugintest: %v", err)
	}
	t.Cleanup(perm.Close)
	if opts.Trusted {
		files, err := fsys.New(dir)
		if err != nil {
			t.Fatalf("plugintest: %v", err)
		}
		t.Cleanup(func() { files.Close() })
		cfg.Services = &plugins.Services{FS: files, Permission: perm}
	} else {
		source := "plugin:" + cfg.Name // as a Location names it, so rules with a "source" apply alike
		cfg.Authorize = func(ctx context.Context, tool string, inv sdk.Invocation) error {
			return perm.AssertToolFrom(ctx, source, tool, inv)
		}
	}
	target := plugins.Target{Registry: reg, Location: dir, Directory: dir}
	sup, err := plugins.Supervise(t.Context(), h.root, cfg, target, supervise.Budget{})
	if err != nil {
		return nil, err
	}
	h.sup = sup
	h.track()
	return h, nil
}

// canonical returns dir absolute with its symlinks evaluated, as a Location is.
func canonical(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// close ends everything Start made and checks that no plugin process survived.
func (h *Host) close(closeLocation func()) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := h.root.Close(ctx); err != nil {
		h.t.Errorf("plugintest: close host: %v", err)
	}
	closeLocation()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, pid := range h.pids {
		if err := exists(pid); err != nil {
			h.t.Errorf("plugintest: %v after the host closed", err)
		}
	}
}

// exists reports a process with id pid, or one in the process group it led, as an
// error; nil means both are gone.
func exists(pid int) error {
	// EPERM would be a process of another user that reused the id: not ours.
	if err := syscall.Kill(pid, 0); err == nil {
		return fmt.Errorf("plugin process %d still exists", pid)
	}
	if err := syscall.Kill(-pid, 0); err == nil {
		return fmt.Errorf("a process in plugin process group %d still exists", pid)
	}
	return nil
}

// track records the current plugin process, which changes when a crashed plugin
// is restarted.
func (h *Host) track() {
	inst := h.sup.Current()
	if inst == nil {
		return
	}
	pid := inst.PID()
	h.mu.Lock()
	defer h.mu.Unlock()
	if pid != 0 && !slices.Contains(h.pids, pid) {
		h.pids = append(h.pids, pid)
	}
}

// Registry returns the host's registry, for what the other methods do not cover:
// preparing a Request to settle on later (to see how a stale capture settles),
// adding hooks, or registering application tools beside the plugin's.
func (h *Host) Registry() *registry.Registry { return h.reg }

// Location returns the Location's canonical directory. It is also the Location's
// placement id in the registry (see [Host.Registry]).
func (h *Host) Location() string { return h.dir }

// Definitions returns the tool definitions a fresh Request would advertise now,
// sorted by name: the plugin's current registrations. The slice is the caller's.
func (h *Host) Definitions() []registry.Definition {
	h.t.Helper()
	q, err := h.reg.Prepare(h.dir)
	if err != nil {
		h.t.Errorf("plugintest: prepare a request: %v", err)
		return nil
	}
	return slices.Clone(q.Definitions())
}

// Call settles one call of the tool name on a fresh Request, with a generated
// Invocation (a session id from the test's name and call ids unique within the
// Host). input is encoded with encoding/json, except that a json.RawMessage or a
// []byte is used as is and nil means no input ({}); so a Go string is sent as a
// JSON string, and literal JSON goes in a json.RawMessage.
//
// It returns what [registry.Request.Settle] returns: a Settlement for every
// model-visible result — check its Outcome — and an error for an interruption
// (errors.Is(err, context.Canceled)), a defect or an operational failure such as a
// crash. Cancelling ctx interrupts the call.
func (h *Host) Call(ctx context.Context, name string, input any) (*registry.Settlement, error) {
	var raw json.RawMessage
	switch v := input.(type) {
	case nil:
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		data, err := json.Marshal(input)
		if err != nil {
			return nil, fmt.Errorf("plugintest: encode the input of %q: %w", name, err)
		}
		raw = data
	}
	n := h.calls.Add(1)
	return h.Settle(ctx, registry.Call{
		Name:  name,
		Input: raw,
		Invocation: sdk.Invocation{
			SessionID:          "plugintest:" + h.t.Name(),
			Agent:              "plugintest",
			AssistantMessageID: fmt.Sprintf("plugintest-message-%d", n),
			ToolCallID:         fmt.Sprintf("plugintest-call-%d", n),
		},
	})
}

// Settle settles call on a fresh Request, with full control over the call: its
// Invocation as given, and its Progress function, which receives the plugin's
// progress events while the call runs. Results are as for [Host.Call].
func (h *Host) Settle(ctx context.Context, call registry.Call) (*registry.Settlement, error) {
	q, err := h.reg.Prepare(h.dir)
	if err != nil {
		return nil, fmt.Errorf("plugintest: prepare a request: %w", err)
	}
	defer h.track() // a crash during the call restarts the plugin as a new process
	return q.Settle(ctx, call)
}

// testLog writes the host's log lines to t.Log until stopped.
type testLog struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
}

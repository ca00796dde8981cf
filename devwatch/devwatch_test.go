//go:build unix

package devwatch_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/devwatch"
	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

var (
	// module is a temporary Go module (requiring this one through a replace) in
	// which the tests write plugin sources.
	module string
	// cache is the build cache every test shares.
	cache string
)

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "devwatch-test-")
	if err != nil {
		panic(err)
	}
	module = filepath.Join(tmp, "mod")
	cache = filepath.Join(tmp, "cache")
	if err := makeModule(module); err != nil {
		fmt.Fprintln(os.Stderr, "set up:", err)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(tmp)
		os.Exit(code)
	}))
}

// makeModule writes a module that can build plugins against this repository's sdk.
func makeModule(dir string) error {
	root, err := filepath.Abs("..")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf("module example.com/reloadtest\n\ngo 1.26\n\nrequire github.com/toolhost/toolhost v0.0.0\n\nreplace github.com/toolhost/toolhost => %s\n", root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		return err
	}
	if err := writePlugin(filepath.Join(dir, "seed"), 0, "Reports the version."); err != nil {
		return err
	}
	cmd := exec.Command("go", "mod", "tidy")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go mod tidy: %v\n%s", err, out)
	}
	return os.RemoveAll(filepath.Join(dir, "seed"))
}

// source is the test plugin: work (the same contract in every version; it takes a
// millisecond, so calls are in flight during swaps) and meta (whose description is
// the contract some edits change). Both return the version.
const source = `package main

import (
	"context"
	"time"

	"github.com/toolhost/toolhost/sdk"
)

const version = %q

type workIn struct {
	N int ` + "`json:\"n\"`" + `
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"work": sdk.NewTool("Does some work.", func(ctx context.Context, _ sdk.Invocation, in workIn) (string, error) {
				time.Sleep(time.Millisecond) // a call lasts: the concurrent calls overlap the reloads
				return version, nil
			}),
			"meta": sdk.NewTool(%q, func(context.Context, sdk.Invocation, struct{}) (string, error) {
				return version, nil
			}),
		})
		return err
	}))
}
`

func writePlugin(dir string, version int, metaDescription string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "main.go"), fmt.Sprintf(source, strconv.Itoa(version), metaDescription))
}

// writeFile replaces path's content the way editors do: write a temporary, rename.
func writeFile(path, content string) error {
	save, err := stageFile(path, content)
	if err != nil {
		return err
	}
	return save()
}

// stageFile writes content to path's temporary file and returns the rename that
// puts it in place (the moment the change appears).
func stageFile(path, content string) (save func() error, err error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return nil, err
	}
	return func() error { return os.Rename(tmp, path) }, nil
}

// env is one Location with one plugin, watched, with its reload events.
type env struct {
	t      testing.TB
	dir    string // plugin source directory
	loc    *location.Location
	reg    *registry.Registry
	w      *devwatch.Watcher
	events chan devwatch.Event
	mu     sync.Mutex
	pids   map[int]bool
}

// newEnv writes the plugin (version 0) into a fresh source directory, activates a
// Location that builds it from source, and watches it.
func newEnv(t testing.TB, debounce time.Duration) *env {
	t.Helper()
	src, err := os.MkdirTemp(module, "plugin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(src) })
	if err := writePlugin(src, 0, "Reports the version."); err != nil {
		t.Fatal(err)
	}
	ws, err := location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(ws, ".toolhost"), 0o755)
	cfg := fmt.Sprintf(`{"plugins": [{"name": "p", "source": %q, "stop_grace": "5s"}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, src)
	if err := os.WriteFile(filepath.Join(ws, location.ConfigPath), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := hosttest.Registry(t, registry.Options{})
	root := scope.New(context.Background())
	loc, err := location.Activate(t.Context(), root, ws, location.Options{Registry: reg, BuildCache: cache, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: src, loc: loc, reg: reg, events: make(chan devwatch.Event, 64), pids: map[int]bool{}}
	e.track()
	e.w, err = devwatch.Watch(context.Background(), loc, devwatch.Options{
		BuildCache: cache,
		Debounce:   debounce,
		Report:     func(ev devwatch.Event) { e.track(); e.events <- ev },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.w.Close(); err != nil {
			t.Errorf("close watcher: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := root.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		for pid := range e.pids {
			if !gone(pid) {
				t.Errorf("plugin process %d left running", pid)
			}
		}
	})
	return e
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// track remembers the serving plugin process, to check at the end that it is gone.
func (e *env) track() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if inst := e.loc.Plugins()[0].Current(); inst != nil {
		e.pids[inst.PID()] = true
	}
}

// next waits for the next reload event.
func (e *env) next() devwatch.Event {
	e.t.Helper()
	select {
	case ev := <-e.events:
		return ev
	case <-time.After(2 * time.Minute):
		e.t.Fatal("no reload event")
		return devwatch.Event{}
	}
}

// call settles name on a fresh Request and returns the text.
func (e *env) call(name string) string {
	e.t.Helper()
	q, err := e.loc.Prepare()
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := q.Settle(e.t.Context(), registry.Call{Name: name, Input: []byte(`{"n":1}`), Invocation: sdk.Invocation{ToolCallID: "c"}})
	if err != nil || s.Outcome != registry.Completed {
		e.t.Fatalf("%s: %+v, %v", name, s, err)
	}
	return s.Text()
}

func TestReloadsUnderConcurrentCalls(t *testing.T) {
	const reloads, callers = 20, 4
	e := newEnv(t, 20*time.Millisecond)
	goroutines := settledGoroutines()

	var (
		stop        atomic.Bool
		calls       atomic.Int64
		unavailable atomic.Int64
		wg          sync.WaitGroup
		failMu      sync.Mutex
		failures    []string
	)
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	for g := range callers {
		wg.Go(func() {
			var q *registry.Request
			for i := 0; !stop.Load(); i++ {
				if i%10 == 0 { // Requests live across reloads, as a model request does
					var err error
					if q, err = e.loc.Prepare(); err != nil {
						fail("prepare: %v", err)
						return
					}
				}
				name, input := "work", []byte(`{"n":1}`)
				if i%5 == 4 {
					name, input = "meta", nil
				}
				s, err := q.Settle(context.Background(), registry.Call{Name: name, Input: input, Invocation: sdk.Invocation{ToolCallID: fmt.Sprintf("g%d-%d", g, i)}})
				calls.Add(1)
				switch {
				case err != nil:
					fail("%s: %v", name, err)
				case s.Outcome == registry.Unavailable && name == "meta":
					unavailable.Add(1) // its contract changed since the Request was prepared
				case s.Outcome != registry.Completed:
					fail("%s: %s: %s", name, s.Outcome, s.Text())
				}
			}
		})
	}

	description := "Reports the version."
	for i := 1; i <= reloads; i++ {
		contract := i%5 == 0
		if contract {
			description = fmt.Sprintf("Reports the version (edition %d).", i)
		}
		before, err := e.loc.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		if err := writePlugin(e.dir, i, description); err != nil {
			t.Fatal(err)
		}
		ev := e.next()
		if ev.Err != nil || ev.Unchanged || !ev.Built {
			t.Fatalf("reload %d: %v", i, ev)
		}
		if want := onlyIf(contract, "meta"); strings.Join(ev.ToolsChanged, ",") != want {
			t.Errorf("reload %d: tools changed %q, want %q", i, ev.ToolsChanged, want)
		}
		if !gone(ev.Reload.OldPID) {
			t.Fatalf("reload %d: generation %d's process %d still exists after the swap", i, ev.Reload.From, ev.Reload.OldPID)
		}
		if got := e.call("work"); got != strconv.Itoa(i) {
			t.Fatalf("reload %d: a fresh Request runs version %s", i, got)
		}
		// A Request prepared before the reload runs work on the new generation; its
		// meta settles unavailable exactly when meta's contract changed.
		s, err := before.Settle(t.Context(), registry.Call{Name: "work", Input: []byte(`{"n":1}`)})
		if err != nil || s.Text() != strconv.Itoa(i) {
			t.Fatalf("reload %d: captured work: %+v, %v", i, s, err)
		}
		s, err = before.Settle(t.Context(), registry.Call{Name: "meta"})
		if want := map[bool]registry.Outcome{false: registry.Completed, true: registry.Unavailable}[contract]; err != nil || s.Outcome != want {
			t.Fatalf("reload %d: captured meta: %+v, %v; want %s", i, s, err, want)
		}
		t.Logf("%s", ev)
	}
	stop.Store(true)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("%d calls during %d reloads; %d meta calls settled unavailable", calls.Load(), reloads, unavailable.Load())
	if calls.Load() < reloads*callers {
		t.Errorf("only %d calls ran", calls.Load())
	}
	if n := len(e.loc.Plugins()); n != 1 {
		t.Fatal(n)
	}
	if g := e.loc.Plugins()[0].Current().Generation(); g != reloads+1 {
		t.Errorf("generation %d after %d reloads", g, reloads)
	}
	// Every reload's goroutines are gone (the callers have returned).
	if n := settledGoroutines(); n > goroutines+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines, %d before the reloads:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
}

func onlyIf(cond bool, s string) string {
	if cond {
		return s
	}
	return ""
}

// settledGoroutines returns the number of goroutines once it has held still for two
// seconds: a plugin dials its Tools capability a second after an activation that
// returned its registrations, which adds the connection's goroutines then.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for still := 0; still < 10; {
		time.Sleep(200 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			still++
		} else {
			n, still = m, 0
		}
	}
	return n
}

func TestBrokenEditKeepsServing(t *testing.T) {
	e := newEnv(t, 20*time.Millisecond)
	if err := writeFile(filepath.Join(e.dir, "main.go"), "package main\n\nfunc main() { undefinedThing() }\n"); err != nil {
		t.Fatal(err)
	}
	ev := e.next()
	var berr *location.BuildError
	if !errors.As(ev.Err, &berr) || !strings.Contains(berr.Output, "undefinedThing") {
		t.Fatalf("broken edit: %v; want a build error quoting the compiler", ev)
	}
	line := ev.String()
	if !strings.Contains(line, "FAILED, generation 1 keeps serving") || !strings.Contains(line, "undefinedThing") {
		t.Errorf("report line:\n%s", line)
	}
	if got := e.call("work"); got != "0" {
		t.Fatalf("after the broken edit the old generation answers %q", got)
	}
	if err := writePlugin(e.dir, 7, "Reports the version."); err != nil {
		t.Fatal(err)
	}
	if ev := e.next(); ev.Err != nil || ev.Reload.From != 1 || ev.Reload.To != 2 {
		t.Fatalf("good edit after the broken one: %v", ev)
	}
	if got := e.call("work"); got != "7" {
		t.Fatalf("after recovering: %q", got)
	}
}

func TestSingleChangeReloadsWithoutDebounce(t *testing.T) {
	// A debounce no test would wait for: a save to an idle plugin must not wait for it.
	e := newEnv(t, time.Hour)
	if err := writePlugin(e.dir, 5, "Reports the version."); err != nil {
		t.Fatal(err)
	}
	if ev := e.next(); ev.Err != nil || ev.Reload.To != 2 {
		t.Fatalf("single change: %v", ev)
	}
	if got := e.call("work"); got != "5" {
		t.Fatalf("after the reload: %q", got)
	}
}

func TestChangeDuringBuildRestartsIt(t *testing.T) {
	e := newEnv(t, 20*time.Millisecond)
	main := filepath.Join(e.dir, "main.go")
	// A broken state, replaced while its build runs: that build is cancelled and never
	// reported; the final state is built and reported with both changes. (The import
	// makes the broken build take long enough to be seen running.)
	if err := writeFile(main, "package main\n\nimport _ \"github.com/toolhost/toolhost/sdk\"\n\nfunc main() { undefinedThing() }\n"); err != nil {
		t.Fatal(err)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	proctest.Until(t, func() bool { return len(proctest.Children(goCmd)) > 0 }) // the broken build runs
	if err := writeFile(filepath.Join(e.dir, "notes.txt"), "n"); err != nil {
		t.Fatal(err)
	}
	if err := writePlugin(e.dir, 9, "Reports the version."); err != nil {
		t.Fatal(err)
	}
	ev := e.next()
	if ev.Err != nil || ev.Reload.From != 1 || ev.Reload.To != 2 {
		t.Fatalf("after the burst: %v", ev)
	}
	if got := strings.Join(ev.Changed, ","); got != "main.go,notes.txt" {
		t.Errorf("changed %q, want both files", got)
	}
	if got := e.call("work"); got != "9" {
		t.Fatalf("after the reload: %q", got)
	}
	select {
	case ev := <-e.events:
		t.Fatalf("a second report: %v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestOnlyRealChangesReload(t *testing.T) {
	e := newEnv(t, 20*time.Millisecond)
	main := filepath.Join(e.dir, "main.go")
	data, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	// Files that never change the build make no event; a rewrite with the same bytes
	// builds to the binary already serving and reloads nothing.
	os.MkdirAll(filepath.Join(e.dir, "testdata"), 0o755)
	os.WriteFile(filepath.Join(e.dir, "testdata", "x.txt"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(e.dir, ".hidden"), []byte("x"), 0o644)
	if err := writeFile(main, string(data)); err != nil {
		t.Fatal(err)
	}
	ev := e.next()
	if ev.Err != nil || !ev.Unchanged || strings.Join(ev.Changed, ",") != "main.go" {
		t.Fatalf("same bytes: %v (changed %q)", ev, ev.Changed)
	}
	if g := e.loc.Plugins()[0].Current().Generation(); g != 1 {
		t.Fatalf("generation %d after an unchanged rebuild", g)
	}
	// A new package directory is watched as soon as it appears.
	sub := filepath.Join(e.dir, "sub")
	os.Mkdir(sub, 0o755)
	ev = e.next()
	if ev.Err != nil || !strings.Contains(strings.Join(ev.Changed, ","), "sub/") {
		t.Fatalf("new directory: %v (changed %q)", ev, ev.Changed)
	}
	os.WriteFile(filepath.Join(sub, "doc.txt"), []byte("notes"), 0o644)
	ev = e.next()
	if ev.Err != nil || strings.Join(ev.Changed, ",") != "sub/doc.txt" || ev.Reload.To == 0 {
		t.Fatalf("file in the new directory: %v (changed %q)", ev, ev.Changed)
	}
	// An editor's save through a temporary name reports the file it saved.
	tmp := filepath.Join(sub, "doc.txt.tmp-4242")
	os.WriteFile(tmp, []byte("more notes"), 0o644)
	os.Rename(tmp, filepath.Join(sub, "doc.txt"))
	ev = e.next()
	if strings.Join(ev.Changed, ",") != "sub/doc.txt" {
		t.Fatalf("save through a temporary: changed %q, want only the saved file", ev.Changed)
	}
}

func TestBinaryPluginReload(t *testing.T) {
	// Two builds of the plugin, to swap in as the binary.
	var bins [2]string
	for i := range bins {
		src, err := os.MkdirTemp(module, "bin-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(src)
		writePlugin(src, 100+i, "Reports the version.")
		bins[i], _, err = location.BuildPlugin(t.Context(), cache, "p", src)
		if err != nil {
			t.Fatal(err)
		}
	}
	binDir := t.TempDir()
	bin := filepath.Join(binDir, "p")
	copyFile(t, bins[0], bin)

	ws, _ := location.Canonicalize(t.TempDir())
	os.MkdirAll(filepath.Join(ws, ".toolhost"), 0o755)
	os.WriteFile(filepath.Join(ws, location.ConfigPath), []byte(fmt.Sprintf(`{"plugins": [{"name": "p", "path": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, bin)), 0o644)
	reg := hosttest.Registry(t, registry.Options{})
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	loc, err := location.Activate(t.Context(), root, ws, location.Options{Registry: reg, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan devwatch.Event, 8)
	w, err := devwatch.Watch(t.Context(), loc, devwatch.Options{Debounce: 20 * time.Millisecond, Report: func(ev devwatch.Event) { events <- ev }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := loc.Plugins()[0].Current().PID()

	// Touching the binary without changing it reloads nothing; replacing it does.
	now := time.Now()
	os.Chtimes(bin, now, now)
	copyFile(t, bins[1], bin)
	ev := <-events
	if ev.Err != nil || ev.Reload.To != 2 || ev.Build != 0 || !gone(first) {
		t.Fatalf("binary replaced: %v", ev)
	}
	q, _ := loc.Prepare()
	s, err := q.Settle(t.Context(), registry.Call{Name: "work", Input: []byte(`{"n":1}`)})
	if err != nil || s.Text() != "101" {
		t.Fatalf("after the swap: %+v, %v", s, err)
	}
	if !strings.HasPrefix(ev.String(), "reload p: p changed; start generation 2 ") {
		t.Errorf("report line %q", ev.String())
	}
}

// copyFile replaces dst with src's bytes (through a rename, as a build does).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

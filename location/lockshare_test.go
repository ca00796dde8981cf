package location_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

// helperLock is a host process upgrading one module plugin of the Location
// LOCATION_DIR (LOCATION_UPGRADE names it) with the go environment it was given.
func helperLock() {
	dir := os.Getenv("LOCATION_DIR")
	cfg, err := location.LoadConfig(dir)
	if err == nil {
		_, _, err = location.LockModules(context.Background(), dir, cfg, location.LockOptions{Env: os.Environ(), Upgrade: []string{os.Getenv("LOCATION_UPGRADE")}})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestHostsUpgradingPluginsConcurrentlyKeepBothLocks has two host processes upgrade
// one module plugin each in one Location at the same time: the lock file ends with
// both upgrades.
func TestHostsUpgradingPluginsConcurrentlyKeepBothLocks(t *testing.T) {
	p, goEnv := offlineProxy(t, "v1.0.0")
	dir := workspace(t, obj{"plugins": []obj{
		{"name": "a", "module": greetPackage, "version": "v1", "allow": true},
		{"name": "b", "module": greetPackage, "version": "v1", "allow": true},
	}})
	cfg, err := location.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := location.LockModules(t.Context(), dir, cfg, location.LockOptions{Env: goEnv}); err != nil {
		t.Fatal(err)
	}
	addGreet(t, p, goEnv, "v1.1.0")

	var wg sync.WaitGroup
	for _, name := range []string{"a", "b"} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(goEnv, "LOCATION_HELPER=lock", "LOCATION_DIR="+dir, "LOCATION_UPGRADE="+name)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				t.Errorf("host upgrading %s: %v", name, err)
			}
		})
	}
	wg.Wait()
	lock, err := location.ReadLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if v := lock.Plugins[name].Version; v != "v1.1.0" {
			t.Errorf("plugin %s locked at %q, want the upgrade to v1.1.0", name, v)
		}
	}
}

// helperLockWriter is a host killed while it writes the lock file of the Location
// LOCATION_DIR: it holds the file's lock and has written half a temporary file,
// as filestore's Write does, when it says "mid-write" and waits to be killed.
func helperLockWriter() {
	file := filepath.Join(os.Getenv("LOCATION_DIR"), filepath.FromSlash(location.LockPath))
	l, err := filestore.Lock(file)
	if err == nil {
		var tmp *os.File
		if tmp, err = os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*.tmp"); err == nil {
			_, err = tmp.WriteString(`{"version": 1, "plugins": {"a": `)
		}
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("mid-write")
	defer l.Unlock() // never: the process is killed first
	select {}
}

// TestLockFileWriterKilledIsCleanedAtStart: a host SIGKILLed while it writes a
// Location's lock file leaves it whole; the next activation removes the
// temporary file it left, says so in the log, and makes no lock file of its own
// where there was no temporary file.
func TestLockFileWriterKilledIsCleanedAtStart(t *testing.T) {
	dir := workspace(t, obj{"permission": allowAll})
	l := newEnv(t).activate(t, dir)
	l.Close(t.Context())
	if entries, _ := os.ReadDir(filepath.Join(dir, ".toolhost")); len(entries) != 1 {
		t.Errorf("activation left %v in .toolhost; want config.json alone", entries)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCATION_HELPER=lockwriter", "LOCATION_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	cmd.Process.Kill()
	cmd.Wait()
	if line != "mid-write\n" {
		t.Fatalf("the writer said %q", line)
	}
	temps, _ := filepath.Glob(filepath.Join(dir, ".toolhost", ".*.tmp"))
	if len(temps) != 1 {
		t.Fatalf("the killed writer left %v; want one temporary file", temps)
	}

	e := newEnv(t)
	e.opts.Logger = hclog.New(&hclog.LoggerOptions{Output: e.logs, Level: hclog.Info})
	l = e.activate(t, dir)
	defer l.Close(t.Context())
	if left, _ := filepath.Glob(filepath.Join(dir, ".toolhost", ".*.tmp")); len(left) != 0 {
		t.Errorf("after the next activation %v is left", left)
	}
	if !strings.Contains(e.logs.String(), temps[0]) {
		t.Errorf("the log does not name the removed file %s:\n%s", temps[0], e.logs)
	}
}

// helperBuild is a host building the plugin LOCATION_SOURCE, as "echo", into the
// build cache LOCATION_BUILD_CACHE; it prints the binary's path and whether it
// built it, or the error.
func helperBuild() {
	bin, built, err := location.BuildPlugin(context.Background(), os.Getenv("LOCATION_BUILD_CACHE"), "echo", os.Getenv("LOCATION_SOURCE"))
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(bin, built)
	os.Exit(0)
}

// TestHostsBuildingOnePluginAtOnce: three host processes build one plugin into one
// empty build cache at the same time: one builds it, the others wait for it and
// use its binary, and the cache holds that binary alone.
func TestHostsBuildingOnePluginAtOnce(t *testing.T) {
	cache := t.TempDir()
	var (
		mu   sync.Mutex
		outs []string
		wg   sync.WaitGroup
	)
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "LOCATION_HELPER=build", "LOCATION_BUILD_CACHE="+cache, "LOCATION_SOURCE="+echoSource)
		cmd.Stderr = os.Stderr
		wg.Go(func() {
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("host: %v: %s", err, out)
			}
			mu.Lock()
			outs = append(outs, strings.TrimSpace(string(out)))
			mu.Unlock()
		})
	}
	wg.Wait()
	built := 0
	for _, o := range outs {
		bin, b, _ := strings.Cut(o, " ")
		if bin != strings.Fields(outs[0])[0] {
			t.Errorf("hosts got different binaries: %q", outs)
		}
		if b == "true" {
			built++
		}
	}
	if built != 1 {
		t.Errorf("%d hosts built the plugin, want one: %q", built, outs)
	}
	var files []string
	filepath.WalkDir(cache, func(path string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && !strings.HasSuffix(e.Name(), ".lock") {
			files = append(files, path)
		}
		return nil
	})
	if len(files) != 1 {
		t.Errorf("the cache holds %v, want the binary alone", files)
	}
}

// helperBuildModule is a host building the locked module plugin LOCATION_LOCKED
// (a LockedModule in JSON), as "greet", into the build cache LOCATION_BUILD_CACHE.
func helperBuildModule() {
	var lm location.LockedModule
	err := json.Unmarshal([]byte(os.Getenv("LOCATION_LOCKED")), &lm)
	var (
		bin   string
		built bool
	)
	if err == nil {
		bin, built, err = location.BuildModule(context.Background(), os.Environ(), os.Getenv("LOCATION_BUILD_CACHE"), "greet", lm)
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println(bin, built)
	os.Exit(0)
}

// TestHostsBuildingOneModulePluginAtOnce: three host processes build one locked
// module plugin into one build cache at the same time: one builds it, the others
// wait for it and use its binary.
func TestHostsBuildingOneModulePluginAtOnce(t *testing.T) {
	_, goEnv := offlineProxy(t, "v1.0.0")
	dir := workspace(t, obj{"plugins": []obj{{"name": "greet", "module": greetPackage, "version": "v1", "allow": true}}})
	cfg, err := location.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	lock, _, err := location.LockModules(t.Context(), dir, cfg, location.LockOptions{Env: goEnv})
	if err != nil {
		t.Fatal(err)
	}
	lm, _ := json.Marshal(lock.Plugins["greet"])
	cache := t.TempDir()
	var (
		mu   sync.Mutex
		outs []string
		wg   sync.WaitGroup
	)
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(slices.Clone(goEnv), "LOCATION_HELPER=buildmodule", "LOCATION_BUILD_CACHE="+cache, "LOCATION_LOCKED="+string(lm))
		cmd.Stderr = os.Stderr
		wg.Go(func() {
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("host: %v: %s", err, out)
			}
			mu.Lock()
			outs = append(outs, strings.TrimSpace(string(out)))
			mu.Unlock()
		})
	}
	wg.Wait()
	built := 0
	for _, o := range outs {
		if strings.HasSuffix(o, " true") {
			built++
		}
	}
	if built != 1 {
		t.Errorf("%d hosts built the module plugin, want one: %q", built, outs)
	}
}

// helperActivate is a host activating the Location LOCATION_DIR with its process's
// environment and the build cache LOCATION_BUILD_CACHE, calling its greet tool,
// printing the answer and deactivating it.
func helperActivate() {
	fail := func(err error) {
		fmt.Println(err)
		os.Exit(1)
	}
	st, err := registry.OpenStorage(filepath.Join(os.Getenv("LOCATION_STATE"), "output"), registry.StorageOptions{})
	if err != nil {
		fail(err)
	}
	reg, err := registry.New(registry.Options{Storage: st})
	if err != nil {
		fail(err)
	}
	root := scope.New(context.Background())
	l, err := location.Activate(context.Background(), root, os.Getenv("LOCATION_DIR"), location.Options{
		Registry: reg, BuildCache: os.Getenv("LOCATION_BUILD_CACHE"), StateDir: os.Getenv("LOCATION_STATE"),
	})
	if err != nil {
		fail(err)
	}
	q, err := l.Prepare()
	if err != nil {
		fail(err)
	}
	s, err := q.Settle(context.Background(), registry.Call{Name: "greet", Input: []byte(`{"name":"ada"}`), Invocation: sdk.Invocation{ToolCallID: "c1"}})
	if err != nil {
		fail(err)
	}
	fmt.Println(s.Text())
	if err := root.Close(context.Background()); err != nil {
		fail(err)
	}
	os.Exit(0)
}

// TestHostsActivatingAModulePluginAtOnce: three host processes activate one
// Location whose module plugin is not locked yet, at the same time, with one
// build cache: each resolves, locks, builds and serves it; the lock file ends
// with the one entry, whole, and every host calls the plugin.
func TestHostsActivatingAModulePluginAtOnce(t *testing.T) {
	_, goEnv := offlineProxy(t, "v1.0.0")
	dir := workspace(t, obj{"plugins": []obj{{"name": "greet", "module": greetPackage, "version": "v1", "allow": true}}})
	cache := t.TempDir()
	var wg sync.WaitGroup
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(slices.Clone(goEnv), "LOCATION_HELPER=activate", "LOCATION_DIR="+dir, "LOCATION_BUILD_CACHE="+cache, "LOCATION_STATE="+t.TempDir())
		cmd.Stderr = os.Stderr
		wg.Go(func() {
			out, err := cmd.Output()
			if err != nil || !strings.Contains(string(out), "ada") {
				t.Errorf("host: %v: %s", err, out)
			}
		})
	}
	wg.Wait()
	lock, err := location.ReadLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(lock.Plugins) != 1 || lock.Plugins["greet"].Version != "v1.0.0" {
		t.Errorf("the lock holds %+v; want greet at v1.0.0", lock.Plugins)
	}
	if temps, _ := filepath.Glob(filepath.Join(dir, ".toolhost", ".*.tmp")); len(temps) != 0 {
		t.Errorf("temporary files left: %v", temps)
	}
}

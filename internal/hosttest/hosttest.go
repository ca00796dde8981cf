// Package hosttest has the set-up that tests of several packages share: a registry
// on a storage of its own, a host placement (a registry, an open Location and a root
// scope, all closed when the test ends), test programs built once for a TestMain,
// and what a host holds that a program in a world must not reach.
package hosttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
)

// Registry returns a registry made with opts. Unless opts.Storage is set, its storage
// lives in a temporary directory of t. It fails t if either cannot be made.
func Registry(t testing.TB, opts registry.Options) *registry.Registry {
	t.Helper()
	if opts.Storage == nil {
		st, err := registry.OpenStorage(t.TempDir(), registry.StorageOptions{})
		if err != nil {
			t.Fatal(err)
		}
		opts.Storage = st
	}
	reg, err := registry.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// OpenLocation opens Location id in reg with no limits and closes it when t ends.
func OpenLocation(t testing.TB, reg *registry.Registry, id string) {
	t.Helper()
	release, err := reg.OpenLocation(id, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

// Scope returns a root scope that is closed when t ends, with no deadline: what it
// holds bounds its own stop (a process's stop grace). An error from the close fails t.
func Scope(t testing.TB) *scope.Scope {
	root := scope.New(context.Background())
	t.Cleanup(func() {
		if err := root.Close(context.Background()); err != nil {
			t.Errorf("close the root scope: %v", err)
		}
	})
	return root
}

// Host is one placement of supervised programs: a registry, a Location open in it
// and a root scope to own them.
type Host struct {
	Registry *registry.Registry
	Root     *scope.Scope
	// Location is the Location's id: a temporary directory with no symbolic link
	// in its path.
	Location string
}

// NewHost returns a Host whose registry has opts (see Registry). When t ends its
// root scope is closed first (an error fails t), then its Location; cleanups that
// t registered before NewHost run after both, so a check that no process is left
// belongs before the call.
func NewHost(t testing.TB, opts registry.Options) *Host {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{Registry: Registry(t, opts), Location: dir}
	OpenLocation(t, h.Registry, h.Location)
	h.Root = Scope(t)
	return h
}

// Main runs a package's tests as a TestMain does, with test programs built first:
// for each entry of programs, the Go package at the key (a path like
// "./testdata/fault", relative to the package under test) is built into a
// temporary directory and the value is set to the binary's path. After the tests
// the directory is removed; when they passed, leaked goroutines (goleak) fail
// them. Main exits the process.
func Main(m *testing.M, programs map[string]*string) {
	dir, err := os.MkdirTemp("", "hosttest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "make a directory for the test programs:", err)
		os.Exit(1)
	}
	for pkg, bin := range programs {
		*bin = filepath.Join(dir, filepath.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", *bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build the test program %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// UntilChanged waits until cond holds, for a state that a channel announces: a
// supervisor's Changed or a Location's SourcesChanged, passed as changed, whose
// channel is closed at the next change. It takes that channel before each call of
// cond, so no change between the two is missed. It sets no time limit of its own
// (see proctest.Until) and fails t if t's context ends first.
func UntilChanged(t testing.TB, changed func() <-chan struct{}, cond func() bool) {
	t.Helper()
	for {
		ch := changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-t.Context().Done():
			t.Fatal("the test ended before the condition held")
		}
	}
}

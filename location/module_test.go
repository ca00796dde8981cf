package location_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/modproxy"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

const (
	greetModule  = "example.com/acme/toolhost-greet"
	greetPackage = greetModule + "/cmd/greet"
)

// offlineProxy serves this working tree as the toolhost module and the greet plugin
// module at each of versions, from a directory, and returns it with the go
// environment (a fresh module cache) that reaches nothing else.
func offlineProxy(t *testing.T, versions ...string) (*modproxy.Proxy, []string) {
	t.Helper()
	p := &modproxy.Proxy{Dir: t.TempDir()}
	if err := p.AddToolhost(".."); err != nil {
		t.Fatal(err)
	}
	env, err := modproxy.Env(t.TempDir(), p.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		addGreet(t, p, env, v)
	}
	return p, env
}

func addGreet(t *testing.T, p *modproxy.Proxy, env []string, version string) {
	t.Helper()
	src := t.TempDir()
	if err := modproxy.GreetPlugin(src, greetModule, version); err != nil {
		t.Fatal(err)
	}
	if err := p.AddPlugin(env, greetModule, version, src); err != nil {
		t.Fatal(err)
	}
}

func callGreet(t *testing.T, l *location.Location) string {
	t.Helper()
	q, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	s, err := q.Settle(t.Context(), registry.Call{Name: "greet", Input: []byte(`{"name":"ada"}`), Invocation: sdk.Invocation{ToolCallID: "c1"}})
	if err != nil {
		t.Fatalf("settle greet: %v", err)
	}
	if s.Outcome != registry.Completed {
		t.Fatalf("settle greet: outcome %s: %s", s.Outcome, s.Text())
	}
	return s.Text()
}

// TestModulePlugin installs a plugin from a Go module through an offline file://
// proxy, locks the version its query resolved to, keeps it when a newer one appears,
// upgrades on request, and refuses a module whose zip changed after it was locked.
func TestModulePlugin(t *testing.T) {
	p, goEnv := offlineProxy(t, "v1.0.0")
	// "allow": true is the whole permission setup the plugin needs.
	dir := workspace(t, obj{"plugins": []obj{{"name": "greet", "module": greetPackage, "version": "v1", "allow": true}}})
	e := newEnv(t)
	e.opts.Env = goEnv
	e.opts.BuildCache = t.TempDir()

	l := e.activate(t, dir)
	if got, want := callGreet(t, l), "hello ada from v1.0.0"; got != want {
		t.Fatalf("greet = %q, want %q", got, want)
	}
	closeLocation(t, l)
	lock, err := location.ReadLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := lock.Plugins["greet"]
	if first.Module != greetModule || first.Version != "v1.0.0" || first.Query != "v1" || first.Package != greetPackage ||
		!strings.HasPrefix(first.Hash, "h1:") || !strings.HasPrefix(first.Go, "go1.") {
		t.Fatalf("lock entry = %+v", first)
	}

	t.Run("LockHoldsWhenANewerVersionAppears", func(t *testing.T) {
		addGreet(t, p, goEnv, "v1.1.0")
		l := e.activate(t, dir)
		defer closeLocation(t, l)
		if got, want := callGreet(t, l), "hello ada from v1.0.0"; got != want {
			t.Fatalf("greet = %q, want %q", got, want)
		}
	})

	t.Run("UpgradeResolvesTheQueryAgain", func(t *testing.T) {
		cfg, err := location.LoadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		lock, resolved, err := location.LockModules(t.Context(), dir, cfg, location.LockOptions{Env: goEnv, Upgrade: []string{"greet"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := lock.Plugins["greet"]; got.Version != "v1.1.0" || got.Hash == first.Hash || len(resolved) != 1 {
			t.Fatalf("after upgrade: %+v (resolved %v)", got, resolved)
		}
		l := e.activate(t, dir)
		defer closeLocation(t, l)
		if got, want := callGreet(t, l), "hello ada from v1.1.0"; got != want {
			t.Fatalf("greet = %q, want %q", got, want)
		}
	})

	t.Run("TamperedZipRefused", func(t *testing.T) {
		lock, err := location.ReadLock(dir)
		if err != nil {
			t.Fatal(err)
		}
		locked := lock.Plugins["greet"]
		// Someone re-publishes v1.1.0 with other content; a machine with an empty
		// module cache and build cache fetches it.
		src := t.TempDir()
		if err := modproxy.GreetPlugin(src, greetModule, "v1.1.0 (tampered)"); err != nil {
			t.Fatal(err)
		}
		if err := p.AddPlugin(goEnv, greetModule, "v1.1.0", src); err != nil {
			t.Fatal(err)
		}
		fresh := append(append([]string{}, goEnv...), "GOMODCACHE="+t.TempDir())
		e2 := newEnv(t)
		e2.opts.Env = fresh
		e2.opts.BuildCache = t.TempDir()
		// The Location activates without the plugin: a failed source whose error is
		// the hash mismatch.
		l2, err := location.Activate(t.Context(), e2.root, dir, e2.opts)
		if err != nil {
			t.Fatalf("activate: %v", err)
		}
		for _, st := range l2.Sources() {
			if st.ID == "plugin:greet" {
				if st.State != supervise.Failed {
					t.Fatalf("plugin:greet is %s, want failed", st.State)
				}
				err = st.Err
			}
		}
		var herr *location.ModuleHashError
		if !errors.As(err, &herr) || !errors.Is(err, location.ErrModuleHash) {
			t.Fatalf("source error = %v, want a *ModuleHashError", err)
		}
		t.Log(err)
		if herr.Locked != locked.Hash || herr.Got == locked.Hash || !strings.HasPrefix(herr.Got, "h1:") {
			t.Fatalf("hash error %+v, locked %s", herr, locked.Hash)
		}
		for _, want := range []string{locked.Hash, herr.Got, "plugins upgrade greet"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if err := location.VerifyModule(t.Context(), fresh, "", "greet", locked); !errors.Is(err, location.ErrModuleHash) {
			t.Errorf("verify = %v, want ErrModuleHash", err)
		}
		// The go command refused the download against the lock's hash: the
		// re-published content never entered the module cache.
		modCache := fresh[len(fresh)-1][len("GOMODCACHE="):]
		if _, err := os.Stat(filepath.Join(modCache, greetModule+"@v1.1.0")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("tampered module extracted into the module cache: %v", err)
		}
	})
}

func closeLocation(t *testing.T, l *location.Location) {
	t.Helper()
	if err := l.Close(t.Context()); err != nil {
		t.Errorf("close: %v", err)
	}
}

func TestModuleConfig(t *testing.T) {
	for _, tc := range []struct {
		name, config, want string
	}{
		{"ModuleWithoutVersion", `{"plugins":[{"name":"a","module":"example.com/a"}]}`, `/plugins/0/module: "module" requires "version"`},
		{"VersionWithoutModule", `{"plugins":[{"name":"a","path":"x","version":"v1"}]}`, `/plugins/0/version: "version" requires "module"`},
		{"ModuleAndSource", `{"plugins":[{"name":"a","source":"x","module":"example.com/a","version":"v1"}]}`, `mutually exclusive`},
		{"BadVersion", `{"plugins":[{"name":"a","module":"example.com/a","version":"1.2"}]}`, `/plugins/0/version: invalid version "1.2"`},
		{"AllowOnATrustedPlugin", `{"plugins":[{"name":"a","path":"x","trusted":true,"allow":true}]}`, `/plugins/0/allow: "allow" is for untrusted plugins`},
		{"BadModule", `{"plugins":[{"name":"a","module":"example.com/a b","version":"v1"}]}`, `/plugins/0/module: invalid module`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := location.ParseConfig("/ws", "", []byte(tc.config))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseConfig = %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("AllowShorthandComesFirst", func(t *testing.T) {
		cfg, err := location.ParseConfig("/ws", "", []byte(`{"plugins":[{"name":"a","module":"example.com/a/cmd/a","version":"latest","allow":true}],
			"permission":[{"action":"rm","resource":"*","effect":"deny","source":"plugin:a"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		want := []location.PermissionRule{
			{Action: "*", Resource: "*", Effect: location.EffectAllow, Source: "plugin:a"},
			{Action: "rm", Resource: "*", Effect: location.EffectDeny, Source: "plugin:a"},
		}
		got, _ := json.Marshal(cfg.Permission)
		wantJSON, _ := json.Marshal(want)
		if string(got) != string(wantJSON) || cfg.Plugins[0].Module != "example.com/a/cmd/a" || cfg.Plugins[0].Version != "latest" {
			t.Fatalf("config %+v", cfg)
		}
	})
}

func TestLockFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := &location.Lock{Plugins: map[string]location.LockedModule{"a": {Package: "example.com/a/cmd/a", Query: "v1", Module: "example.com/a", Version: "v1.0.0", Hash: "h1:x=", Go: "go1.26"}}}
	if err := location.WriteLock(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := location.ReadLock(dir)
	if err != nil || got.Plugins["a"] != want.Plugins["a"] {
		t.Fatalf("ReadLock = %+v, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, location.LockPath), []byte(`{"version":2,"plugins":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := location.ReadLock(dir); err == nil || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("ReadLock of format 2 = %v", err)
	}
}

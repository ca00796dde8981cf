package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/internal/modproxy"
	"github.com/toolhost/toolhost/location"
)

// TestPluginsCommands drives `toolhost plugins` over a plugin taken from a Go module
// served by an offline file:// proxy: lock, list, call, upgrade, verify, and verify
// refusing a module re-published with other content. It sets the process
// environment (the go command's), so it is not parallel.
func TestPluginsCommands(t *testing.T) {
	const mod, pkg = "example.com/acme/toolhost-greet", "example.com/acme/toolhost-greet/cmd/greet"
	proxy := &modproxy.Proxy{Dir: t.TempDir()}
	if err := proxy.AddToolhost("../.."); err != nil {
		t.Fatal(err)
	}
	env, err := modproxy.Env(t.TempDir(), proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	// publish serves the greet plugin as version, saying says; edits, file to text to
	// append, change it before it is published.
	publish := func(version, says string, edits ...string) {
		t.Helper()
		src := t.TempDir()
		if err := modproxy.GreetPlugin(src, mod, says); err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(edits); i += 2 {
			f, err := os.OpenFile(filepath.Join(src, edits[i]), os.O_APPEND|os.O_WRONLY, 0)
			if err == nil {
				_, err = f.WriteString(edits[i+1])
				f.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := proxy.AddPlugin(env, mod, version, src); err != nil {
			t.Fatal(err)
		}
	}
	publish("v1.0.0", "v1.0.0")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	t.Setenv(location.BuildCacheEnv, t.TempDir())

	dir := workspace(t, `{"plugins": [{"name": "greet", "module": "`+pkg+`", "version": "latest", "allow": true}]}`)

	r := run(t, "", "plugins", "lock", "--location", dir)
	r.want(t, cli.ExitOK)
	if !strings.Contains(r.stdout, "greet: "+mod+"@v1.0.0 h1:") {
		t.Fatalf("lock printed %q", r.stdout)
	}

	r = run(t, "", "plugins", "list", "--location", dir, "--json")
	r.want(t, cli.ExitOK)
	var listed struct {
		Plugins []struct {
			Name, Kind, Source, Query, Version, Hash, Lock string
			Built                                          *bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	if p := listed.Plugins; len(p) != 1 || p[0].Kind != "module" || p[0].Source != pkg || p[0].Query != "latest" ||
		p[0].Version != "v1.0.0" || !strings.HasPrefix(p[0].Hash, "h1:") || p[0].Lock != "locked" || p[0].Built == nil || !*p[0].Built {
		t.Fatalf("list: %+v, want it locked and built (lock builds what it locks)", p)
	}

	// "allow": true on the entry is the permission rule its tools need.
	r = run(t, "", "call", "--location", dir, "greet", `{"name": "ada"}`)
	r.want(t, cli.ExitOK)
	if !strings.Contains(r.stdout, "hello ada from v1.0.0") {
		t.Fatalf("call printed %q", r.stdout)
	}
	r = run(t, "", "plugins", "list", "--location", dir)
	r.want(t, cli.ExitOK)
	if !strings.Contains(r.stdout, "locked, built") {
		t.Fatalf("list after a call printed %q, want the module built", r.stdout)
	}

	publish("v1.1.0", "v1.1.0")
	run(t, "", "plugins", "lock", "--location", dir).want(t, cli.ExitOK) // locked: stays at v1.0.0
	r = run(t, "", "plugins", "upgrade", "--location", dir, "greet")
	r.want(t, cli.ExitOK)
	if !strings.Contains(r.stdout, "greet: "+mod+"@v1.1.0 h1:") {
		t.Fatalf("upgrade printed %q", r.stdout)
	}
	r = run(t, "", "plugins", "verify", "--location", dir)
	r.want(t, cli.ExitOK)
	if !strings.Contains(r.stdout, "v1.1.0") || !strings.Contains(r.stdout, "verified") {
		t.Fatalf("verify printed %q", r.stdout)
	}

	r = run(t, "", "call", "--location", dir, "greet", `{"name": "ada"}`)
	r.want(t, cli.ExitOK)
	if !strings.Contains(r.stdout, "hello ada from v1.1.0") {
		t.Fatalf("call after upgrade printed %q", r.stdout)
	}

	// Versions that cannot be installed as a module are refused, naming why, and
	// the lock file keeps v1.1.0.
	lockFile := filepath.Join(dir, location.LockPath)
	before, err := os.ReadFile(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		version string
		edits   []string
		why     string
	}{
		{"v1.2.0", []string{"go.mod", "\nreplace example.com/elsewhere => ../elsewhere\n"}, "replace directives"},
		{"v1.3.0", []string{"cmd/greet/main.go", "\nfunc broken() { undefinedCall() }\n"}, "undefinedCall"},
	} {
		publish(tc.version, tc.version, tc.edits...)
		r = run(t, "", "plugins", "upgrade", "--location", dir, "greet")
		r.want(t, cli.ExitFailure)
		for _, want := range []string{tc.why, mod + "@" + tc.version + " cannot be installed as a module", "is unchanged"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("upgrade to %s: stderr does not contain %q:\n%s", tc.version, want, r.stderr)
			}
		}
		if after, err := os.ReadFile(lockFile); err != nil || !bytes.Equal(after, before) {
			t.Fatalf("upgrade to %s changed the lock file (%v):\n%s", tc.version, err, after)
		}
	}

	lock, err := location.ReadLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	locked := lock.Plugins["greet"].Hash
	publish("v1.1.0", "somewhere else")
	t.Setenv("GOMODCACHE", t.TempDir()) // a machine that has not fetched it yet
	r = run(t, "", "plugins", "verify", "--location", dir)
	r.want(t, cli.ExitToolError)
	if !strings.Contains(r.stderr, locked) || strings.Count(r.stderr, "h1:") < 2 {
		t.Fatalf("verify of a tampered module: %q, want both hashes, the locked one %s", r.stderr, locked)
	}
	r = run(t, "", "call", "--location", dir, "greet", `{"name": "ada"}`)
	r.want(t, cli.ExitOK) // the binary built from the locked content is cached: nothing is fetched
	t.Setenv(location.BuildCacheEnv, t.TempDir())
	// The Location activates without the plugin (a failed source): its tool is not
	// offered, and the reason, naming both hashes, is on stderr.
	r = run(t, "", "call", "--location", dir, "greet", `{"name": "ada"}`)
	r.want(t, cli.ExitFailure)
	if !strings.Contains(r.stdout, locked) || !strings.Contains(r.stdout, "plugin:greet: failed") {
		t.Fatalf("call with a tampered module: %q", r.stdout)
	}
}

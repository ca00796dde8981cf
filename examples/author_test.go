//go:build unix

// Package examples_test checks the examples that live in modules of their own.
package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/modproxy"
	"github.com/toolhost/toolhost/internal/testio"
)

// TestAuthorPath follows examples/author/README.md the way a plugin author would,
// from a copy of the example module outside this repository (its replace directive
// pointed at this checkout) and with no network (GOPROXY=off): the module's own
// go test ./... (plugintest with a shared build), toolhost call, toolhost dev picking
// up an edit, and one -debug process attached by two toolhost calls in turn.
func TestAuthorPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds toolhost and an author's module")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	mod := filepath.Join(tmp, "greeter")
	copyTree(t, filepath.Join(root, "examples", "author"), mod)
	gomod := filepath.Join(mod, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte("=> ../.."), []byte("=> "+root), 1)
	if err := os.WriteFile(gomod, data, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"GOPROXY=off", "GOFLAGS=-mod=readonly", "GOWORK=off", "GOTOOLCHAIN=local",
		"TOOLHOST_BUILD_CACHE="+filepath.Join(tmp, "build"),
		"TOOLHOST_OUTPUT_DIR="+filepath.Join(tmp, "output"),
		"XDG_DATA_HOME="+filepath.Join(tmp, "data"),
	)
	toolhost := filepath.Join(tmp, "bin", "toolhost")
	run(t, env, root, "go", "build", "-o", toolhost, "./cmd/toolhost")
	workspace := filepath.Join(mod, "workspace")

	t.Run("FromScratch", func(t *testing.T) {
		// Steps 1 to 3 of the README in an empty directory. The checksum database is
		// off only because this test has no network.
		dir := filepath.Join(tmp, "scratch")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		env := append(env, "GOFLAGS=-mod=mod", "GOSUMDB=off")
		run(t, env, dir, "go", "mod", "init", "example.com/greeter")
		run(t, env, dir, "go", "mod", "edit", "-require=github.com/toolhost/toolhost@v0.0.0-00010101000000-000000000000",
			"-replace=github.com/toolhost/toolhost="+root)
		copyFile(t, filepath.Join(mod, "main.go"), filepath.Join(dir, "main.go"))
		run(t, env, dir, "go", "mod", "tidy")
		run(t, env, dir, "go", "build", "./...")
		copyFile(t, filepath.Join(mod, "main_test.go"), filepath.Join(dir, "main_test.go"))
		run(t, env, dir, "go", "mod", "tidy")
		run(t, env, dir, "go", "test", "./...")
	})

	t.Run("GoTest", func(t *testing.T) {
		run(t, env, mod, "go", "test", "./...")
	})

	t.Run("Call", func(t *testing.T) {
		// Standard input is /dev/null, as in CI: "allow": true in the config is the
		// permission the call needs, so nothing asks.
		out := run(t, env, mod, toolhost, "call", "--location", workspace, "greet", `{"name": "Ada"}`)
		if !strings.Contains(out, "Hello, Ada!") {
			t.Fatalf("call printed %q", out)
		}
	})

	t.Run("DevPicksUpAnEdit", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		dev := exec.Command(toolhost, "dev", "--location", workspace, "--socket", filepath.Join(tmp, "dev.sock"))
		dev.Env, dev.Dir = env, mod
		stderr := &testio.SyncBuffer{}
		dev.Stderr = stderr
		stdout, err := dev.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			dev.Process.Signal(os.Interrupt)
			if err := dev.Wait(); err != nil {
				t.Errorf("toolhost dev: %v\n%s", err, stderr.String())
			}
		}()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatalf("toolhost dev printed no serving line: %v\n%s", err, stderr.String())
		}
		go io.Copy(io.Discard, stdout)
		address := strings.TrimSpace(strings.TrimPrefix(line, "serving on "))
		if out := run(t, env, mod, toolhost, "call", "--socket", address, "greet", `{"name": "Ada"}`); !strings.Contains(out, "Hello, Ada!") {
			t.Fatalf("call printed %q", out)
		}
		edit(t, filepath.Join(mod, "main.go"), `"Hello, "`, `"Howdy, "`)
		for {
			out, _ := exec.CommandContext(ctx, toolhost, "call", "--socket", address, "greet", `{"name": "Ada"}`).Output()
			if strings.Contains(string(out), "Howdy, Ada!") {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("toolhost dev did not serve the edit; last call printed %q\n%s", out, stderr.String())
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	t.Run("PublishedToAPrivateProxy", func(t *testing.T) {
		// Step 8: the module is served by a file:// proxy (the layout go mod download
		// leaves in the module cache: <module>/@v/list, .info, .mod, .zip) and
		// installed from it by module path, locked, and called. toolhost itself is
		// not published yet, so the proxy serves this checkout as a test version,
		// and the checksum database is off because this test has no network (the
		// README's GONOSUMDB is what keeps it away from a private module otherwise).
		proxy := &modproxy.Proxy{Dir: filepath.Join(tmp, "proxy")}
		if err := proxy.AddToolhost(root); err != nil {
			t.Fatal(err)
		}
		goEnv, err := modproxy.Env(filepath.Join(tmp, "proxy-modcache"), proxy.URL())
		if err != nil {
			t.Fatal(err)
		}
		release := filepath.Join(tmp, "release")
		copyTree(t, filepath.Join(root, "examples", "author"), release) // as committed, before the dev step's edit
		os.RemoveAll(filepath.Join(release, "workspace"))
		os.Remove(filepath.Join(release, "go.sum"))
		// The published go.mod has no replace: it requires toolhost by version.
		if err := os.WriteFile(filepath.Join(release, "go.mod"),
			[]byte("module example.com/greeter\n\ngo 1.26.0\n\nrequire "+modproxy.ToolhostModule+" "+modproxy.ToolhostVersion+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := proxy.AddPlugin(goEnv, "example.com/greeter", "v1.0.0", release); err != nil {
			t.Fatal(err)
		}

		ws := filepath.Join(tmp, "elsewhere")
		if err := os.MkdirAll(filepath.Join(ws, ".toolhost"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, ".toolhost", "config.json"),
			[]byte(`{"plugins": [{"name": "greeter", "module": "example.com/greeter", "version": "v1", "allow": true}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		installEnv := append(goEnv, "GONOSUMDB=example.com/greeter", "GOFLAGS=-modcacherw",
			"TOOLHOST_BUILD_CACHE="+filepath.Join(tmp, "proxy-build"),
			"TOOLHOST_OUTPUT_DIR="+filepath.Join(tmp, "output"),
			"XDG_DATA_HOME="+filepath.Join(tmp, "data"))
		if out := run(t, installEnv, ws, toolhost, "plugins", "lock"); !strings.Contains(out, "greeter: example.com/greeter@v1.0.0 h1:") {
			t.Fatalf("plugins lock printed %q", out)
		}
		if _, err := os.Stat(filepath.Join(ws, ".toolhost", "plugins.lock.json")); err != nil {
			t.Fatal(err)
		}
		if out := run(t, installEnv, ws, toolhost, "call", "--location", ws, "greet", `{"name": "Ada"}`); !strings.Contains(out, "Hello, Ada!") {
			t.Fatalf("call printed %q", out)
		}
	})

	t.Run("DebugProcessAttachedTwice", func(t *testing.T) {
		bin := filepath.Join(tmp, "bin", "greeter") // the reattach key is the binary's name: the plugin's name
		run(t, env, mod, "go", "build", "-o", bin, ".")
		dbg := exec.Command(bin, "-debug")
		dbg.Env = env
		dbg.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		stdout, err := dbg.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := dbg.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			dbg.Process.Signal(os.Interrupt)
			dbg.Wait()
		}()
		var reattach string
		sc := bufio.NewScanner(stdout)
		for reattach == "" && sc.Scan() {
			if _, v, ok := strings.Cut(sc.Text(), "TOOLHOST_REATTACH='"); ok {
				reattach = strings.TrimSuffix(v, "'")
			}
		}
		if reattach == "" {
			t.Fatalf("greeter -debug printed no TOOLHOST_REATTACH line: %v", sc.Err())
		}
		go io.Copy(io.Discard, stdout)
		for i := range 2 {
			out := run(t, append(env, "TOOLHOST_REATTACH="+reattach), mod, toolhost, "call", "--location", workspace, "greet", `{"name": "Ada"}`)
			if !strings.Contains(out, "Ada!") {
				t.Fatalf("call %d through the debug process printed %q", i+1, out)
			}
		}
		if err := dbg.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("the debug process ended after two hosts: %v", err)
		}
	})
}

// run runs name in dir with env and standard input from /dev/null, fails the test
// unless it succeeds, and returns its standard output.
func run(t *testing.T, env []string, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Env, cmd.Dir = env, dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

func edit(t *testing.T, file, old, new string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s has no %s", file, old)
	}
	if err := os.WriteFile(file, bytes.Replace(data, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the regular files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

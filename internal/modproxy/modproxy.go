// Package modproxy makes Go module proxies on disk for tests that fetch plugins as
// Go modules with no network: a directory in the GOPROXY protocol's layout
// (<module>/@v/list, <version>.info, .mod and .zip), used as GOPROXY=file://DIR.
//
// Plugin modules depend on toolhost's sdk. A proxy's zip may not carry a replace
// directive for a dependency, so the test proxy also serves this repository's module,
// github.com/toolhost/toolhost, at a test version (ToolhostVersion) zipped from the
// working tree; every other dependency comes from the host's module cache, whose
// cache/download directory is itself a module proxy (the second GOPROXY entry). The
// checksum database is off (GOSUMDB=off): the lock file's h1: hash is what
// authenticates a plugin module in these tests.
package modproxy

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ToolhostModule and ToolhostVersion name the working tree as the proxy serves it.
const (
	ToolhostModule  = "github.com/toolhost/toolhost"
	ToolhostVersion = "v0.1.0-test"
)

// Proxy is a module proxy directory. Its methods are not safe for concurrent use.
type Proxy struct {
	// Dir is the proxy's root directory.
	Dir string
}

// URL returns the proxy as a GOPROXY entry.
func (p *Proxy) URL() string { return "file://" + filepath.ToSlash(p.Dir) }

// AddDir serves the module rooted at dir (which holds its go.mod) as modPath@version:
// every regular file below dir except hidden ones, those in directories holding
// another go.mod (nested modules), node_modules, bin and testdata directories, and
// files larger than 1 MiB. It replaces any zip the version had.
func (p *Proxy) AddDir(modPath, version, dir string) error {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if path != dir && (strings.HasPrefix(name, ".") || (d.IsDir() && (name == "node_modules" || name == "bin" || name == "testdata"))) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != dir && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err != nil || fi.Size() > 1<<20 {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files[filepath.ToSlash(rel)] = data
		return nil
	})
	if err != nil {
		return fmt.Errorf("modproxy: %w", err)
	}
	return p.Add(modPath, version, files)
}

// Add serves files (slash-separated paths relative to the module root; "go.mod"
// required) as modPath@version. Module paths must be lower case (no case-encoding).
func (p *Proxy) Add(modPath, version string, files map[string][]byte) error {
	gomod, ok := files["go.mod"]
	if !ok {
		return fmt.Errorf("modproxy: %s@%s has no go.mod", modPath, version)
	}
	if strings.ToLower(modPath) != modPath {
		return fmt.Errorf("modproxy: %s: upper case needs case-encoding, which this proxy does not do", modPath)
	}
	vdir := filepath.Join(p.Dir, filepath.FromSlash(modPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return fmt.Errorf("modproxy: %w", err)
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for name, data := range files {
		w, err := zw.Create(modPath + "@" + version + "/" + name)
		if err != nil {
			return fmt.Errorf("modproxy: %w", err)
		}
		if _, err := w.Write(data); err != nil {
			return fmt.Errorf("modproxy: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("modproxy: %w", err)
	}
	info, _ := json.Marshal(map[string]string{"Version": version, "Time": time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)})
	for ext, data := range map[string][]byte{".info": info, ".mod": gomod, ".zip": zbuf.Bytes()} {
		if err := os.WriteFile(filepath.Join(vdir, version+ext), data, 0o644); err != nil {
			return fmt.Errorf("modproxy: %w", err)
		}
	}
	list, _ := os.ReadFile(filepath.Join(vdir, "list"))
	if !strings.Contains("\n"+string(list), "\n"+version+"\n") {
		list = append(list, version+"\n"...)
		if err := os.WriteFile(filepath.Join(vdir, "list"), list, 0o644); err != nil {
			return fmt.Errorf("modproxy: %w", err)
		}
	}
	return nil
}

// Env is the go command's environment for a test that must reach no network:
// GOPROXY is the proxies given (file:// URLs) followed by the host's module cache
// (read-only, as a proxy), the checksum database is off, the module cache is
// modCache (made writable, so t.TempDir can remove it), the toolchain is the local
// one, and only PATH, HOME and the host's build cache (GOCACHE, shared: compiling is
// pure) come from the host; GOFLAGS, GOPRIVATE and the rest do not leak in.
func Env(modCache string, proxies ...string) ([]string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("modproxy: go env: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("modproxy: go env printed %q", out)
	}
	hostCache := "file://" + filepath.ToSlash(filepath.Join(lines[0], "cache", "download"))
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"GOCACHE=" + lines[1],
		"GOMODCACHE=" + modCache,
		"GOPROXY=" + strings.Join(append(proxies, hostCache), ","),
		"GOSUMDB=off",
		"GONOSUMDB=",
		"GOPRIVATE=",
		"GONOPROXY=",
		"GOFLAGS=-mod=mod -modcacherw",
		"GOTOOLCHAIN=local",
		"GOWORK=off",
		"CGO_ENABLED=0",
	}, nil
}

// AddToolhost serves the working tree rooted at repoRoot as
// ToolhostModule@ToolhostVersion.
func (p *Proxy) AddToolhost(repoRoot string) error {
	return p.AddDir(ToolhostModule, ToolhostVersion, repoRoot)
}

// AddPlugin serves a plugin module written the way an author would: dir holds the
// module (go.mod requiring ToolhostModule@ToolhostVersion and its packages); go mod
// tidy runs in dir with env (see Env) to write its go.sum, then dir is served as
// modPath@version.
func (p *Proxy) AddPlugin(env []string, modPath, version, dir string) error {
	cmd := exec.Command("go", "mod", "tidy")
	cmd.Dir = dir
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("modproxy: go mod tidy in %s: %w\n%s", dir, err, out)
	}
	return p.AddDir(modPath, version, dir)
}

// GreetPlugin writes into dir a plugin module, modPath, whose main package at
// cmd/greet registers one tool, "greet", answering "hello NAME from VERSION".
func GreetPlugin(dir, modPath, version string) error {
	files := map[string]string{
		"go.mod": "module " + modPath + "\n\ngo 1.26.0\n\nrequire " + ToolhostModule + " " + ToolhostVersion + "\n",
		"cmd/greet/main.go": `package main

import (
	"context"

	"github.com/toolhost/toolhost/sdk"
)

type In struct {
	Name string ` + "`json:\"name\"`" + `
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"greet": sdk.NewTool("Greets someone.", func(ctx context.Context, inv sdk.Invocation, in In) (string, error) {
				return "hello " + in.Name + " from ` + version + `", nil
			}),
		})
		return err
	}))
}
`,
	}
	for name, data := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return fmt.Errorf("modproxy: %w", err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			return fmt.Errorf("modproxy: %w", err)
		}
	}
	return nil
}

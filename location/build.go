package location

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolhost/toolhost/internal/filestore"
)

// buildOutputLines is how many trailing lines of compiler output a BuildError keeps.
const buildOutputLines = 40

// BuildError reports a plugin whose Go source did not build. Output holds the last
// lines of what the go command printed, which names the compile errors.
type BuildError struct {
	// Plugin is the plugin's name.
	Plugin string
	// Source is the package directory that was built.
	Source string
	// Output is the tail (about 40 lines) of the go command's combined output.
	Output string
	// Err is the go command's failure (usually its exit status).
	Err error
}

func (e *BuildError) Error() string {
	msg := fmt.Sprintf("location: build plugin %q from %s: %v", e.Plugin, e.Source, e.Err)
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += "\ncompiler output (last lines):\n  " + strings.ReplaceAll(out, "\n", "\n  ")
	}
	return msg
}

func (e *BuildError) Unwrap() error { return e.Err }

// BuildPlugin builds the Go main package in sourceDir and returns the path of the
// binary, named name, in a content-addressed cache under cacheDir. The go command runs
// in sourceDir (`go build -tags=<StartupTags> -o <out> .`), so the build uses the
// module sourceDir belongs to, with the host's environment (GOPATH, HOME, GOCACHE,
// GOFLAGS...) except that GOOS and GOARCH are forced to the host's: the binary must
// run here.
//
// The cache key is a SHA-256 over the go command's version (as seen from sourceDir,
// so a toolchain switch counts), GOOS/GOARCH, the tags, the build-affecting
// variables GOFLAGS, GOEXPERIMENT and CGO_ENABLED, the path and contents of every
// regular file under sourceDir (hidden files and directories, and testdata,
// excluded), the go.mod and go.sum of the enclosing module (and go.work files above
// it), and the files of every package of the same module that sourceDir imports,
// transitively. If <cacheDir>/<key>/<name> exists it is returned with built false
// and nothing runs. Packages of other modules are pinned by go.sum; a local replace
// directive pointing outside the module is not followed.
//
// A build goes to a temporary directory in cacheDir and is renamed into place, so
// concurrent builds of the same key (from several processes too) are safe and a
// reader never sees a partial binary. It is renamed only if the key, computed again
// after the build, is unchanged: sources edited during the build are never cached
// under the key of what was there before (the error wraps ErrSourcesChanged, also
// when the build failed). A failed build returns a *BuildError quoting the compiler
// output; a cancelled ctx kills the go command and returns ctx's error.
func BuildPlugin(ctx context.Context, cacheDir, name, sourceDir string) (path string, built bool, err error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", false, fmt.Errorf("location: build plugin: invalid binary name %q", name)
	}
	if cacheDir == "" {
		return "", false, fmt.Errorf("location: build plugin %q: no build cache directory", name)
	}
	if cacheDir, err = filepath.Abs(cacheDir); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: %w", name, err)
	}
	src, err := filepath.Abs(sourceDir)
	if err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: %w", name, err)
	}
	if fi, err := os.Stat(src); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: source: %w", name, err)
	} else if !fi.IsDir() {
		return "", false, fmt.Errorf("location: build plugin %q: source %s is not a directory", name, src)
	}
	goCmd, err := goCommand()
	if err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: %w", name, err)
	}
	env := buildEnv()

	key, err := buildKey(ctx, goCmd, env, src)
	if err != nil {
		return "", false, fmt.Errorf("location: build plugin %q from %s: %w", name, src, err)
	}
	out := filepath.Join(cacheDir, key, name)
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
		return out, false, nil
	}

	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: build cache: %w", name, err)
	}
	sweepBuildTemps(cacheDir)
	// One build of a key at a time, across processes: a second waits, then finds
	// the binary. Taking the lock removes a killed build's temporary directory.
	lk, err := filestore.Lock(out)
	if err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: build cache: %w", name, err)
	}
	defer lk.Unlock()
	if fi, err := os.Stat(out); err == nil && fi.Mode().IsRegular() {
		return out, false, nil
	}
	tmp := filepath.Join(filepath.Dir(out), "."+name+".build.tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: build cache: %w", name, err)
	}
	defer os.RemoveAll(tmp)
	tmpOut := filepath.Join(tmp, name)
	output, err := runGo(ctx, goCmd, env, src, "build", buildTags(env), "-o", tmpOut, ".")
	if err != nil {
		if ctx.Err() != nil {
			return "", false, fmt.Errorf("location: build plugin %q: %w", name, context.Cause(ctx))
		}
		// An edit during the build (an editor's save half written) fails it as
		// often as it changes it: that is the sources changing, not a build error.
		if after, kerr := buildKey(ctx, goCmd, env, src); kerr == nil && after != key {
			return "", false, fmt.Errorf("location: build plugin %q from %s: %w", name, src, ErrSourcesChanged)
		}
		return "", false, &BuildError{Plugin: name, Source: src, Output: lastLines(output, buildOutputLines), Err: err}
	}
	// The go command read the sources after the key was computed: if they changed in
	// between, the binary may not be the key's, and caching it would hand it out
	// for those sources later.
	if after, err := buildKey(ctx, goCmd, env, src); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q from %s: %w", name, src, err)
	} else if after != key {
		return "", false, fmt.Errorf("location: build plugin %q from %s: %w", name, src, ErrSourcesChanged)
	}
	if err := syncFile(tmpOut); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: build cache: %w", name, err)
	}
	if err := os.Rename(tmpOut, out); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: build cache: %w", name, err)
	}
	if err := filestore.SyncDir(filepath.Dir(out)); err != nil {
		return "", false, fmt.Errorf("location: build plugin %q: build cache: %w", name, err)
	}
	return out, true, nil
}

// sweepBuildTemps removes the temporary directories of builds in cacheDir whose
// lock no process holds: their hosts were killed mid-build. Taking a key's lock
// removes its own (see filestore.Lock), but a key whose sources have changed since
// is never built again.
func sweepBuildTemps(cacheDir string) {
	temps, _ := filepath.Glob(filepath.Join(cacheDir, "*", ".*.build.tmp"))
	for _, tmp := range temps {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(tmp), "."), ".build.tmp")
		f, err := os.OpenFile(filestore.LockPath(filepath.Join(filepath.Dir(tmp), name)), os.O_RDWR, 0)
		if err != nil {
			continue // no lock: not a build's
		}
		if ok, _ := filestore.TryLockFile(f); ok {
			os.RemoveAll(tmp)
		}
		f.Close()
	}
}

// syncFile makes the contents of the file at path durable.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// ErrSourcesChanged is wrapped by BuildPlugin's error when the sources changed while
// they were being built; nothing was cached, and building again builds the new state.
var ErrSourcesChanged = errors.New("the sources changed during the build")

// goCommand finds the go command: on PATH, else in GOROOT/bin.
func goCommand() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	for _, root := range []string{os.Getenv("GOROOT"), runtime.GOROOT()} {
		if root == "" {
			continue
		}
		p := filepath.Join(root, "bin", "go")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", errors.New("no go command: not on PATH and not in GOROOT/bin")
}

// StartupTags are the build tags toolhost adds to every plugin build: the pure-Go
// DNS resolver and user lookup. With them a plugin whose own packages use no cgo
// links no C library and is a static binary, which starts without the dynamic
// loader, libc and cgo's thread setup (BENCHMARKS.md, "Activation", has what that
// saves a launch). A plugin that does use cgo still
// builds with it, and is linked dynamically as before.
const StartupTags = "netgo,osusergo"

// buildTags is the -tags flag of a plugin build under env: StartupTags, plus any
// tags env's GOFLAGS sets (a -tags flag on the command line replaces GOFLAGS's).
func buildTags(env []string) string {
	tags := strings.Split(StartupTags, ",")
	for _, f := range strings.Fields(lookupEnv(env, "GOFLAGS")) {
		for _, prefix := range []string{"-tags=", "--tags="} {
			if v, ok := strings.CutPrefix(f, prefix); ok {
				for _, t := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
					if !slices.Contains(tags, t) {
						tags = append(tags, t)
					}
				}
			}
		}
	}
	return "-tags=" + strings.Join(tags, ",")
}

// buildEnv is the developer's own environment for their toolchain, targeting this host.
func buildEnv() []string {
	return append(os.Environ(), "GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
}

// runGo runs the go command in dir and returns its combined output. On cancellation it
// kills the whole process group (the go command's compilers and linker included).
func runGo(ctx context.Context, goCmd string, env []string, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, goCmd, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	killGroupOnCancel(cmd)
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.Bytes(), err
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// buildKey computes the cache key of building src (see BuildPlugin).
func buildKey(ctx context.Context, goCmd string, env []string, src string) (string, error) {
	version, err := goVersion(ctx, goCmd, env, src)
	if err != nil {
		return "", err
	}
	inputs, err := buildInputs(src)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	field := func(label string, value []byte) {
		fmt.Fprintf(h, "%s\x00%d\x00", label, len(value))
		h.Write(value)
	}
	field("go version", bytes.TrimSpace(version))
	field("target", []byte(runtime.GOOS+"/"+runtime.GOARCH))
	field("tags", []byte(buildTags(env)))
	for _, v := range []string{"GOFLAGS", "GOEXPERIMENT", "CGO_ENABLED"} {
		field(v, []byte(os.Getenv(v)))
	}
	for _, in := range inputs {
		if err := hashFile(h, in.label, in.path); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// goVersion is `go version` as run in src, remembered: it costs a process, and
// every build computes the key twice. What it depends on is the memo's
// key: the go command's file (path, size, modification time), the variables that
// select a toolchain, and the go.mod and go.work files above src (their go and
// toolchain lines can switch toolchains).
func goVersion(ctx context.Context, goCmd string, env []string, src string) ([]byte, error) {
	memo := sha256.New()
	fi, err := os.Stat(goCmd)
	if err != nil {
		return nil, fmt.Errorf("go command: %w", err)
	}
	fmt.Fprintf(memo, "%s\x00%d\x00%d\x00", goCmd, fi.Size(), fi.ModTime().UnixNano())
	for _, v := range []string{"GOTOOLCHAIN", "GOROOT", "GOPATH", "GOFLAGS", "GOWORK"} {
		fmt.Fprintf(memo, "%s=%s\x00", v, os.Getenv(v))
	}
	for dir := src; ; dir = filepath.Dir(dir) {
		for _, f := range []string{"go.mod", "go.work"} {
			if data, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				fmt.Fprintf(memo, "%s\x00%d\x00", filepath.Join(dir, f), len(data))
				memo.Write(data)
			}
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	key := string(memo.Sum(nil))
	if v, ok := goVersions.Load(key); ok {
		return v.([]byte), nil
	}
	version, err := runGo(ctx, goCmd, env, src, "version")
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("go version: %w: %s", err, bytes.TrimSpace(version))
	}
	goVersions.Store(key, version)
	return version, nil
}

var goVersions sync.Map // memo key → `go version` output

func hashFile(h io.Writer, label, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "file %s\x00%d\x00", label, fi.Size())
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if n != fi.Size() {
		return fmt.Errorf("%s changed while it was read", path)
	}
	return nil
}

// buildInput is one file that goes into the cache key, labelled by a path that does
// not depend on where the module lives on disk.
type buildInput struct{ label, path string }

// buildInputs lists, sorted by label, every file whose contents decide the build of src.
func buildInputs(src string) ([]buildInput, error) {
	seen := map[string]bool{} // absolute paths already listed
	var inputs []buildInput
	add := func(label, path string) {
		if !seen[path] {
			seen[path] = true
			inputs = append(inputs, buildInput{label, path})
		}
	}
	var goFiles []string

	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != src && (strings.HasPrefix(d.Name(), ".") || (d.IsDir() && d.Name() == "testdata")) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !isRegular(p, d) {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		add("src/"+filepath.ToSlash(rel), p)
		if strings.HasSuffix(p, ".go") {
			goFiles = append(goFiles, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read source: %w", err)
	}

	modRoot, modPath, err := enclosingModule(src)
	if err != nil {
		return nil, err
	}
	if modRoot != "" {
		for _, f := range []string{"go.mod", "go.sum"} {
			if p := filepath.Join(modRoot, f); fileExists(p) {
				add("module/"+f, p)
			}
		}
		for dir := modRoot; ; dir = filepath.Dir(dir) {
			for _, f := range []string{"go.work", "go.work.sum"} {
				if p := filepath.Join(dir, f); fileExists(p) {
					add("work/"+f, p)
				}
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
		addModuleImports(src, modRoot, modPath, goFiles, add)
	}
	slices.SortFunc(inputs, func(a, b buildInput) int { return strings.Compare(a.label, b.label) })
	return inputs, nil
}

// addModuleImports adds the files of every package of the module (modPath at modRoot)
// that the given Go files import, transitively. Packages under src are already listed.
// Build constraints are ignored: a file that might be compiled counts.
func addModuleImports(src, modRoot, modPath string, goFiles []string, add func(label, path string)) {
	if modPath == "" {
		return
	}
	visited := map[string]bool{}
	queue := goFiles
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if f == nil {
			continue // unreadable or unparsable: the build will say so
		}
		_ = err // a partial parse still has the imports read so far
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				continue
			}
			rel, ok := strings.CutPrefix(ip, modPath)
			if !ok || (rel != "" && rel[0] != '/') {
				continue
			}
			dir := filepath.Join(modRoot, filepath.FromSlash(path.Clean("/"+rel)))
			if visited[dir] || within(src, dir) {
				continue
			}
			visited[dir] = true
			entries, err := os.ReadDir(dir)
			if err != nil {
				continue // a missing package: the build will say so
			}
			for _, e := range entries {
				p := filepath.Join(dir, e.Name())
				if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !isRegular(p, e) {
					continue
				}
				relFile, _ := filepath.Rel(modRoot, p)
				add("module/"+filepath.ToSlash(relFile), p)
				if strings.HasSuffix(p, ".go") {
					queue = append(queue, p)
				}
			}
		}
	}
}

// enclosingModule finds the go.mod at or above dir and returns its directory and
// module path, or "" when dir is in no module.
func enclosingModule(dir string) (root, modPath string, err error) {
	for d := dir; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			return d, modulePath(data), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("read go.mod: %w", err)
		}
		if filepath.Dir(d) == d {
			return "", "", nil
		}
	}
}

// modulePath returns the path in a go.mod's module directive, or "".
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t' && rest[0] != '"') {
			continue
		}
		rest, _, _ = strings.Cut(rest, "//")
		rest = strings.TrimSpace(rest)
		if p, err := strconv.Unquote(rest); err == nil {
			return p
		}
		return rest
	}
	return ""
}

func isRegular(p string, d fs.DirEntry) bool {
	if d.Type().IsRegular() {
		return true
	}
	if d.Type()&fs.ModeSymlink != 0 {
		fi, err := os.Stat(p)
		return err == nil && fi.Mode().IsRegular()
	}
	return false
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

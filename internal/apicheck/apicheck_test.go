package apicheck

import (
	"bytes"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/toolhost/toolhost"

// goList runs the go command's list in the module's root with args and returns its
// output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	cmd := exec.CommandContext(t.Context(), gobin, append([]string{"list"}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// An application that registers only in-process tools (its own and the built-in
// ones) must not link the plugin machinery: gRPC and go-plugin come with the sdk's
// Serve and the plugins package, never with registry, tool, permission, builtin, fsys
// or scope.
func TestEmbedderLinksNoRPC(t *testing.T) {
	deps := goList(t, "-deps", "./internal/apicheck/testdata/embed")
	var rpc []string
	for _, p := range deps {
		if strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, "github.com/hashicorp/go-plugin") {
			rpc = append(rpc, p)
		}
	}
	if len(rpc) > 0 {
		t.Errorf("an embedder of the registry with in-process tools links %d RPC packages, want none: %s\n"+
			"(find the import that brings them with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./internal/apicheck/testdata/embed)",
			len(rpc), strings.Join(rpc, " "))
	}
}

// No exported identifier of a public package shows a type from an internal package:
// not as a field, parameter, result, method, element or alias. A user cannot name
// such a type, so the package must expose its own type and convert at its boundary.
func TestPublicAPIShowsNoInternalTypes(t *testing.T) {
	lines := goList(t, "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}\t{{.Name}}\t{{.Module}}", "./...")
	exports := map[string]string{}
	var public []string
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			continue
		}
		exports[f[0]] = f[1]
		if f[1] != "" && (f[0] == module || strings.HasPrefix(f[0], module+"/")) && f[2] != "main" && !isInternal(f[0]) {
			public = append(public, f[0])
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, os.ErrNotExist
		}
		return os.Open(file)
	}).(types.ImporterFrom)
	for _, path := range public {
		pkg, err := imp.ImportFrom(path, "", 0)
		if err != nil {
			t.Fatalf("import %s from its export data: %v", path, err)
		}
		for _, leak := range internalTypesIn(pkg) {
			t.Errorf("%s", leak)
		}
	}
}

func isInternal(path string) bool {
	return strings.Contains(path, "/internal/") || strings.HasSuffix(path, "/internal")
}

// internalTypesIn lists pkg's exported identifiers that show an internal type, as
// "pkg.Name: shows internal.Type".
func internalTypesIn(pkg *types.Package) []string {
	var leaks []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		where := pkg.Path() + "." + name
		w := walker{pkg: pkg, seen: map[types.Type]bool{}}
		switch obj := obj.(type) {
		case *types.TypeName:
			if obj.IsAlias() {
				w.walk(types.Unalias(obj.Type()), true)
			} else {
				w.walk(obj.Type().Underlying(), false)
				if named, ok := obj.Type().(*types.Named); ok {
					for m := range named.Methods() {
						if m.Exported() {
							w.walk(m.Type(), false)
						}
					}
				}
			}
		default:
			w.walk(obj.Type(), false)
		}
		for _, found := range w.found {
			leaks = append(leaks, where+": shows "+found)
		}
	}
	return leaks
}

type walker struct {
	pkg   *types.Package
	seen  map[types.Type]bool
	found []string
}

// walk looks for internal named types in t; a named type of another package ends the
// walk (a public one is checked as its own package's), unless top says t itself is
// what is exported (an alias).
func (w *walker) walk(t types.Type, top bool) {
	if w.seen[t] {
		return
	}
	w.seen[t] = true
	switch t := t.(type) {
	case *types.Alias:
		w.walk(types.Unalias(t), top)
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && isInternal(obj.Pkg().Path()) {
			w.found = append(w.found, obj.Pkg().Path()+"."+obj.Name())
			return
		}
		for a := range t.TypeArgs().Types() {
			w.walk(a, false)
		}
		if obj.Pkg() == w.pkg && !top {
			return // checked as an identifier of its own (or unexported and shown through its exported parts)
		}
	case *types.Pointer:
		w.walk(t.Elem(), false)
	case *types.Slice:
		w.walk(t.Elem(), false)
	case *types.Array:
		w.walk(t.Elem(), false)
	case *types.Map:
		w.walk(t.Key(), false)
		w.walk(t.Elem(), false)
	case *types.Chan:
		w.walk(t.Elem(), false)
	case *types.Signature:
		for v := range t.Params().Variables() {
			w.walk(v.Type(), false)
		}
		for v := range t.Results().Variables() {
			w.walk(v.Type(), false)
		}
	case *types.Struct:
		for f := range t.Fields() {
			if f.Exported() {
				w.walk(f.Type(), false)
			}
		}
	case *types.Interface:
		for m := range t.Methods() {
			if m.Exported() {
				w.walk(m.Type(), false)
			}
		}
	}
}

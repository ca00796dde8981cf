package fsys_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/fsys"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tree makes a root and an outside directory beside it:
//
//	outside/secret.txt
//	root/a.txt, root/sub/b.go, root/sub/deep/c.go, root/sub/deep/d.txt
//	root/link_in -> sub              root/abs_in -> <root>/sub/b.go
//	root/link_out -> <outside>       root/rel_out -> ../outside
//	root/chain1 -> chain2 -> rel_out/secret.txt
//	root/dangling_out -> <outside>/missing/x
//	root/dangling_in -> missing
//	root/sub/up -> ..                root/sub/upup -> ../..
//	root/side -> link_out/..         root/loop1 <-> root/loop2
func tree(t testing.TB) (fsysFS *fsys.FS, root, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{outside, filepath.Join(root, "sub", "deep")} {
		mkdir(t, d)
	}
	write(t, filepath.Join(outside, "secret.txt"), "secret\n")
	write(t, filepath.Join(root, "a.txt"), "alpha\nbeta\ngamma\n")
	write(t, filepath.Join(root, "sub", "b.go"), "package sub\n\nfunc B() {}\n")
	write(t, filepath.Join(root, "sub", "deep", "c.go"), "package deep\n// TODO: c\n")
	write(t, filepath.Join(root, "sub", "deep", "d.txt"), "TODO: d\n")
	for link, target := range map[string]string{
		"link_in":           "sub",
		"abs_in":            filepath.Join(root, "sub", "b.go"),
		"link_out":          outside,
		"rel_out":           "../outside",
		"chain1":            "chain2",
		"chain2":            "rel_out/secret.txt",
		"dangling_out":      filepath.Join(outside, "missing", "x"),
		"dangling_in":       "missing",
		"dangling_dotdot":   "missing/../../outside",
		"sub/up":            "..",
		"sub/upup":          "../..",
		"side":              "link_out/..",
		"loop1":             "loop2",
		"loop2":             "loop1",
		"back_in_via_above": "../root/a.txt",
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	f, err := fsys.New(root)
	if err != nil {
		t.Fatal(err)
	}
	return f, root, outside
}

func mkdir(t testing.TB, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNew(t *testing.T) {
	if _, err := fsys.New("relative/dir"); err == nil {
		t.Error("New accepted a relative root")
	}
	if _, err := fsys.New(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("New accepted a missing root")
	}
	file := filepath.Join(t.TempDir(), "f")
	write(t, file, "")
	if _, err := fsys.New(file); !errors.Is(err, fsys.ErrNotDir) {
		t.Errorf("New(file) = %v, want ErrNotDir", err)
	}
	real := t.TempDir()
	alias := filepath.Join(t.TempDir(), "alias")
	if err := os.Symlink(real, alias); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.New(alias)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(real); f.Root() != want {
		t.Errorf("Root = %s, want the canonical %s", f.Root(), want)
	}
}

func TestResolve(t *testing.T) {
	f, root, outside := tree(t)
	in := func(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }
	ok := []struct {
		name, path, want string
	}{
		{"Empty", "", root},
		{"Dot", ".", root},
		{"AbsoluteRoot", root, root},
		{"Relative", "a.txt", in("a.txt")},
		{"Nested", "sub/deep/c.go", in("sub", "deep", "c.go")},
		{"DotDotInside", "sub/../a.txt", in("a.txt")},
		{"AbsoluteInside", in("sub", "b.go"), in("sub", "b.go")},
		{"TrailingSlash", "sub/", in("sub")},
		{"SymlinkInsideToInside", "link_in/b.go", in("sub", "b.go")},
		{"SymlinkFinalInside", "link_in", in("sub")},
		{"AbsoluteSymlinkInside", "abs_in", in("sub", "b.go")},
		{"SymlinkToParentInside", "sub/up/a.txt", in("a.txt")},
		{"DanglingInside", "dangling_in", in("missing")},
		{"DanglingInsideDeeper", "dangling_in/x/y", in("missing", "x", "y")},
		{"Missing", "new/dir/file.txt", in("new", "dir", "file.txt")},
		{"FullwidthDots", "．．／etc/passwd", in("．．／etc", "passwd")},
		{"DivisionSlash", "..\u2215..\u2215etc", in("..\u2215..\u2215etc")},
		{"CombiningDot", ".\u0307./x", in(".\u0307.", "x")},
		{"OneDotLeader", "\u2024\u2024/x", in("\u2024\u2024", "x")},
		{"Backslashes", `..\..\etc`, in(`..\..\etc`)},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.Resolve(tt.path)
			if err != nil || got != tt.want {
				t.Fatalf("Resolve(%q) = %q, %v; want %q", tt.path, got, err, tt.want)
			}
		})
	}
	refused := []struct {
		name, path string
		want       error
	}{
		{"DotDot", "../outside/secret.txt", fsys.ErrOutsideRoot},
		{"DotDotOnly", "..", fsys.ErrOutsideRoot},
		{"DeepEscape", "a/../../x", fsys.ErrOutsideRoot},
		{"AbsoluteOutside", "/etc/passwd", fsys.ErrOutsideRoot},
		{"AbsoluteOutsideSibling", filepath.Join(outside, "secret.txt"), fsys.ErrOutsideRoot},
		{"AbsoluteRootPrefixSibling", root + "2/x", fsys.ErrOutsideRoot},
		{"SymlinkToOutside", "link_out/secret.txt", fsys.ErrOutsideRoot},
		{"SymlinkFinalOutside", "link_out", fsys.ErrOutsideRoot},
		{"RelativeSymlinkOutside", "rel_out/secret.txt", fsys.ErrOutsideRoot},
		{"ChainEndingOutside", "chain1", fsys.ErrOutsideRoot},
		{"DanglingOutside", "dangling_out", fsys.ErrOutsideRoot},
		{"SymlinkUpUp", "sub/upup", fsys.ErrOutsideRoot},
		{"SymlinkUpUpBelow", "sub/upup/outside/secret.txt", fsys.ErrOutsideRoot},
		{"DotDotAfterOutsideLink", "side", fsys.ErrOutsideRoot},
		{"AboveRootOnTheWayBackIn", "back_in_via_above", fsys.ErrOutsideRoot},
		{"DanglingDotDot", "dangling_dotdot", fs.ErrNotExist},
		{"Loop", "loop1", fsys.ErrInvalidPath},
		{"NUL", "a.txt\x00.png", fsys.ErrInvalidPath},
		{"NULInDotDot", "..\x00", fsys.ErrInvalidPath},
		{"ThroughAFile", "a.txt/x", fsys.ErrNotDir},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.Resolve(tt.path)
			var pe *fsys.PathError
			if !errors.Is(err, tt.want) || !errors.As(err, &pe) || pe.Path != tt.path {
				t.Fatalf("Resolve(%q) = %q, %v; want a *PathError wrapping %v", tt.path, got, err, tt.want)
			}
		})
	}
}

func TestUnicodeLookalikesStayInside(t *testing.T) {
	f, root, _ := tree(t)
	name := "．．"
	mkdir(t, filepath.Join(root, name))
	write(t, filepath.Join(root, name, "x.txt"), "inside\n")
	data, err := f.Read(t.Context(), name+"/x.txt", 0, 0)
	if err != nil || string(data) != "inside\n" {
		t.Fatalf("Read = %q, %v", data, err)
	}
}

func TestRel(t *testing.T) {
	f, root, outside := tree(t)
	for abs, want := range map[string]string{
		root:                                 ".",
		filepath.Join(root, "sub", "deep"):   "sub/deep",
		filepath.Join(outside, "secret.txt"): filepath.Join(outside, "secret.txt"),
		filepath.Join(root+"x", "y"):         filepath.Join(root+"x", "y"),
	} {
		if got := f.Rel(abs); got != want {
			t.Errorf("Rel(%s) = %q, want %q", abs, got, want)
		}
	}
}

func TestRead(t *testing.T) {
	f, _, _ := tree(t)
	ctx := t.Context()
	for _, tt := range []struct {
		name          string
		offset, limit int64
		want          string
	}{
		{"All", 0, 0, "alpha\nbeta\ngamma\n"},
		{"Range", 6, 4, "beta"},
		{"ToEnd", 11, 0, "gamma\n"},
		{"LimitPastEnd", 11, 100, "gamma\n"},
		{"OffsetPastEnd", 100, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.Read(ctx, "a.txt", tt.offset, tt.limit)
			if err != nil || string(got) != tt.want {
				t.Fatalf("Read = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	t.Run("Refusals", func(t *testing.T) {
		for p, want := range map[string]error{
			"sub":         fsys.ErrIsDir,
			"missing.txt": fs.ErrNotExist,
			"../x":        fsys.ErrOutsideRoot,
			"chain1":      fsys.ErrOutsideRoot,
		} {
			if _, err := f.Read(ctx, p, 0, 0); !errors.Is(err, want) {
				t.Errorf("Read(%q) = %v, want %v", p, err, want)
			}
		}
		if _, err := f.Read(ctx, "a.txt", -1, 0); !errors.Is(err, fsys.ErrInvalidPath) {
			t.Errorf("negative offset: %v", err)
		}
	})
	t.Run("MaxSize", func(t *testing.T) {
		small, err := fsys.New(f.Root(), fsys.MaxReadBytes(10))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := small.Read(ctx, "a.txt", 0, 0); !errors.Is(err, fsys.ErrTooLarge) {
			t.Errorf("whole file over the limit: %v", err)
		}
		if _, err := small.Read(ctx, "a.txt", 0, 11); !errors.Is(err, fsys.ErrTooLarge) {
			t.Errorf("limit over the limit: %v", err)
		}
		if got, err := small.Read(ctx, "a.txt", 6, 10); err != nil || string(got) != "beta\ngamma" {
			t.Errorf("range within the limit: %q, %v", got, err)
		}
	})
	t.Run("Cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(ctx)
		stop := errors.New("stop")
		cancel(stop)
		if _, err := f.Read(ctx, "a.txt", 0, 0); !errors.Is(err, stop) {
			t.Errorf("Read = %v, want the cause", err)
		}
	})
}

func TestReadLines(t *testing.T) {
	f, root, _ := tree(t)
	ctx := t.Context()
	long := strings.Repeat("x", 200<<10)
	write(t, filepath.Join(root, "crlf.txt"), "one\r\ntwo\r\n\r\nfour")
	write(t, filepath.Join(root, "long.txt"), "first\n"+long+"\nlast\n")
	write(t, filepath.Join(root, "empty.txt"), "")
	write(t, filepath.Join(root, "bin.dat"), "text\x00more")
	for _, tt := range []struct {
		name, path string
		start, max int
		want       []string
		total      int
	}{
		{"All", "a.txt", 1, 0, []string{"alpha", "beta", "gamma"}, 3},
		{"Window", "a.txt", 2, 1, []string{"beta"}, 3},
		{"StartBelowOne", "a.txt", 0, 2, []string{"alpha", "beta"}, 3},
		{"PastEnd", "a.txt", 10, 5, nil, 3},
		{"CRLFAndNoFinalNewline", "crlf.txt", 1, 0, []string{"one", "two", "", "four"}, 4},
		{"LongLine", "long.txt", 2, 2, []string{long, "last"}, 3},
		{"Empty", "empty.txt", 1, 0, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lines, total, err := f.ReadLines(ctx, tt.path, tt.start, tt.max)
			if err != nil || !reflect.DeepEqual(lines, tt.want) || total != tt.total {
				t.Fatalf("ReadLines = %.80q, %d, %v; want %.80q, %d", lines, total, err, tt.want, tt.total)
			}
		})
	}
	if _, _, err := f.ReadLines(ctx, "bin.dat", 1, 0); !errors.Is(err, fsys.ErrBinary) {
		t.Errorf("binary: %v, want ErrBinary", err)
	}
}

func TestList(t *testing.T) {
	f, root, _ := tree(t)
	ctx := t.Context()
	entries, err := f.List(ctx, "sub")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name+":"+e.Type)
	}
	want := []string{"b.go:file", "deep:dir", "up:symlink", "upup:symlink"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("List(sub) = %v, want %v", got, want)
	}
	if entries[0].Size != int64(len("package sub\n\nfunc B() {}\n")) || entries[0].ModTime.IsZero() {
		t.Errorf("b.go entry %+v lacks size or time", entries[0])
	}
	if viaLink, err := f.List(ctx, "link_in"); err != nil || len(viaLink) != len(entries) {
		t.Errorf("List(link_in) = %v, %v", viaLink, err)
	}
	if err := mkfifo(filepath.Join(root, "fifo")); err == nil {
		if all, err := f.List(ctx, ""); err != nil || !hasEntry(all, "fifo", "other") {
			t.Errorf("List(root) = %v, %v; want fifo as other", all, err)
		}
	}
	for p, want := range map[string]error{
		"a.txt":    fsys.ErrNotDir,
		"missing":  fs.ErrNotExist,
		"link_out": fsys.ErrOutsideRoot,
		"..":       fsys.ErrOutsideRoot,
	} {
		if _, err := f.List(ctx, p); !errors.Is(err, want) {
			t.Errorf("List(%q) = %v, want %v", p, err, want)
		}
	}
}

func hasEntry(es []fsys.Entry, name, typ string) bool {
	for _, e := range es {
		if e.Name == name && e.Type == typ {
			return true
		}
	}
	return false
}

func TestGlob(t *testing.T) {
	f, root, _ := tree(t)
	ctx := t.Context()
	for _, tt := range []struct {
		pattern string
		limit   int
		want    []string
	}{
		{"**/*.go", 0, []string{"sub/b.go", "sub/deep/c.go"}},
		{"*.txt", 0, []string{"a.txt"}},
		{"sub/*", 0, []string{"sub/b.go", "sub/deep", "sub/up"}},
		{"sub/**", 0, []string{"sub/b.go", "sub/deep", "sub/deep/c.go", "sub/deep/d.txt", "sub/up"}},
		{"**/deep/*.txt", 0, []string{"sub/deep/d.txt"}},
		{"sub/**/c.go", 0, []string{"sub/deep/c.go"}},
		{"**/*.{go,txt}", 0, []string{"a.txt", "sub/b.go", "sub/deep/c.go", "sub/deep/d.txt"}},
		{"{a.txt,sub/b.go}", 0, []string{"a.txt", "sub/b.go"}},
		{"**/*", 2, []string{"a.txt", "abs_in"}},
		{"link_in/*.go", 0, []string{"sub/b.go"}}, // a literal prefix may pass a symlink inside
		{"link_in/**", 0, []string{"sub/b.go", "sub/deep", "sub/deep/c.go", "sub/deep/d.txt", "sub/up"}},
		{"missing/**", 0, nil},
		{"sub/deep/c.go", 0, []string{"sub/deep/c.go"}},
		{root + "/sub/*.go", 0, []string{"sub/b.go"}},
		{"**/secret.txt", 0, nil}, // never through link_out, rel_out or sub/upup
	} {
		t.Run(tt.pattern, func(t *testing.T) {
			got, err := f.Glob(ctx, tt.pattern, tt.limit)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Glob(%q) = %q, %v; want %q", tt.pattern, got, err, tt.want)
			}
		})
	}
	all, err := f.Glob(ctx, "*", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		switch p {
		case "link_out", "rel_out", "chain1", "chain2", "dangling_out", "side", "loop1", "loop2", "back_in_via_above":
			t.Errorf("Glob(*) lists %q, a symlink that leaves the root", p)
		}
	}
	for pattern, want := range map[string]error{
		"../*":         fsys.ErrOutsideRoot,
		"sub/../../*":  fsys.ErrOutsideRoot,
		"/etc/*":       fsys.ErrOutsideRoot,
		"link_out/x/*": fsys.ErrOutsideRoot,
		"link_out/*":   fsys.ErrOutsideRoot,
		"[":            fsys.ErrBadPattern,
		"":             fsys.ErrBadPattern,
		"a\x00":        fsys.ErrInvalidPath,
	} {
		if got, err := f.Glob(ctx, pattern, 0); !errors.Is(err, want) {
			t.Errorf("Glob(%q) = %q, %v; want %v", pattern, got, err, want)
		}
	}
	_ = root
}

func TestGrep(t *testing.T) {
	f, root, outside := tree(t)
	ctx := t.Context()
	write(t, filepath.Join(root, "bin.dat"), "TODO\x00")
	write(t, filepath.Join(outside, "todo.txt"), "TODO: outside\n")
	for _, tt := range []struct {
		name    string
		pattern string
		opts    fsys.GrepOptions
		want    []fsys.Match
	}{
		{"Everywhere", "TODO", fsys.GrepOptions{}, []fsys.Match{
			{Path: "sub/deep/c.go", Line: 2, Text: "// TODO: c"},
			{Path: "sub/deep/d.txt", Line: 1, Text: "TODO: d"},
		}},
		{"IncludeBaseName", "TODO", fsys.GrepOptions{Include: "*.go"}, []fsys.Match{{Path: "sub/deep/c.go", Line: 2, Text: "// TODO: c"}}},
		{"IncludePath", "TODO", fsys.GrepOptions{Include: "sub/**/*.txt"}, []fsys.Match{{Path: "sub/deep/d.txt", Line: 1, Text: "TODO: d"}}},
		{"Limit", "TODO", fsys.GrepOptions{Limit: 1}, []fsys.Match{{Path: "sub/deep/c.go", Line: 2, Text: "// TODO: c"}}},
		{"Path", "^package", fsys.GrepOptions{Path: "sub/deep"}, []fsys.Match{{Path: "sub/deep/c.go", Line: 1, Text: "package deep"}}},
		{"File", "a", fsys.GrepOptions{Path: "a.txt"}, []fsys.Match{
			{Path: "a.txt", Line: 1, Text: "alpha"}, {Path: "a.txt", Line: 2, Text: "beta"}, {Path: "a.txt", Line: 3, Text: "gamma"},
		}},
		{"IgnoreCase", "BETA", fsys.GrepOptions{IgnoreCase: true}, []fsys.Match{{Path: "a.txt", Line: 2, Text: "beta"}}},
		{"ThroughLinkInside", "func", fsys.GrepOptions{Path: "link_in"}, []fsys.Match{{Path: "sub/b.go", Line: 3, Text: "func B() {}"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := f.Grep(ctx, tt.pattern, tt.opts)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Grep = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	t.Run("SkipsLargeFiles", func(t *testing.T) {
		small, _ := fsys.New(root, fsys.MaxGrepFileBytes(10))
		got, err := small.Grep(ctx, "TODO", fsys.GrepOptions{})
		if err != nil || len(got) != 1 || got[0].Path != "sub/deep/d.txt" {
			t.Fatalf("Grep = %+v, %v; want only the 8-byte file", got, err)
		}
	})
	for name, tt := range map[string]struct {
		pattern string
		opts    fsys.GrepOptions
		want    error
	}{
		"BadRegexp":   {"(", fsys.GrepOptions{}, fsys.ErrBadPattern},
		"BadInclude":  {"x", fsys.GrepOptions{Include: "["}, fsys.ErrBadPattern},
		"Outside":     {"x", fsys.GrepOptions{Path: "../outside"}, fsys.ErrOutsideRoot},
		"OutsideLink": {"x", fsys.GrepOptions{Path: "link_out"}, fsys.ErrOutsideRoot},
		"Missing":     {"x", fsys.GrepOptions{Path: "missing"}, fs.ErrNotExist},
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := f.Grep(ctx, tt.pattern, tt.opts); !errors.Is(err, tt.want) {
				t.Fatalf("Grep = %+v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestGrepHonoursCancellation(t *testing.T) {
	f, root, _ := tree(t)
	write(t, filepath.Join(root, "sub", "big.txt"), strings.Repeat("TODO line\n", 100000))
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := errors.New("interrupted")
	cancel(stop)
	if got, err := f.Grep(ctx, "TODO", fsys.GrepOptions{}); !errors.Is(err, stop) {
		t.Fatalf("Grep on a cancelled context = %d matches, %v; want the cause", len(got), err)
	}
	// Contexts that end after a few checks stop Grep part way: during the walk, and
	// in the middle of one large file.
	for name, opts := range map[string]fsys.GrepOptions{"Walk": {}, "InsideAFile": {Path: "sub/big.txt"}} {
		t.Run(name, func(t *testing.T) {
			got, err := f.Grep(&endsAfter{Context: context.Background(), checks: 3}, "TODO", opts)
			if !errors.Is(err, context.Canceled) || got != nil {
				t.Fatalf("Grep = %d matches, %v; want context.Canceled", len(got), err)
			}
		})
	}
}

// endsAfter is a context whose Err turns to context.Canceled after a number of
// calls, so a test can end it in the middle of work without timing.
type endsAfter struct {
	context.Context
	mu     sync.Mutex
	checks int
}

func (c *endsAfter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checks--; c.checks < 0 {
		return context.Canceled
	}
	return nil
}

func TestRelGlob(t *testing.T) {
	f, root, _ := tree(t)
	for pattern, want := range map[string]string{
		"**/*.go":            "**/*.go",
		"link_in/*.go":       "sub/*.go",
		"link_in/deep/**":    "sub/deep/**",
		"./sub//deep/*.txt":  "sub/deep/*.txt",
		root + "/sub/*.go":   "sub/*.go",
		"{sub,link_in}/*.go": "{sub,link_in}/*.go",
		"a.txt":              "a.txt",
	} {
		if got, err := f.RelGlob(pattern); err != nil || got != want {
			t.Errorf("RelGlob(%q) = %q, %v; want %q", pattern, got, err, want)
		}
	}
	for _, pattern := range []string{"../*", "link_out/*", "/etc/*", "[", "sub/../x"} {
		if got, err := f.RelGlob(pattern); err == nil {
			t.Errorf("RelGlob(%q) = %q, want an error", pattern, got)
		}
	}
}

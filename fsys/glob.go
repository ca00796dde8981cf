package fsys

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
)

// A glob pattern is slash-separated and root-relative. Within a segment, '*'
// matches any run of characters but '/', '?' one character, '[...]' a class and
// '\' escapes, as in path.Match; a segment that is exactly "**" matches zero or more
// whole segments; "{a,b}" alternatives are expanded first (they may nest).
type glob struct {
	alts [][]string // each alternative, split into segments
}

// maxAlternatives bounds brace expansion.
const maxAlternatives = 256

func compileGlob(pattern string) (*glob, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %q: %s", ErrBadPattern, pattern, fmt.Sprintf(format, args...))
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return nil, fmt.Errorf("%w: glob contains a NUL byte", ErrInvalidPath)
	}
	if pattern == "" {
		return nil, bad("empty")
	}
	expanded, err := expandBraces(pattern)
	if err != nil {
		return nil, bad("%v", err)
	}
	g := &glob{}
	for _, alt := range expanded {
		var segs []string
		for _, s := range strings.Split(filepath.ToSlash(alt), "/") {
			switch s {
			case "", ".":
				continue
			case "..":
				return nil, ErrOutsideRoot
			}
			if _, err := path.Match(s, ""); err != nil {
				return nil, bad("segment %q: %v", s, err)
			}
			segs = append(segs, s)
		}
		if len(segs) == 0 {
			return nil, bad("matches nothing but the root")
		}
		g.alts = append(g.alts, segs)
	}
	return g, nil
}

// expandBraces expands {a,b} alternatives, leftmost first, respecting '\' escapes.
// A brace without a matching partner is literal.
func expandBraces(p string) ([]string, error) {
	out := []string{}
	var rec func(string) error
	rec = func(p string) error {
		open, close, commas := -1, -1, []int(nil)
		depth := 0
	scan:
		for i := 0; i < len(p); i++ {
			switch p[i] {
			case '\\':
				i++
			case '{':
				if depth == 0 {
					open, commas = i, nil
				}
				depth++
			case ',':
				if depth == 1 {
					commas = append(commas, i)
				}
			case '}':
				if depth == 0 {
					continue
				}
				if depth--; depth == 0 {
					close = i
					break scan
				}
			}
		}
		if close < 0 {
			if len(out) >= maxAlternatives {
				return fmt.Errorf("more than %d brace alternatives", maxAlternatives)
			}
			out = append(out, p)
			return nil
		}
		prefix, suffix := p[:open], p[close+1:]
		start := open + 1
		for _, end := range append(commas, close) {
			if err := rec(prefix + p[start:end] + suffix); err != nil {
				return err
			}
			start = end + 1
		}
		return nil
	}
	return out, rec(p)
}

// match reports whether the segments of a path match some alternative.
func (g *glob) match(segs []string) bool {
	for _, alt := range g.alts {
		if states := run(alt, segs); states[len(alt)] {
			return true
		}
	}
	return false
}

// descend reports whether some path below the directory segs could match.
func (g *glob) descend(segs []string) bool {
	for _, alt := range g.alts {
		states := run(alt, segs)
		for i := range len(alt) {
			if states[i] {
				return true
			}
		}
	}
	return false
}

// run simulates the pattern as an automaton over path segments: state i means
// alt[:i] has matched the segments so far. It runs in O(len(alt)·len(segs)).
func run(alt, segs []string) []bool {
	states := make([]bool, len(alt)+1)
	states[0] = true
	closeOver(alt, states)
	for _, s := range segs {
		next := make([]bool, len(alt)+1)
		for i, on := range states[:len(alt)] {
			if !on {
				continue
			}
			if alt[i] == "**" {
				next[i] = true
			} else if ok, _ := path.Match(alt[i], s); ok {
				next[i+1] = true
			}
		}
		closeOver(alt, next)
		states = next
	}
	return states
}

// closeOver adds the states reached by letting "**" match no segment.
func closeOver(alt []string, states []bool) {
	for i := range alt {
		if states[i] && alt[i] == "**" {
			states[i+1] = true
		}
	}
}

// splitGlob validates pattern (root-relative, or absolute inside the root) and
// splits it into the directory to walk — its leading literal segments, resolved
// (symlinks inside the root evaluated) — and the compiled rest.
func (f *FS) splitGlob(pattern string) (base, rest string, g *glob, err error) {
	fail := func(err error) (string, string, *glob, error) {
		return "", "", nil, &PathError{Op: "glob", Path: pattern, Err: unwrapPath(err)}
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return fail(fmt.Errorf("%w: glob contains a NUL byte", ErrInvalidPath))
	}
	rel := pattern
	if filepath.IsAbs(pattern) {
		r, ok := f.within(filepath.Clean(pattern))
		if !ok {
			return fail(ErrOutsideRoot)
		}
		rel = r
	}
	var segs []string
	for _, s := range strings.Split(filepath.ToSlash(rel), "/") {
		switch s {
		case "", ".":
			continue
		case "..":
			return fail(ErrOutsideRoot)
		}
		segs = append(segs, s)
	}
	if len(segs) == 0 {
		return fail(fmt.Errorf("%w: %q matches nothing but the root", ErrBadPattern, pattern))
	}
	n := 0
	for n < len(segs)-1 && !strings.ContainsAny(segs[n], `*?[\{`) {
		n++
	}
	rest = strings.Join(segs[n:], "/")
	if g, err = compileGlob(rest); err != nil {
		return fail(err)
	}
	if base, err = f.Resolve(strings.Join(segs[:n], "/")); err != nil {
		return fail(err)
	}
	return base, rest, g, nil
}

// RelGlob validates a glob pattern as Glob does and returns the root-relative form
// Glob will match: its leading literal directories resolved (so a symlink inside the
// root is replaced by its target), for permission checks and messages.
func (f *FS) RelGlob(pattern string) (string, error) {
	base, rest, _, err := f.splitGlob(pattern)
	if err != nil {
		return "", err
	}
	if base == f.root {
		return rest, nil
	}
	return f.Rel(base) + "/" + rest, nil
}

// Glob returns the root-relative, slash-separated paths under the root that match
// pattern (see the package's pattern syntax; an absolute pattern must lie inside
// the root), at most limit of them (limit <= 0: all). Leading literal directories
// may pass through symlinks inside the root; below them the walk never follows a
// symlink, and a matching symlink whose target leaves the root is left out.
// Directories, files and symlinks match. Results come in walk order: depth first,
// each directory's entries sorted by name. A malformed pattern fails with
// ErrBadPattern, one with a ".." segment with ErrOutsideRoot. It returns
// context.Cause(ctx) when ctx ends.
func (f *FS) Glob(ctx context.Context, pattern string, limit int) ([]string, error) {
	base, _, g, err := f.splitGlob(pattern)
	if err != nil {
		return nil, err
	}
	var out []string
	err = f.walkTree(ctx, base, func(p string, segs []string, d fs.DirEntry) (bool, error) {
		if g.match(segs) && (d.Type()&fs.ModeSymlink == 0 || f.insideRoot(p)) {
			out = append(out, f.Rel(p))
			if limit > 0 && len(out) >= limit {
				return false, fs.SkipAll
			}
		}
		return d.IsDir() && g.descend(segs), nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// insideRoot reports whether the symlink at abs resolves inside the root.
func (f *FS) insideRoot(abs string) bool {
	_, err := f.Resolve(abs)
	return err == nil
}

// walkTree walks the tree under base (a resolved directory; a missing one holds
// nothing) without following symlinks. visit sees each entry below base (its
// absolute path and its path segments relative to base) and says whether to enter
// it (for directories). Each directory is opened beneath the root, so one swapped
// for a symlink leading out mid-walk is skipped, never read. Entries that cannot be
// read are skipped; ctx ending stops the walk with its cause.
func (f *FS) walkTree(ctx context.Context, base string, visit func(p string, segs []string, d fs.DirEntry) (bool, error)) error {
	start := f.relTo(filepath.Clean(base))
	err := fs.WalkDir(f.dir.FS(), filepath.ToSlash(start), func(rp string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if rp == start {
			if err != nil && !isNotExist(err) {
				return &PathError{Op: "walk", Path: f.Rel(base), Err: f.beneathErr(err)}
			}
			return err // nil, or stop at a missing base
		}
		if err != nil {
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel := rp
		if start != "." {
			rel = strings.TrimPrefix(rp, start+"/")
		}
		enter, err := visit(filepath.Join(f.root, rp), splitPath(rel), d)
		if err != nil {
			return err
		}
		if d.IsDir() && !enter {
			return fs.SkipDir
		}
		return nil
	})
	if isNotExist(err) {
		return nil
	}
	return err
}

package fsys

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// GrepOptions refine a Grep.
type GrepOptions struct {
	// Path is the file or directory to search, relative to the root or absolute
	// inside it; "" is the root.
	Path string
	// Include, if set, is a glob (see Glob) a file must match to be searched: one
	// without '/' is matched against the file's base name ("*.go"), one with '/'
	// against its root-relative path ("src/**/*.go"). It does not filter an explicit
	// file Path.
	Include string
	// Limit is the most matches returned; 0 means no limit.
	Limit int
	// IgnoreCase makes the pattern case-insensitive.
	IgnoreCase bool
}

// Match is one matching line.
type Match struct {
	// Path is the file's root-relative, slash-separated path.
	Path string `json:"path"`
	// Line is the 1-based line number.
	Line int `json:"line"`
	// Text is the line without its line ending.
	Text string `json:"text"`
}

// Grep returns the lines matching the RE2 regular expression pattern in the files
// under opts.Path (or that file), in walk order (see Glob) and line order, at most
// opts.Limit. It never follows symlinks, and skips binary files (see IsBinary),
// files larger than MaxGrepFileBytes and files it cannot read. A malformed pattern
// or Include fails with ErrBadPattern. It returns context.Cause(ctx) when ctx ends,
// checking it between files and while scanning.
func (f *FS) Grep(ctx context.Context, pattern string, opts GrepOptions) ([]Match, error) {
	expr := pattern
	if opts.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("fsys: grep: %w: %v", ErrBadPattern, err)
	}
	var include *glob
	if opts.Include != "" {
		if include, err = compileGlob(opts.Include); err != nil {
			return nil, &PathError{Op: "grep", Path: opts.Include, Err: err}
		}
	}
	base, err := f.Resolve(opts.Path)
	if err != nil {
		return nil, err
	}
	fi, err := f.dir.Stat(f.relTo(base))
	if err != nil {
		return nil, &PathError{Op: "grep", Path: opts.Path, Err: f.beneathErr(err)}
	}
	var out []Match
	full := func() bool { return opts.Limit > 0 && len(out) >= opts.Limit }
	if !fi.IsDir() {
		if !fi.Mode().IsRegular() {
			return nil, &PathError{Op: "grep", Path: opts.Path, Err: ErrNotRegular}
		}
		if err := f.grepFile(ctx, re, base, &out, full); err != nil {
			return nil, err
		}
		return out, nil
	}
	err = f.walkTree(ctx, base, func(p string, _ []string, d fs.DirEntry) (bool, error) {
		if d.IsDir() {
			return true, nil
		}
		if !d.Type().IsRegular() {
			return false, nil
		}
		if include != nil {
			rel := f.Rel(p)
			name := rel
			if !strings.Contains(opts.Include, "/") {
				name = path.Base(rel)
			}
			if !include.match(splitPath(name)) {
				return false, nil
			}
		}
		if err := f.grepFile(ctx, re, p, &out, full); err != nil {
			return false, err
		}
		if full() {
			return false, fs.SkipAll
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// grepFile appends the matching lines of the regular file abs to out until full.
// Unreadable, binary and oversized files are skipped; only ctx ending is an error.
func (f *FS) grepFile(ctx context.Context, re *regexp.Regexp, abs string, out *[]Match, full func() bool) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	file, fi, err := f.openBeneath(abs)
	if err != nil {
		return nil
	}
	if regular(fi) != nil {
		file.Close()
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(file, f.maxGrepFile+1))
	file.Close()
	if err != nil || int64(len(data)) > f.maxGrepFile || IsBinary(data) {
		return nil
	}
	rel := f.Rel(abs)
	for n := 1; len(data) > 0; n++ {
		if n%8192 == 0 && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if re.Match(line) {
			*out = append(*out, Match{Path: rel, Line: n, Text: string(line)})
			if full() {
				return nil
			}
		}
	}
	return nil
}

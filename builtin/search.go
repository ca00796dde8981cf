package builtin

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/toolhost/toolhost/fsys"
	"github.com/toolhost/toolhost/tool"
)

// GlobInput is the glob tool's input.
type GlobInput struct {
	Pattern string `json:"pattern" jsonschema_description:"The glob to match: '*' and '?' within one path segment; '**' for any number of directories; {a,b} alternatives. Example: src/**/*.go."`
	Path    string `json:"path,omitempty" jsonschema_description:"The directory the pattern is relative to. Default: the workspace root."`
	Limit   int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100000" jsonschema_description:"The most paths to return. Default 1000."`
}

// GlobOutput is the glob tool's output.
type GlobOutput struct {
	Pattern   string   `json:"pattern" jsonschema_description:"The pattern matched, relative to the workspace root."`
	Paths     []string `json:"paths" jsonschema_description:"The matching paths relative to the workspace root."`
	Truncated bool     `json:"truncated" jsonschema_description:"Whether more paths matched than were returned."`
}

func (b *tools) glob() tool.Tool {
	t := tool.New("Find files and directories in the workspace whose paths match a glob pattern. Symlinked directories are not entered.",
		func(ctx context.Context, inv tool.Invocation, in GlobInput) (GlobOutput, error) {
			pattern := in.Pattern
			if in.Path != "" && !filepath.IsAbs(pattern) {
				_, dir, err := b.resolve(in.Path)
				if err != nil {
					return GlobOutput{}, err
				}
				pattern = dir + "/" + pattern
			}
			rel, err := b.files.RelGlob(pattern)
			if err != nil {
				return GlobOutput{}, b.failure(err, in.Pattern)
			}
			if err := b.assert(ctx, inv, "glob", []string{rel}, globSave(rel), map[string]any{"pattern": in.Pattern}); err != nil {
				return GlobOutput{}, err
			}
			limit := limitOr(in.Limit, DefaultGlobLimit)
			paths, err := b.files.Glob(ctx, rel, limit+1)
			if err != nil {
				return GlobOutput{}, b.failure(err, in.Pattern)
			}
			out := GlobOutput{Pattern: rel, Paths: paths, Truncated: len(paths) > limit}
			if out.Truncated {
				out.Paths = paths[:limit]
			}
			if out.Paths == nil {
				out.Paths = []string{}
			}
			return out, nil
		})
	t.Project = tool.ProjectTyped(func(_ GlobInput, out GlobOutput) []tool.Part {
		if len(out.Paths) == 0 {
			return []tool.Part{tool.Text(fmt.Sprintf("no paths match %s", out.Pattern))}
		}
		text := strings.Join(out.Paths, "\n")
		if out.Truncated {
			text += fmt.Sprintf("\n\n(showing the first %d matches; narrow the pattern or raise limit to see more)", len(out.Paths))
		}
		return []tool.Part{tool.Text(text)}
	})
	return t
}

// GrepInput is the grep tool's input.
type GrepInput struct {
	Pattern    string `json:"pattern" jsonschema_description:"The regular expression to search for (RE2 syntax), matched against each line."`
	Path       string `json:"path,omitempty" jsonschema_description:"The file or directory to search. Default: the workspace root."`
	Include    string `json:"include,omitempty" jsonschema_description:"Only search files matching this glob: without '/' it matches file names (*.go); with '/' root-relative paths (src/**/*.ts)."`
	IgnoreCase bool   `json:"ignore_case,omitempty" jsonschema_description:"Match case-insensitively."`
	Limit      int    `json:"limit,omitempty" jsonschema:"minimum=1,maximum=100000" jsonschema_description:"The most matching lines to return. Default 500."`
}

// GrepOutput is the grep tool's output.
type GrepOutput struct {
	Matches   []fsys.Match `json:"matches" jsonschema_description:"The matching lines in file order."`
	Truncated bool         `json:"truncated" jsonschema_description:"Whether more lines matched than were returned."`
}

func (b *tools) grep() tool.Tool {
	t := tool.New("Search the contents of text files in the workspace for lines matching a regular expression. "+
		"Binary files, files over 10 MiB and symlinks are skipped.",
		func(ctx context.Context, inv tool.Invocation, in GrepInput) (GrepOutput, error) {
			if _, err := regexp.Compile(in.Pattern); err != nil {
				return GrepOutput{}, tool.Failf("invalid regular expression %q: %v", in.Pattern, err)
			}
			_, rel, err := b.resolve(in.Path)
			if err != nil {
				return GrepOutput{}, err
			}
			meta := map[string]any{"pattern": in.Pattern}
			if in.Include != "" {
				meta["include"] = in.Include
			}
			if err := b.assert(ctx, inv, "grep", []string{rel}, dirSave(rel), meta); err != nil {
				return GrepOutput{}, err
			}
			limit := limitOr(in.Limit, DefaultGrepLimit)
			matches, err := b.files.Grep(ctx, in.Pattern, fsys.GrepOptions{Path: rel, Include: in.Include, IgnoreCase: in.IgnoreCase, Limit: limit + 1})
			if errors.Is(err, fsys.ErrBadPattern) {
				return GrepOutput{}, b.failure(err, in.Include)
			}
			if err != nil {
				return GrepOutput{}, b.failure(err, in.Path)
			}
			out := GrepOutput{Matches: matches, Truncated: len(matches) > limit}
			if out.Truncated {
				out.Matches = matches[:limit]
			}
			if out.Matches == nil {
				out.Matches = []fsys.Match{}
			}
			return out, nil
		})
	t.Project = tool.ProjectTyped(func(in GrepInput, out GrepOutput) []tool.Part {
		if len(out.Matches) == 0 {
			return []tool.Part{tool.Text(fmt.Sprintf("no lines match %q", in.Pattern))}
		}
		var sb strings.Builder
		for i, m := range out.Matches {
			if i > 0 {
				sb.WriteByte('\n')
			}
			fmt.Fprintf(&sb, "%s:%d: %s", m.Path, m.Line, m.Text)
		}
		if out.Truncated {
			fmt.Fprintf(&sb, "\n\n(showing the first %d matches; narrow the search or raise limit to see more)", len(out.Matches))
		}
		return []tool.Part{tool.Text(sb.String())}
	})
	return t
}

// globSave covers the pattern's leading literal directory and everything below it.
func globSave(rel string) []string {
	segs := strings.Split(rel, "/")
	n := 0
	for n < len(segs)-1 && !strings.ContainsAny(segs[n], `*?[\{`) {
		n++
	}
	if n == 0 {
		return []string{"*"}
	}
	return []string{strings.Join(segs[:n], "/") + "/*"}
}

func limitOr(n, def int) int {
	if n <= 0 {
		return def
	}
	return min(n, maxResultsPerCall)
}

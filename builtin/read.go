package builtin

import (
	"context"
	"fmt"
	"strings"

	"github.com/toolhost/toolhost/tool"
)

// ReadInput is the read tool's input.
type ReadInput struct {
	Path   string `json:"path" jsonschema_description:"The file to read, relative to the workspace root (or absolute inside it)."`
	Offset int    `json:"offset,omitempty" jsonschema:"minimum=1" jsonschema_description:"The 1-based line number to start at. Default 1."`
	Limit  int    `json:"limit,omitempty" jsonschema:"minimum=1" jsonschema_description:"The most lines to return. Default 2000."`
}

// ReadOutput is the read tool's output.
type ReadOutput struct {
	// Path is the file's root-relative path.
	Path string `json:"path" jsonschema_description:"The file's path relative to the workspace root."`
	// Content holds the lines, each prefixed by its number and a tab (cat -n).
	Content    string `json:"content" jsonschema_description:"The lines read, each prefixed by its line number and a tab."`
	StartLine  int    `json:"start_line" jsonschema_description:"The number of the first line returned (0 when none)."`
	EndLine    int    `json:"end_line" jsonschema_description:"The number of the last line returned (0 when none)."`
	TotalLines int    `json:"total_lines" jsonschema_description:"The number of lines in the file."`
}

func (b *tools) read() tool.Tool {
	t := tool.New("Read a text file in the workspace. Returns its lines numbered like `cat -n`, "+
		"up to 2000 lines from offset; use offset and limit to read further in long files. Binary files are refused.",
		func(ctx context.Context, inv tool.Invocation, in ReadInput) (ReadOutput, error) {
			_, rel, err := b.resolve(in.Path)
			if err != nil {
				return ReadOutput{}, err
			}
			if err := b.assert(ctx, inv, "read", []string{rel}, fileSave(rel), nil); err != nil {
				return ReadOutput{}, err
			}
			start, limit := max(in.Offset, 1), in.Limit
			if limit <= 0 {
				limit = DefaultReadLines
			}
			lines, total, err := b.files.ReadLines(ctx, rel, start, limit)
			if err != nil {
				return ReadOutput{}, b.failure(err, in.Path)
			}
			if start > 1 && start > total {
				return ReadOutput{}, tool.Failf("offset %d is past the end of %q, which has %d lines", start, rel, total)
			}
			out := ReadOutput{Path: rel, TotalLines: total}
			if len(lines) > 0 {
				var sb strings.Builder
				for i, l := range lines {
					if i > 0 {
						sb.WriteByte('\n')
					}
					fmt.Fprintf(&sb, "%6d\t%s", start+i, l)
				}
				out.Content = sb.String()
				out.StartLine, out.EndLine = start, start+len(lines)-1
			}
			return out, nil
		})
	t.Project = tool.ProjectTyped(func(_ ReadInput, out ReadOutput) []tool.Part {
		switch {
		case out.TotalLines == 0:
			return []tool.Part{tool.Text(fmt.Sprintf("(%s is empty)", out.Path))}
		case out.EndLine < out.TotalLines:
			return []tool.Part{tool.Text(fmt.Sprintf("%s\n\n(showing lines %d-%d of %d; use offset=%d to read more)",
				out.Content, out.StartLine, out.EndLine, out.TotalLines, out.EndLine+1))}
		}
		return []tool.Part{tool.Text(out.Content)}
	})
	return t
}

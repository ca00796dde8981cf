package builtin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/toolhost/toolhost/tool"
)

// ListInput is the list tool's input.
type ListInput struct {
	Path string `json:"path,omitempty" jsonschema_description:"The directory to list, relative to the workspace root (or absolute inside it). Default: the root."`
}

// ListOutput is the list tool's output.
type ListOutput struct {
	Path    string      `json:"path" jsonschema_description:"The directory's path relative to the workspace root."`
	Entries []ListEntry `json:"entries" jsonschema_description:"The directory's entries sorted by name."`
}

// ListEntry is one directory entry; symlinks are not followed.
type ListEntry struct {
	Name    string    `json:"name" jsonschema_description:"The entry's name."`
	Type    string    `json:"type" jsonschema:"enum=file,enum=dir,enum=symlink,enum=other" jsonschema_description:"What the entry is; symlinks are not followed."`
	Size    int64     `json:"size" jsonschema_description:"The size in bytes."`
	ModTime time.Time `json:"mod_time" jsonschema_description:"The last modification time (UTC)."`
}

func (b *tools) list() tool.Tool {
	t := tool.New("List the entries of a directory in the workspace: names, types (file, dir, symlink, other), sizes and modification times.",
		func(ctx context.Context, inv tool.Invocation, in ListInput) (ListOutput, error) {
			_, rel, err := b.resolve(in.Path)
			if err != nil {
				return ListOutput{}, err
			}
			if err := b.assert(ctx, inv, "list", []string{rel}, dirSave(rel), nil); err != nil {
				return ListOutput{}, err
			}
			entries, err := b.files.List(ctx, rel)
			if err != nil {
				return ListOutput{}, b.failure(err, in.Path)
			}
			out := ListOutput{Path: rel, Entries: make([]ListEntry, len(entries))}
			for i, e := range entries {
				out.Entries[i] = ListEntry{Name: e.Name, Type: e.Type, Size: e.Size, ModTime: e.ModTime.UTC()}
			}
			return out, nil
		})
	t.Project = tool.ProjectTyped(func(_ ListInput, out ListOutput) []tool.Part {
		if len(out.Entries) == 0 {
			return []tool.Part{tool.Text(fmt.Sprintf("(%s is empty)", out.Path))}
		}
		var sb strings.Builder
		for i, e := range out.Entries {
			if i > 0 {
				sb.WriteByte('\n')
			}
			switch e.Type {
			case "dir":
				sb.WriteString(e.Name + "/")
			case "symlink":
				sb.WriteString(e.Name + "@")
			case "file":
				fmt.Fprintf(&sb, "%s (%d bytes)", e.Name, e.Size)
			default:
				sb.WriteString(e.Name + " (" + e.Type + ")")
			}
		}
		return []tool.Part{tool.Text(sb.String())}
	})
	return t
}

// Command todos is an example of a TRUSTED toolhost plugin: one the Location config
// marks "trusted": true, so its activation receives the Location's FileSystem and
// Permission services (loc.Services). It uses them the way the built-in tools do:
// each tool formulates its own permission request (action, resources, patterns to
// save on "always") before touching files, and reads only through the FileSystem,
// which refuses anything outside the Location root.
//
// An untrusted plugin gets loc.Services == nil; the host then checks permission
// itself before each call (action = the tool's name, resources ["*"]).
package main

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/toolhost/toolhost/sdk"
)

// ScanInput is todo_scan's input.
type ScanInput struct {
	Path string `json:"path,omitempty" jsonschema:"description=Directory or file to scan, relative to the workspace; default: the whole workspace."`
}

// Todo is one TODO line.
type Todo struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// ScanOutput is todo_scan's output.
type ScanOutput struct {
	Todos []Todo `json:"todos"`
}

func activate(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
	if loc.Services == nil {
		return errors.New("todos: this plugin needs the Location's services; mark it \"trusted\": true in the Location config")
	}
	fs, perm := loc.Services.FileSystem, loc.Services.Permission

	scan := sdk.NewTool("Lists the TODO lines of the workspace's files, with their paths and line numbers.",
		func(ctx context.Context, inv sdk.Invocation, in ScanInput) (ScanOutput, error) {
			// Resolve first, so the permission request names the real place and a
			// path outside the workspace is refused before anyone is asked.
			abs, err := fs.Resolve(ctx, in.Path)
			if err != nil {
				return ScanOutput{}, sdk.Failf("cannot scan %q: %v", in.Path, err)
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(abs, loc.Directory), "/")
			if rel == "" {
				rel = "."
			}
			// Ask, as a built-in would. A refusal is already a *sdk.ToolFailure and a
			// decline ends the call like an interruption: return either unchanged.
			if err := perm.Assert(ctx, sdk.PermissionRequest{
				Invocation: inv,
				Tool:       "todo_scan",
				Action:     "todo_scan",
				Resources:  []string{rel},
				Save:       []string{path.Join(rel, "*")},
				Metadata:   map[string]any{"root": loc.Directory},
			}); err != nil {
				return ScanOutput{}, err
			}
			matches, err := fs.Grep(ctx, `\bTODO\b`, sdk.GrepOptions{Path: in.Path, Limit: 500})
			if err != nil {
				return ScanOutput{}, sdk.Failf("scan %s: %v", rel, err)
			}
			out := ScanOutput{Todos: []Todo{}}
			for _, m := range matches {
				out.Todos = append(out.Todos, Todo{Path: m.Path, Line: m.Line, Text: strings.TrimSpace(m.Text)})
			}
			return out, nil
		})
	scan.Project = sdk.ProjectTyped(func(_ ScanInput, out ScanOutput) []sdk.Part {
		var b strings.Builder
		fmt.Fprintf(&b, "%d TODOs", len(out.Todos))
		for _, t := range out.Todos {
			fmt.Fprintf(&b, "\n%s:%d: %s", t.Path, t.Line, t.Text)
		}
		return []sdk.Part{sdk.Text(b.String())}
	})

	_, err := tools.Register(ctx, map[string]sdk.Tool{"todo_scan": scan})
	return err
}

func main() { sdk.Serve(sdk.ActivateFunc(activate)) }

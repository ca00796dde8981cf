package builtin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/toolhost/toolhost/fsys"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/tool"
)

// The defaults of the tools' optional inputs.
const (
	DefaultReadLines  = 2000
	DefaultGlobLimit  = 1000
	DefaultGrepLimit  = 500
	maxResultsPerCall = 100000
)

// Tools returns fresh built-in tools keyed by name — "read", "list", "glob" and
// "grep" — capturing files and perm; both are required (Tools panics on nil, a
// programming error). The tools are safe for concurrent use.
func Tools(files *fsys.FS, perm *permission.Service) map[string]tool.Tool {
	if files == nil || perm == nil {
		panic("builtin: Tools needs a FileSystem and a Permission service")
	}
	b := &tools{files: files, perm: perm}
	return map[string]tool.Tool{
		"read": b.read(),
		"list": b.list(),
		"glob": b.glob(),
		"grep": b.grep(),
	}
}

type tools struct {
	files *fsys.FS
	perm  *permission.Service
}

// assert asks for permission to run tool on resources.
func (b *tools) assert(ctx context.Context, inv tool.Invocation, tool string, resources, save []string, meta map[string]any) error {
	md := map[string]any{"root": b.files.Root()}
	for k, v := range meta {
		md[k] = v
	}
	return b.perm.Assert(ctx, permission.Request{
		SessionID: inv.SessionID,
		Agent:     inv.Agent,
		Source:    permission.Source{Type: "tool", Tool: tool, MessageID: inv.AssistantMessageID, CallID: inv.ToolCallID, ToolSource: "builtin"},
		Action:    tool,
		Resources: resources,
		Save:      save,
		Metadata:  md,
	})
}

// resolve maps a user path to its absolute and root-relative forms, classifying a
// refusal as a tool failure.
func (b *tools) resolve(p string) (abs, rel string, err error) {
	abs, err = b.files.Resolve(p)
	if err != nil {
		return "", "", b.failure(err, p)
	}
	return abs, b.files.Rel(abs), nil
}

// fileSave covers the file's directory and everything below it.
func fileSave(rel string) []string {
	if dir := path.Dir(rel); dir != "." {
		return []string{dir + "/*"}
	}
	return []string{"*"}
}

// dirSave covers a directory and everything below it.
func dirSave(rel string) []string {
	if rel == "." {
		return []string{"*"}
	}
	return []string{rel, rel + "/*"}
}

// failure turns the file system's expected refusals into model-visible failures
// naming p; anything else (interruption, I/O failures) is returned unchanged.
func (b *tools) failure(err error, p string) error {
	if p == "" {
		p = "."
	}
	var msg string
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, fsys.ErrOutsideRoot):
		msg = fmt.Sprintf("%q is outside the workspace (%s); only paths inside it can be used", p, b.files.Root())
	case errors.Is(err, fs.ErrNotExist):
		msg = fmt.Sprintf("%q does not exist", p)
	case errors.Is(err, fsys.ErrIsDir):
		msg = fmt.Sprintf("%q is a directory; use the list tool to see its entries", p)
	case errors.Is(err, fsys.ErrNotDir):
		msg = fmt.Sprintf("%q is not a directory", p)
	case errors.Is(err, fsys.ErrBinary):
		msg = fmt.Sprintf("%q is a binary file; read can only show text files", p)
	case errors.Is(err, fsys.ErrTooLarge), errors.Is(err, fsys.ErrNotRegular),
		errors.Is(err, fsys.ErrInvalidPath), errors.Is(err, fsys.ErrBadPattern), errors.Is(err, fs.ErrPermission):
		msg = fmt.Sprintf("%q: %v", p, cause(err))
	default:
		return err
	}
	return &tool.Failure{Message: msg, Err: err}
}

// cause strips the *fsys.PathError prefix, which repeats the path.
func cause(err error) error {
	var pe *fsys.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

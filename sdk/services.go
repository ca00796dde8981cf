package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/tool"
)

// Services are the Location services a trusted plugin receives (Location.Services).
// Untrusted plugins get nil: their tools' calls are checked by the host instead.
type Services struct {
	FileSystem FileSystem
	Permission Permission
}

// FileSystem is the Location's file system, confined to its root: paths are relative
// to the root or absolute inside it; anything that escapes (.., absolute paths
// outside, symlinks leaving the root) is refused. Safe for concurrent use.
type FileSystem interface {
	// Resolve returns the absolute path inside the root that p names.
	Resolve(ctx context.Context, p string) (string, error)
	// Read returns limit bytes of file p from offset (limit 0: to the end).
	Read(ctx context.Context, p string, offset, limit int64) ([]byte, error)
	// List returns the entries of directory p, sorted by name.
	List(ctx context.Context, p string) ([]FileEntry, error)
	// Glob returns root-relative paths matching pattern ("**" crosses directories).
	Glob(ctx context.Context, pattern string, limit int) ([]string, error)
	// Grep returns lines matching the RE2 pattern under opts.Path.
	Grep(ctx context.Context, pattern string, opts GrepOptions) ([]GrepMatch, error)
}

// FileEntry is one directory entry.
type FileEntry struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
}

// GrepOptions narrow a Grep.
type GrepOptions struct {
	Path    string // file or directory to search; "" is the root
	Include string // glob a file must match
	Limit   int    // most matches; 0: no limit
}

// GrepMatch is one matching line.
type GrepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// Permission is the Location's permission service. Trusted tools formulate and
// sequence their own requests, the way built-ins do.
type Permission interface {
	// Assert returns nil when the request is allowed. A refusal the model should see
	// is a *ToolFailure (return it as is); a decline without a message satisfies
	// errors.Is(err, ErrDeclined) and errors.Is(err, context.Canceled) (return it as
	// is: the call ends like an interruption).
	Assert(ctx context.Context, req PermissionRequest) error
}

// PermissionRequest asks to perform Action on Resources.
type PermissionRequest struct {
	// Invocation identifies the call asking; take it from the executor's argument.
	Invocation Invocation
	// Tool is the name of the tool asking.
	Tool      string
	Action    string
	Resources []string
	// Save are the patterns persisted as allow rules when the person answers "always".
	Save     []string
	Metadata map[string]any
}

// ErrDeclined is [tool.ErrDeclined]: it is matched by the error of a permission
// request declined without a message.
var ErrDeclined = tool.ErrDeclined

// fsClient is the plugin's end of the FileSystem service.
type fsClient struct{ c pluginpb.FileSystemClient }

func (f fsClient) Resolve(ctx context.Context, p string) (string, error) {
	r, err := f.c.Resolve(ctx, &pluginpb.PathRequest{Path: p})
	if err != nil {
		return "", serviceError(err)
	}
	return r.Path, nil
}

func (f fsClient) Read(ctx context.Context, p string, offset, limit int64) ([]byte, error) {
	r, err := f.c.Read(ctx, &pluginpb.ReadRequest{Path: p, Offset: offset, Limit: limit})
	if err != nil {
		return nil, serviceError(err)
	}
	return r.Data, nil
}

func (f fsClient) List(ctx context.Context, p string) ([]FileEntry, error) {
	r, err := f.c.List(ctx, &pluginpb.PathRequest{Path: p})
	if err != nil {
		return nil, serviceError(err)
	}
	entries := make([]FileEntry, len(r.Entries))
	for i, e := range r.Entries {
		entries[i] = FileEntry{Name: e.Name, Type: e.Type, Size: e.Size, ModTime: time.Unix(0, e.ModTimeUnixNano).UTC()}
	}
	return entries, nil
}

func (f fsClient) Glob(ctx context.Context, pattern string, limit int) ([]string, error) {
	r, err := f.c.Glob(ctx, &pluginpb.GlobRequest{Pattern: pattern, Limit: int32(limit)})
	if err != nil {
		return nil, serviceError(err)
	}
	return r.Paths, nil
}

func (f fsClient) Grep(ctx context.Context, pattern string, opts GrepOptions) ([]GrepMatch, error) {
	r, err := f.c.Grep(ctx, &pluginpb.GrepRequest{Pattern: pattern, Path: opts.Path, Include: opts.Include, Limit: int32(opts.Limit)})
	if err != nil {
		return nil, serviceError(err)
	}
	matches := make([]GrepMatch, len(r.Matches))
	for i, m := range r.Matches {
		matches[i] = GrepMatch{Path: m.Path, Line: int(m.Line), Text: m.Text}
	}
	return matches, nil
}

// permissionClient is the plugin's end of the Permission service.
type permissionClient struct{ c pluginpb.PermissionClient }

func (p permissionClient) Assert(ctx context.Context, req PermissionRequest) error {
	var meta []byte
	if req.Metadata != nil {
		var err error
		if meta, err = json.Marshal(req.Metadata); err != nil {
			return fmt.Errorf("sdk: permission metadata: %w", err)
		}
	}
	r, err := p.c.Assert(ctx, &pluginpb.PermissionRequest{
		SessionId: req.Invocation.SessionID,
		Agent:     req.Invocation.Agent,
		Tool:      req.Tool,
		MessageId: req.Invocation.AssistantMessageID,
		CallId:    req.Invocation.ToolCallID,
		Action:    req.Action,
		Resources: req.Resources,
		Save:      req.Save,
		Metadata:  meta,
	})
	if err != nil {
		return serviceError(err)
	}
	switch r.Verdict {
	case pluginpb.PermissionResponse_ALLOWED:
		return nil
	case pluginpb.PermissionResponse_DECLINED:
		return fmt.Errorf("%s: %w", r.Message, ErrDeclined)
	}
	return &ToolFailure{Message: r.Message}
}

func newServices(conn grpc.ClientConnInterface) *Services {
	return &Services{
		FileSystem: fsClient{pluginpb.NewFileSystemClient(conn)},
		Permission: permissionClient{pluginpb.NewPermissionClient(conn)},
	}
}

// serviceError turns a service's gRPC status into an error: a cancelled call keeps
// its context error, anything else carries the host's message.
func serviceError(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errors.New(status.Convert(err).Message())
}

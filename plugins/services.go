package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/fsys"
	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/sdk"
)

// Services are the Location services served to a trusted plugin over the broker,
// beside its Tools capability. Untrusted plugins never get a broker id for them.
type Services struct {
	FS         *fsys.FS
	Permission *permission.Service
}

// fsServer serves a Location's FileSystem.
type fsServer struct {
	pluginpb.UnimplementedFileSystemServer
	fs *fsys.FS
}

func (s *fsServer) Resolve(_ context.Context, req *pluginpb.PathRequest) (*pluginpb.ResolveResponse, error) {
	p, err := s.fs.Resolve(req.Path)
	if err != nil {
		return nil, fsStatus(err)
	}
	return &pluginpb.ResolveResponse{Path: p}, nil
}

func (s *fsServer) Read(ctx context.Context, req *pluginpb.ReadRequest) (*pluginpb.ReadResponse, error) {
	data, err := s.fs.Read(ctx, req.Path, req.Offset, req.Limit)
	if err != nil {
		return nil, fsStatus(err)
	}
	return &pluginpb.ReadResponse{Data: data}, nil
}

func (s *fsServer) List(ctx context.Context, req *pluginpb.PathRequest) (*pluginpb.ListResponse, error) {
	entries, err := s.fs.List(ctx, req.Path)
	if err != nil {
		return nil, fsStatus(err)
	}
	resp := &pluginpb.ListResponse{Entries: make([]*pluginpb.FileEntry, len(entries))}
	for i, e := range entries {
		resp.Entries[i] = &pluginpb.FileEntry{Name: e.Name, Type: e.Type, Size: e.Size, ModTimeUnixNano: e.ModTime.UnixNano()}
	}
	return resp, nil
}

func (s *fsServer) Glob(ctx context.Context, req *pluginpb.GlobRequest) (*pluginpb.PathsResponse, error) {
	paths, err := s.fs.Glob(ctx, req.Pattern, int(req.Limit))
	if err != nil {
		return nil, fsStatus(err)
	}
	return &pluginpb.PathsResponse{Paths: paths}, nil
}

func (s *fsServer) Grep(ctx context.Context, req *pluginpb.GrepRequest) (*pluginpb.GrepResponse, error) {
	matches, err := s.fs.Grep(ctx, req.Pattern, fsys.GrepOptions{Path: req.Path, Include: req.Include, Limit: int(req.Limit)})
	if err != nil {
		return nil, fsStatus(err)
	}
	resp := &pluginpb.GrepResponse{Matches: make([]*pluginpb.GrepMatch, len(matches))}
	for i, m := range matches {
		resp.Matches[i] = &pluginpb.GrepMatch{Path: m.Path, Line: int32(m.Line), Text: m.Text}
	}
	return resp, nil
}

func fsStatus(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, fsys.ErrOutsideRoot):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		return status.Error(codes.NotFound, err.Error())
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// permissionServer serves a Location's Permission service.
type permissionServer struct {
	pluginpb.UnimplementedPermissionServer
	perm   *permission.Service
	source string // the plugin's tool source, stamped on every request
}

func (s *permissionServer) Assert(ctx context.Context, req *pluginpb.PermissionRequest) (*pluginpb.PermissionResponse, error) {
	var meta map[string]any
	if len(req.Metadata) > 0 {
		if err := json.Unmarshal(req.Metadata, &meta); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "permission metadata is not a JSON object: %v", err)
		}
	}
	err := s.perm.Assert(ctx, permission.Request{
		SessionID: req.SessionId,
		Agent:     req.Agent,
		Source:    permission.Source{Type: "tool", Tool: req.Tool, MessageID: req.MessageId, CallID: req.CallId, ToolSource: s.source},
		Action:    req.Action,
		Resources: req.Resources,
		Save:      req.Save,
		Metadata:  meta,
	})
	var failure *sdk.ToolFailure
	switch {
	case err == nil:
		return &pluginpb.PermissionResponse{Verdict: pluginpb.PermissionResponse_ALLOWED}, nil
	case errors.Is(err, permission.ErrDeclined):
		return &pluginpb.PermissionResponse{Verdict: pluginpb.PermissionResponse_DECLINED, Message: err.Error()}, nil
	case errors.As(err, &failure):
		return &pluginpb.PermissionResponse{Verdict: pluginpb.PermissionResponse_DENIED, Message: failure.Message}, nil
	case ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return nil, status.Error(codes.Internal, err.Error())
}

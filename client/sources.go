package client

import (
	"context"
	"errors"
	"io"
	"strings"

	"github.com/toolhost/toolhost/internal/servepb"
)

// Source is the health of one source of a Location (see ListSources in serve.proto).
type Source struct {
	// Kind is "builtin", "plugin", "mcp" or "manifest"; ID is "kind:name". Kind and
	// ID "config" (State "failed") stand for an edit to the config that cannot be
	// applied, while the running config keeps serving (see location.KindConfig).
	Kind, Name, ID string
	// State is "starting", "running", "restarting", "failed" or "stopped".
	State string
	// Generation counts the generations that started; PID is the current one's.
	Generation uint32
	PID        int
	// Containment is "namespace", "cgroup", "subreaper", "none" or ""; Confined is
	// set when Landlock confines the source.
	Containment string
	Confined    bool
	// Layers names what holds its process ("pid", "mount", ..., "seccomp",
	// "host's share", "pids cgroup"; see Source.layers in serve.proto); nil
	// without a process of its own.
	Layers []string
	// Restarts counts generations started again after a crash or failed start.
	Restarts uint32
	// Error is the last error; StderrTail the end of the source's stderr.
	Error, StderrTail string
}

func sourceFrom(p *servepb.Source) Source {
	state := strings.ToLower(strings.TrimPrefix(p.State.String(), "SOURCE_STATE_"))
	return Source{Kind: p.Kind, Name: p.Name, ID: p.Id, State: state, Generation: p.Generation, PID: int(p.Pid),
		Containment: p.Containment, Confined: p.Confined, Layers: p.Layers, Restarts: p.Restarts, Error: p.Error, StderrTail: p.StderrTail}
}

func sourcesFrom(ps []*servepb.Source) []Source {
	out := make([]Source, len(ps))
	for i, p := range ps {
		out[i] = sourceFrom(p)
	}
	return out
}

// ListSources returns the health of every source of an active Location.
func (c *Client) ListSources(ctx context.Context, locationID string) ([]Source, error) {
	resp, err := c.rpc.ListSources(ctx, &servepb.ListSourcesRequest{LocationId: locationID})
	if err != nil {
		return nil, rpcError(ctx, "list sources", err)
	}
	return sourcesFrom(resp.Sources), nil
}

// RestartSource restarts one source of a Location by name ("kind:name" or a bare
// unambiguous name) and returns its status once it serves again.
func (c *Client) RestartSource(ctx context.Context, locationID, name string) (Source, error) {
	resp, err := c.rpc.RestartSource(ctx, &servepb.RestartSourceRequest{LocationId: locationID, Name: name})
	if err != nil {
		return Source{}, rpcError(ctx, "restart "+name, err)
	}
	if resp.Source == nil {
		return Source{}, nil
	}
	return sourceFrom(resp.Source), nil
}

// SourceWatch follows a Location's source health (see WatchSources). Not safe for
// concurrent use.
type SourceWatch struct {
	ctx    context.Context
	cancel context.CancelFunc
	stream servepb.Toolhost_WatchSourcesClient
}

// WatchSources starts watching a Location's sources. The first Next returns every
// source; each later one the sources that changed. Close it (or cancel ctx) when done.
func (c *Client) WatchSources(ctx context.Context, locationID string) (*SourceWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.WatchSources(ctx, &servepb.WatchSourcesRequest{LocationId: locationID})
	if err != nil {
		cancel()
		return nil, rpcError(ctx, "watch sources", err)
	}
	return &SourceWatch{ctx: ctx, cancel: cancel, stream: stream}, nil
}

// ErrWatchEnded is returned by SourceWatch.Next when the Location was deactivated or
// the server shut down.
var ErrWatchEnded = errors.New("client: the watch ended")

// Next blocks for the next event's sources. It returns ErrWatchEnded when the server
// ended the watch, and another error when ctx ended or the connection failed.
func (w *SourceWatch) Next() ([]Source, error) {
	ev, err := w.stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, ErrWatchEnded
	}
	if err != nil {
		return nil, rpcError(w.ctx, "watch sources", err)
	}
	return sourcesFrom(ev.Sources), nil
}

// Close ends the watch.
func (w *SourceWatch) Close() { w.cancel() }

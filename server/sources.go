package server

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/supervise"
)

func (a *api) ListSources(_ context.Context, req *servepb.ListSourcesRequest) (*servepb.ListSourcesResponse, error) {
	loc, err := a.s.location(req.LocationId)
	if err != nil {
		return nil, err
	}
	return &servepb.ListSourcesResponse{Sources: sourcesProto(loc.Sources())}, nil
}

func (a *api) WatchSources(req *servepb.WatchSourcesRequest, stream servepb.Toolhost_WatchSourcesServer) error {
	loc, err := a.s.location(req.LocationId)
	if err != nil {
		return err
	}
	ctx := stream.Context()
	end, err := watch(ctx, "WatchSources")
	if err != nil {
		return err
	}
	defer end()
	changed := loc.SourcesChanged()
	sts := loc.Sources()
	if err := stream.Send(&servepb.SourcesEvent{Sources: sourcesProto(sts)}); err != nil {
		return err
	}
	last := map[string]*servepb.Source{}
	for _, p := range sourcesProto(sts) {
		last[p.Id] = p
	}
	for {
		closing := false
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-a.s.ctx.Done():
			return nil
		case <-loc.Done():
			closing = true
		case <-changed:
		}
		changed = loc.SourcesChanged()
		ev := &servepb.SourcesEvent{}
		now := map[string]bool{}
		for _, p := range sourcesProto(loc.Sources()) {
			if closing {
				p.State = servepb.SourceState_SOURCE_STATE_STOPPED
			}
			now[p.Id] = true
			if prev := last[p.Id]; prev == nil || !sameSource(prev, p) {
				ev.Sources = append(ev.Sources, p)
				last[p.Id] = p
			}
		}
		// A source a config reload removed (or the config entry, once a fix
		// applies) is sent once more, stopped.
		for id, p := range last {
			if !now[id] {
				gone := proto.Clone(p).(*servepb.Source)
				gone.State, gone.Error = servepb.SourceState_SOURCE_STATE_STOPPED, ""
				ev.Sources = append(ev.Sources, gone)
				delete(last, id)
			}
		}
		if len(ev.Sources) > 0 {
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
		if closing {
			return nil
		}
	}
}

func sameSource(a, b *servepb.Source) bool {
	return a.State == b.State && a.Generation == b.Generation && a.Pid == b.Pid &&
		a.Restarts == b.Restarts && a.Error == b.Error
}

func (a *api) RestartSource(ctx context.Context, req *servepb.RestartSourceRequest) (*servepb.RestartSourceResponse, error) {
	loc, err := a.s.location(req.LocationId)
	if err != nil {
		return nil, err
	}
	err = loc.RestartSource(ctx, req.Name)
	switch {
	case errors.Is(err, location.ErrUnknownSource):
		return nil, status.Error(codes.NotFound, err.Error())
	case err != nil && ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, location.ErrAmbiguousSource), errors.Is(err, location.ErrNotRestartable):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	resp := &servepb.RestartSourceResponse{}
	for _, st := range loc.Sources() {
		if st.ID == req.Name || st.Name == req.Name {
			resp.Source = sourceProto(st)
			break
		}
	}
	return resp, nil
}

func sourcesProto(sts []location.SourceStatus) []*servepb.Source {
	out := make([]*servepb.Source, len(sts))
	for i, st := range sts {
		out[i] = sourceProto(st)
	}
	return out
}

var sourceStates = map[supervise.State]servepb.SourceState{
	supervise.Starting:   servepb.SourceState_SOURCE_STATE_STARTING,
	supervise.Running:    servepb.SourceState_SOURCE_STATE_RUNNING,
	supervise.Restarting: servepb.SourceState_SOURCE_STATE_RESTARTING,
	supervise.Failed:     servepb.SourceState_SOURCE_STATE_FAILED,
	supervise.Stopped:    servepb.SourceState_SOURCE_STATE_STOPPED,
}

func sourceProto(st location.SourceStatus) *servepb.Source {
	p := &servepb.Source{
		Kind: st.Kind, Name: st.Name, Id: st.ID, State: sourceStates[st.State],
		Generation: uint32(st.Generation), Pid: int32(st.PID), Containment: st.Containment, Confined: st.Confined,
		Restarts: uint32(st.Restarts), StderrTail: st.Stderr, Layers: st.Layers,
	}
	if st.Err != nil {
		p.Error = st.Err.Error()
	}
	return p
}

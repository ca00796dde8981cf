package server

import (
	"context"
	"errors"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/internal/tracectx"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/provider"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// api implements servepb.ToolhostServer.
type api struct {
	servepb.UnimplementedToolhostServer
	s *Server
}

// handleKey is the context key of the handle a served call runs for.
type handleKey struct{}

// handleOfCall returns the handle whose call ctx belongs to, or nil.
func handleOfCall(ctx context.Context) *handle {
	h, _ := ctx.Value(handleKey{}).(*handle)
	return h
}

func (a *api) OpenClient(ctx context.Context, _ *servepb.OpenClientRequest) (*servepb.OpenClientResponse, error) {
	c := connFrom(ctx)
	if c == nil {
		return nil, status.Error(codes.Internal, "server: call without a connection identity")
	}
	h, err := c.open()
	if err != nil {
		return nil, err
	}
	return &servepb.OpenClientResponse{ClientId: h.id}, nil
}

func (a *api) CloseClient(ctx context.Context, req *servepb.CloseClientRequest) (*servepb.CloseClientResponse, error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	if !h.close(errClientClosed) {
		return nil, status.Errorf(codes.NotFound, "client handle %q is already closed", req.ClientId)
	}
	return &servepb.CloseClientResponse{}, nil
}

func (a *api) ActivateLocation(ctx context.Context, req *servepb.ActivateLocationRequest) (*servepb.ActivateLocationResponse, error) {
	if !filepath.IsAbs(req.Directory) {
		return nil, status.Errorf(codes.InvalidArgument, "directory %q is not absolute", req.Directory)
	}
	loc, already, err := a.s.Activate(ctx, req.Directory)
	switch {
	case err != nil && (errors.Is(err, ErrShutdown) || a.s.ctx.Err() != nil):
		return nil, status.Error(codes.Unavailable, "toolhost serve is shutting down")
	case err != nil && ctx.Err() != nil:
		return nil, status.FromContextError(ctx.Err()).Err()
	case err != nil:
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &servepb.ActivateLocationResponse{Location: summarize(loc), AlreadyActive: already}, nil
}

func (a *api) DeactivateLocation(ctx context.Context, req *servepb.DeactivateLocationRequest) (*servepb.DeactivateLocationResponse, error) {
	err := a.s.Deactivate(ctx, req.LocationId)
	if errors.Is(err, ErrUnknownLocation) {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &servepb.DeactivateLocationResponse{}, nil
}

func (a *api) ListLocations(context.Context, *servepb.ListLocationsRequest) (*servepb.ListLocationsResponse, error) {
	resp := &servepb.ListLocationsResponse{}
	for _, loc := range a.s.Locations() {
		resp.Locations = append(resp.Locations, summarize(loc))
	}
	return resp, nil
}

// summarize describes an active Location: its tools now and its plugins' states.
func summarize(loc *location.Location) *servepb.Location {
	out := &servepb.Location{Id: loc.ID(), WorkspaceId: loc.Config().WorkspaceID}
	if q, err := loc.Prepare(); err == nil {
		for _, d := range q.Definitions() {
			out.Tools = append(out.Tools, &servepb.ToolSummary{Name: d.Name, Description: d.Description})
		}
	}
	for _, sup := range loc.Plugins() {
		st, err := sup.State()
		ps := &servepb.PluginStatus{Name: sup.Name(), State: string(st)}
		if err != nil {
			ps.Error = err.Error()
		}
		if inst := sup.Current(); inst != nil {
			ps.Generation = uint32(inst.Generation())
			ps.Pid = int32(inst.PID())
		}
		out.Plugins = append(out.Plugins, ps)
	}
	return out
}

func (a *api) PrepareRequest(ctx context.Context, req *servepb.PrepareRequestRequest) (*servepb.PrepareRequestResponse, error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	profile, err := provider.Parse(req.Provider)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	loc, err := a.s.location(req.LocationId)
	if err != nil {
		return nil, err
	}
	var opts []registry.PrepareOption
	if req.AllTools {
		opts = append(opts, registry.OfferAll())
	}
	q, err := loc.Prepare(opts...)
	switch {
	case errors.Is(err, location.ErrClosing):
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	case err != nil:
		return nil, status.Errorf(codes.NotFound, "location %q: %v", req.LocationId, err)
	}
	resp := &servepb.PrepareRequestResponse{}
	for _, d := range q.Definitions() {
		schema, problems := provider.Check(profile, provider.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema})
		resp.Definitions = append(resp.Definitions, definitionProto(d, schema))
		for _, p := range problems {
			resp.Problems = append(resp.Problems, &servepb.ToolProblem{Tool: d.Name, Pointer: p.Pointer, Message: p.Message})
		}
	}
	r := &request{id: newID("req_"), loc: loc.ID(), q: q, calls: map[string]*call{}}
	c := h.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case h.closed:
		return nil, status.Errorf(codes.NotFound, "client handle %q closed meanwhile", h.id)
	case len(h.requests) >= a.s.opts.MaxRequests:
		return nil, status.Errorf(codes.ResourceExhausted, "this client handle holds %d Requests, the most it may; release some (ReleaseRequest)", len(h.requests))
	}
	h.requests[r.id] = r
	resp.RequestId = r.id
	return resp, nil
}

func (a *api) ReleaseRequest(ctx context.Context, req *servepb.ReleaseRequestRequest) (*servepb.ReleaseRequestResponse, error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	h.conn.mu.Lock()
	_, ok := h.requests[req.RequestId]
	delete(h.requests, req.RequestId)
	h.conn.mu.Unlock()
	if !ok {
		return nil, notFoundRequest(req.RequestId)
	}
	return &servepb.ReleaseRequestResponse{}, nil
}

func notFoundRequest(id string) error {
	return status.Errorf(codes.NotFound, "no Request %q for this client handle", id)
}

func (a *api) CancelCall(ctx context.Context, req *servepb.CancelCallRequest) (*servepb.CancelCallResponse, error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	h.conn.mu.Lock()
	r, ok := h.requests[req.RequestId]
	var cl *call
	if ok {
		cl = r.calls[req.ToolCallId]
	}
	h.conn.mu.Unlock()
	switch {
	case !ok:
		return nil, notFoundRequest(req.RequestId)
	case cl == nil:
		return nil, status.Errorf(codes.NotFound, "no call %q in flight on Request %q", req.ToolCallId, req.RequestId)
	}
	cl.cancel(errCancelCall)
	return &servepb.CancelCallResponse{}, nil
}

func (a *api) Settle(ctx context.Context, req *servepb.SettleRequest) (*servepb.SettleResponse, error) {
	s, callErr, err := a.settle(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	if callErr != nil {
		// The RPC itself ended: the client is gone, so no result is wanted.
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return &servepb.SettleResponse{Result: &servepb.SettleResponse_Error{Error: callError(callErr)}}, nil
	}
	return &servepb.SettleResponse{Result: &servepb.SettleResponse_Settlement{Settlement: settlementProto(s)}, RunnerHint: s.Hint}, nil
}

func (a *api) SettleStream(req *servepb.SettleRequest, stream servepb.Toolhost_SettleStreamServer) error {
	h, err := handleFrom(stream.Context(), req.ClientId)
	if err != nil {
		return err
	}
	out := newProgressSender(a.s, h, stream)
	s, callErr, err := a.settle(stream.Context(), req, out.push)
	if err != nil {
		out.stop()
		return err
	}
	final := &servepb.SettleEvent{}
	if callErr != nil {
		final.Event = &servepb.SettleEvent_Error{Error: callError(callErr)}
	} else {
		final.Event = &servepb.SettleEvent_Settlement{Settlement: settlementProto(s)}
		final.RunnerHint = s.Hint
	}
	return out.finish(final)
}

// settle settles one call for its handle, reporting progress to progress (if set).
// It returns the settlement, or callErr when the call ran but did not settle, or err
// (a status) when it could not run at all.
func (a *api) settle(ctx context.Context, req *servepb.SettleRequest, progress func(sdk.Progress)) (s *registry.Settlement, callErr, err error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, nil, err
	}
	ctx = tracectx.FromIncoming(ctx) // the runner's trace, if it sent one
	inv := req.GetInvocation()
	if inv.GetToolCallId() == "" {
		return nil, nil, status.Error(codes.InvalidArgument, "invocation.tool_call_id is required")
	}
	if n := a.s.inFlight.Add(1); n > int64(a.s.opts.MaxCalls) {
		a.s.inFlight.Add(-1)
		return nil, nil, status.Errorf(codes.ResourceExhausted, "call %q of tool %q refused: toolhost serve has %d calls in flight, the most it runs at once (every client's together); settle it again once one has ended",
			inv.ToolCallId, req.Name, a.s.opts.MaxCalls)
	}
	defer a.s.inFlight.Add(-1)
	callCtx, cancel := context.WithCancelCause(context.WithValue(ctx, handleKey{}, h))
	defer cancel(nil)
	stop := context.AfterFunc(a.s.ctx, func() { cancel(context.Cause(a.s.ctx)) })
	defer stop()

	c := h.conn
	c.mu.Lock()
	r, ok := h.requests[req.RequestId]
	switch {
	case !ok:
		c.mu.Unlock()
		return nil, nil, notFoundRequest(req.RequestId)
	case r.calls[inv.ToolCallId] != nil:
		c.mu.Unlock()
		return nil, nil, status.Errorf(codes.AlreadyExists, "call %q is already in flight on Request %q", inv.ToolCallId, req.RequestId)
	}
	r.calls[inv.ToolCallId] = &call{cancel: cancel}
	c.mu.Unlock()
	key := callKey{loc: r.loc, session: inv.SessionId, callID: inv.ToolCallId}
	a.s.mu.Lock()
	a.s.calls[key] = h
	a.s.mu.Unlock()
	// The call is forgotten before its result is sent, so a client may reuse the id
	// as soon as it has the result.
	defer func() {
		a.s.mu.Lock()
		if a.s.calls[key] == h {
			delete(a.s.calls, key)
		}
		a.s.mu.Unlock()
		c.mu.Lock()
		delete(r.calls, inv.ToolCallId)
		c.mu.Unlock()
	}()

	// The call's tools reach the handle's WatchInteractions streams with sdk.Ask and
	// sdk.Sample.
	callCtx = sdk.WithInteractor(callCtx, &callInteractor{s: a.s, h: h, call: &servepb.InteractionCall{
		LocationId: r.loc, RequestId: r.id, SessionId: inv.SessionId, ToolCallId: inv.ToolCallId, Tool: req.Name,
	}})
	input := []byte(req.InputJson)
	s, callErr = r.q.Settle(callCtx, registry.Call{
		Name:  req.Name,
		Input: input,
		Invocation: sdk.Invocation{
			SessionID:          inv.SessionId,
			Agent:              inv.Agent,
			AssistantMessageID: inv.AssistantMessageId,
			ToolCallID:         inv.ToolCallId,
		},
		Progress: progress,
	})
	return s, callErr, nil
}

// callError classifies an error Settle returned instead of a settlement.
func callError(err error) *servepb.CallError {
	var defect *registry.DefectError
	switch {
	case errors.Is(err, context.Canceled):
		return &servepb.CallError{Kind: servepb.CallError_INTERRUPTED, Message: err.Error()}
	case errors.As(err, &defect):
		return &servepb.CallError{Kind: servepb.CallError_DEFECT, Message: err.Error()}
	}
	return &servepb.CallError{Kind: servepb.CallError_OPERATIONAL, Message: err.Error()}
}

func (a *api) WatchAsks(req *servepb.WatchAsksRequest, stream servepb.Toolhost_WatchAsksServer) error {
	ctx := stream.Context()
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return err
	}
	if req.LocationId != "" {
		if _, err := a.s.location(req.LocationId); err != nil {
			return err
		}
	}
	end, err := watch(ctx, "WatchAsks")
	if err != nil {
		return err
	}
	defer end()
	w, pending := a.s.askWatchers.add(h, req.LocationId, a.s.asks, askedEvent)
	defer a.s.askWatchers.remove(w)
	return serveWatch(a, ctx, h, stream.Send, pending, &servepb.AskEvent{Event: &servepb.AskEvent_Synced{Synced: true}}, w.events, w.dropped, "asks")
}

// serveWatch serves a watch stream (WatchAsks, WatchInteractions): the events
// pending, then synced, then each new event, until the watcher is dropped for
// falling behind (what names its events in the error), its handle ends, the
// stream ends or the server shuts down.
func serveWatch[E any](a *api, ctx context.Context, h *handle, send func(E) error, pending []E, synced E, events <-chan E, dropped <-chan struct{}, what string) error {
	for _, ev := range append(pending, synced) {
		if err := send(ev); err != nil {
			return err
		}
	}
	for {
		select {
		case ev := <-events:
			if err := send(ev); err != nil {
				return err
			}
		case <-dropped:
			return status.Error(codes.ResourceExhausted, what+" came faster than this watcher read them; watch again")
		case <-h.done:
			return nil
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-a.s.ctx.Done():
			return status.Error(codes.Unavailable, "toolhost serve is shutting down")
		}
	}
}

func (a *api) AnswerAsk(ctx context.Context, req *servepb.AnswerAskRequest) (*servepb.AnswerAskResponse, error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	var reply permission.Reply
	switch req.Reply {
	case servepb.AnswerAskRequest_ONCE:
		reply = permission.Once
	case servepb.AnswerAskRequest_ALWAYS:
		reply = permission.Always
	case servepb.AnswerAskRequest_REJECT:
		reply = permission.Reject
	default:
		return nil, status.Error(codes.InvalidArgument, "reply must be ONCE, ALWAYS or REJECT")
	}
	if err := a.s.answer(h, req.Id, permission.Answer{Reply: reply, Message: req.Message}); err != nil {
		return nil, err
	}
	return &servepb.AnswerAskResponse{}, nil
}

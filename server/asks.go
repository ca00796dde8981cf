package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/permission"
)

// ErrNobodyWatching is the Asker's error for an ask made while no client handle
// watches asks for it (see WatchAsks), rather than waiting for an answer that cannot
// come. It wraps permission.ErrNoOneToAsk, so the call gets the same deny as with no
// one to ask at all: a model-visible tool failure that only says permission was
// denied, and the settle result's runner_hint saying how to allow the request in the
// config.
var ErrNobodyWatching = fmt.Errorf("server: no client is watching permission asks for this call (WatchAsks): %w", permission.ErrNoOneToAsk)

// ask is one permission ask parked until a client answers it.
type ask struct {
	id    string
	seq   uint64 // the order it became pending in (Server.pendingSeq)
	loc   string
	req   permission.Request
	owner *handle // nil: not attributed to a call; any watcher of the Location sees it
}

func (a *ask) proto() *servepb.Ask {
	p := &servepb.Ask{
		Id:         a.id,
		LocationId: a.loc,
		SessionId:  a.req.SessionID,
		Agent:      a.req.Agent,
		SourceType: a.req.Source.Type,
		SourceTool: a.req.Source.Tool,
		MessageId:  a.req.Source.MessageID,
		CallId:     a.req.Source.CallID,
		Action:     a.req.Action,
		Resources:  slices.Clone(a.req.Resources),
		Save:       slices.Clone(a.req.Save),
	}
	if len(a.req.Metadata) > 0 {
		data, _ := json.Marshal(a.req.Metadata)
		p.MetadataJson = string(data)
	}
	return p
}

func askedEvent(a *ask) *servepb.AskEvent {
	return &servepb.AskEvent{Event: &servepb.AskEvent_Asked{Asked: a.proto()}}
}

// seenBy reports whether a watcher of handle h and Location loc may see (and
// answer) a: one of its Location, and of its handle unless a is not attributed.
func (a *ask) pendingSeq() uint64 { return a.seq }

func (a *ask) seenBy(h *handle, loc string) bool {
	return (loc == "" || loc == a.loc) && (a.owner == nil || a.owner == h)
}

// locAsker is the permission.Asker of one Location: it parks each ask until a
// client answers it through AnswerAsk, or the ask's context ends.
type locAsker struct {
	s   *Server
	loc string
}

var _ permission.Asker = (*locAsker)(nil)

// Ask parks the ask. The permission service cancels ctx once the ask is answered
// (AnswerAsk answers through the service), or when the call ends.
func (l *locAsker) Ask(ctx context.Context, id string, req permission.Request) (permission.Answer, error) {
	s := l.s
	a := &ask{id: id, loc: l.loc, req: req, owner: handleOfCall(ctx)}
	s.mu.Lock()
	if a.owner == nil {
		// Not asked from a served call's context (a trusted plugin asks over its own
		// connection): find the call by its identity.
		a.owner = s.calls[callKey{loc: l.loc, session: req.SessionID, callID: req.Source.CallID}]
	}
	if !s.askWatchers.watchedLocked(a) {
		s.mu.Unlock()
		return permission.Answer{}, ErrNobodyWatching
	}
	s.pendingSeq++
	a.seq = s.pendingSeq
	s.asks[id] = a
	s.askWatchers.broadcastLocked(a, askedEvent(a))
	s.mu.Unlock()

	<-ctx.Done()

	s.mu.Lock()
	delete(s.asks, id)
	s.askWatchers.broadcastLocked(a, &servepb.AskEvent{Event: &servepb.AskEvent_Resolved{Resolved: id}})
	s.mu.Unlock()
	return permission.Answer{}, context.Cause(ctx)
}

// answer answers ask id for handle h, through the Location's permission service
// (which applies the answer, saves "always" approvals, and releases the parked Ask).
func (s *Server) answer(h *handle, id string, ans permission.Answer) error {
	s.mu.Lock()
	a, ok := s.asks[id]
	s.mu.Unlock()
	if !ok || (a.owner != nil && a.owner != h) {
		return status.Errorf(codes.NotFound, "no pending ask %q for this client handle", id)
	}
	loc, err := s.location(a.loc)
	if err != nil {
		return err
	}
	svc := loc.Permission()
	if svc == nil {
		return status.Errorf(codes.FailedPrecondition, "location %q has no permission service", a.loc)
	}
	err = svc.Reply(id, ans)
	var serr *permission.StateError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, permission.ErrUnknownAsk):
		return status.Errorf(codes.NotFound, "no pending ask %q: %v", id, err)
	case errors.As(err, &serr):
		return status.Error(codes.Internal, fmt.Sprintf("saving the \"always\" approval failed, so it was not given (the call fails with this error): %v", err))
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

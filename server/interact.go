package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/sdk"
)

// ErrSampleFailed is what errors.Is finds in the error a tool's sdk.Sample gets when
// the runner answered its sampling request with an error (AnswerSample); the
// runner's message follows it.
var ErrSampleFailed = errors.New("server: the runner could not sample")

// interaction is one question (sdk.Ask) or sampling request (sdk.Sample) of a served
// call, parked until its handle answers it or the call ends.
type interaction struct {
	id    string
	seq   uint64 // the order it became pending in (Server.pendingSeq)
	loc   string
	owner *handle
	ev    *servepb.InteractionEvent // the question or sample event
	// question is set for a question: AnswerQuestion checks answers against it.
	question *sdk.Question
	// answer receives one sdk.Answer or sampleAnswer; it has room for it, so the
	// answerer never blocks.
	answer chan any
}

// sampleAnswer is a runner's answer to a sampling request.
type sampleAnswer struct {
	res sdk.SampleResult
	err error
}

// seenBy reports whether a watcher of handle h and Location loc may see (and
// answer) in: only the handle of its call.
func (in *interaction) pendingSeq() uint64 { return in.seq }

func (in *interaction) seenBy(h *handle, loc string) bool {
	return in.owner == h && (loc == "" || loc == in.loc)
}

// callInteractor is the sdk.Interactor of one served call: its tools' questions and
// sampling requests go to the WatchInteractions streams of the call's handle.
type callInteractor struct {
	s    *Server
	h    *handle
	call *servepb.InteractionCall
}

var _ sdk.Interactor = (*callInteractor)(nil)

func (ci *callInteractor) Ask(ctx context.Context, q sdk.Question) (sdk.Answer, error) {
	in := &interaction{id: newID("q_"), question: &q}
	in.ev = &servepb.InteractionEvent{Event: &servepb.InteractionEvent_Question{Question: &servepb.Question{
		Id: in.id, Call: ci.call, Message: q.Message, SchemaJson: string(q.Schema),
	}}}
	v, err := ci.put(ctx, "ask", in)
	if err != nil {
		return sdk.Answer{}, err
	}
	return v.(sdk.Answer), nil
}

func (ci *callInteractor) Sample(ctx context.Context, req sdk.SampleRequest) (sdk.SampleResult, error) {
	in := &interaction{id: newID("smp_")}
	p := &servepb.Sampling{
		Id: in.id, Call: ci.call, SystemPrompt: req.SystemPrompt, MaxTokens: int32(min(req.MaxTokens, 1<<31-1)),
		Temperature: req.Temperature, StopSequences: req.StopSequences, ModelHints: req.ModelHints,
	}
	for _, m := range req.Messages {
		p.Messages = append(p.Messages, servepb.SampleMessageOf(m))
	}
	in.ev = &servepb.InteractionEvent{Event: &servepb.InteractionEvent_Sample{Sample: p}}
	v, err := ci.put(ctx, "sample", in)
	if err != nil {
		return sdk.SampleResult{}, err
	}
	a := v.(sampleAnswer)
	return a.res, a.err
}

// put parks in until its handle answers it, or fails at once with an
// *sdk.UnansweredError when no watcher of the handle sees it. When ctx ends first,
// in is dropped and the cause returned.
func (ci *callInteractor) put(ctx context.Context, op string, in *interaction) (any, error) {
	s := ci.s
	in.loc, in.owner, in.answer = ci.call.LocationId, ci.h, make(chan any, 1)
	s.mu.Lock()
	if !s.interactionWatchers.watchedLocked(in) {
		s.mu.Unlock()
		return nil, &sdk.UnansweredError{Op: op, Reason: "no client is watching questions and sampling requests for this call (the serve API's WatchInteractions)"}
	}
	s.pendingSeq++
	in.seq = s.pendingSeq
	s.interactions[in.id] = in
	s.interactionWatchers.broadcastLocked(in, in.ev)
	s.mu.Unlock()

	select {
	case v := <-in.answer: // the answerer removed it and told the watchers
		return v, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if s.interactions[in.id] == in {
		delete(s.interactions, in.id)
		s.interactionWatchers.broadcastLocked(in, resolvedEvent(in.id))
	}
	s.mu.Unlock()
	return nil, context.Cause(ctx)
}

func resolvedEvent(id string) *servepb.InteractionEvent {
	return &servepb.InteractionEvent{Event: &servepb.InteractionEvent_Resolved{Resolved: id}}
}

// resolve hands v to the pending interaction id of handle h, if check (called under
// s.mu with the interaction) accepts it; check's error is returned as is.
func (s *Server) resolve(h *handle, id string, check func(*interaction) error, v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.interactions[id]
	if !ok || in.owner != h {
		return status.Errorf(codes.NotFound, "no pending question or sampling request %q for this client handle", id)
	}
	if err := check(in); err != nil {
		return err
	}
	delete(s.interactions, id)
	in.answer <- v
	s.interactionWatchers.broadcastLocked(in, resolvedEvent(id))
	return nil
}

func (a *api) WatchInteractions(req *servepb.WatchInteractionsRequest, stream servepb.Toolhost_WatchInteractionsServer) error {
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
	end, err := watch(ctx, "WatchInteractions")
	if err != nil {
		return err
	}
	defer end()
	w, pending := a.s.interactionWatchers.add(h, req.LocationId, a.s.interactions, func(in *interaction) *servepb.InteractionEvent { return in.ev })
	defer a.s.interactionWatchers.remove(w)
	return serveWatch(a, ctx, h, stream.Send, pending, &servepb.InteractionEvent{Event: &servepb.InteractionEvent_Synced{Synced: true}}, w.events, w.dropped, "questions")
}

func (a *api) AnswerQuestion(ctx context.Context, req *servepb.AnswerQuestionRequest) (*servepb.AnswerQuestionResponse, error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	var ans sdk.Answer
	switch req.Action {
	case servepb.AnswerQuestionRequest_ACCEPT:
		ans = sdk.Answer{Action: sdk.Accepted, Content: json.RawMessage(req.ContentJson)}
	case servepb.AnswerQuestionRequest_DECLINE:
		ans = sdk.Answer{Action: sdk.Declined}
	case servepb.AnswerQuestionRequest_CANCEL:
		ans = sdk.Answer{Action: sdk.Cancelled}
	default:
		return nil, status.Error(codes.InvalidArgument, "action must be ACCEPT, DECLINE or CANCEL")
	}
	err = a.s.resolve(h, req.Id, func(in *interaction) error {
		if in.question == nil {
			return status.Errorf(codes.NotFound, "%q is a sampling request, not a question (AnswerSample)", req.Id)
		}
		if ans.Action != sdk.Accepted {
			return nil
		}
		if err := sdk.CheckAnswer(*in.question, ans.Content); err != nil {
			return status.Errorf(codes.InvalidArgument, "content_json: %v", err)
		}
		return nil
	}, ans)
	if err != nil {
		return nil, err
	}
	return &servepb.AnswerQuestionResponse{}, nil
}

func (a *api) AnswerSample(ctx context.Context, req *servepb.AnswerSampleRequest) (*servepb.AnswerSampleResponse, error) {
	h, err := handleFrom(ctx, req.ClientId)
	if err != nil {
		return nil, err
	}
	var ans sampleAnswer
	switch r := req.Result.(type) {
	case *servepb.AnswerSampleRequest_Completion:
		m := r.Completion.GetMessage()
		if m.GetContent().GetPart() == nil {
			return nil, status.Error(codes.InvalidArgument, "completion.message.content is required")
		}
		if m.Role != "" && m.Role != "assistant" {
			return nil, status.Errorf(codes.InvalidArgument, "completion.message.role is %q; a completion's role is \"assistant\"", m.Role)
		}
		msg := m.SDK()
		msg.Role = "assistant"
		ans.res = sdk.SampleResult{Message: msg, Model: r.Completion.Model, StopReason: r.Completion.StopReason}
	case *servepb.AnswerSampleRequest_Error:
		ans.err = fmt.Errorf("%w: %s", ErrSampleFailed, r.Error)
	default:
		return nil, status.Error(codes.InvalidArgument, "one of completion and error is required")
	}
	err = a.s.resolve(h, req.Id, func(in *interaction) error {
		if in.question != nil {
			return status.Errorf(codes.NotFound, "%q is a question, not a sampling request (AnswerQuestion)", req.Id)
		}
		return nil
	}, ans)
	if err != nil {
		return nil, err
	}
	return &servepb.AnswerSampleResponse{}, nil
}

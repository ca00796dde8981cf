package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/sdk"
)

// InteractionCall is the call a Question or a Sampling comes from.
type InteractionCall struct {
	LocationID, RequestID string
	// SessionID and ToolCallID are the call's Invocation; Tool the name it used.
	SessionID, ToolCallID, Tool string
}

// Question is a tool's question (sdk.Ask) waiting for the person's answer
// (AnswerQuestion).
type Question struct {
	ID       string
	Call     InteractionCall
	Question sdk.Question
}

// Sampling is a tool's request for a completion of the runner's model (sdk.Sample),
// waiting for AnswerSample or FailSample.
type Sampling struct {
	ID      string
	Call    InteractionCall
	Request sdk.SampleRequest
}

// InteractionEvent is one WatchInteractions event: exactly one of a question to
// answer, a sampling request to answer, or the id of one that no longer waits.
type InteractionEvent struct {
	Question *Question
	Sample   *Sampling
	Resolved string
}

// InteractionWatch is an open WatchInteractions stream. Closing it leaves the
// questions it saw pending until answered or their call ends.
type InteractionWatch struct {
	s syncedStream[InteractionEvent]
}

// WatchInteractions watches the questions and sampling requests of this Client's
// calls, in one Location (locationID) or all (""). It returns once the server has
// registered the watch: from then on a tool's sdk.Ask and sdk.Sample wait for an
// answer instead of failing with an *sdk.UnansweredError. Read events with Next;
// Close it (or cancel ctx) when done.
func (c *Client) WatchInteractions(ctx context.Context, locationID string) (*InteractionWatch, error) {
	id, err := c.handle(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.WatchInteractions(ctx, &servepb.WatchInteractionsRequest{ClientId: id, LocationId: locationID})
	if err != nil {
		cancel()
		return nil, rpcError(ctx, "watch interactions", err)
	}
	s, err := openSynced(cancel, func() (*InteractionEvent, error) {
		ev, err := stream.Recv()
		if err != nil {
			return nil, rpcError(ctx, "watch interactions", err)
		}
		switch e := ev.Event.(type) {
		case *servepb.InteractionEvent_Question:
			q := e.Question
			return &InteractionEvent{Question: &Question{ID: q.Id, Call: interactionCallFrom(q.Call),
				Question: sdk.Question{Message: q.Message, Schema: json.RawMessage(q.SchemaJson)}}}, nil
		case *servepb.InteractionEvent_Sample:
			return &InteractionEvent{Sample: samplingFrom(e.Sample)}, nil
		case *servepb.InteractionEvent_Resolved:
			return &InteractionEvent{Resolved: e.Resolved}, nil
		}
		return nil, nil // synced
	})
	if err != nil {
		return nil, err
	}
	return &InteractionWatch{s}, nil
}

// Next blocks for the next event. It returns an error when the watch ends (ctx
// cancelled, Close, the server shutting down).
func (w *InteractionWatch) Next() (InteractionEvent, error) { return w.s.next() }

// Close ends the watch.
func (w *InteractionWatch) Close() { w.s.cancel() }

func interactionCallFrom(p *servepb.InteractionCall) InteractionCall {
	return InteractionCall{LocationID: p.GetLocationId(), RequestID: p.GetRequestId(), SessionID: p.GetSessionId(), ToolCallID: p.GetToolCallId(), Tool: p.GetTool()}
}

func samplingFrom(p *servepb.Sampling) *Sampling {
	s := &Sampling{ID: p.Id, Call: interactionCallFrom(p.Call), Request: sdk.SampleRequest{
		SystemPrompt: p.SystemPrompt, MaxTokens: int(p.MaxTokens), Temperature: p.Temperature,
		StopSequences: p.StopSequences, ModelHints: p.ModelHints,
	}}
	for _, m := range p.Messages {
		s.Request.Messages = append(s.Request.Messages, m.SDK())
	}
	return s
}

// AnswerQuestion answers a pending question; the answer reaches the tool's sdk.Ask.
// An accepted answer's Content must be valid against the question's schema, or it
// fails with ErrInvalidArgument and the question stays pending. ErrNotFound: the
// question is not pending (answered, its call ended) or is another Client's.
func (c *Client) AnswerQuestion(ctx context.Context, id string, answer sdk.Answer) error {
	req := &servepb.AnswerQuestionRequest{Id: id}
	switch answer.Action {
	case sdk.Accepted:
		req.Action, req.ContentJson = servepb.AnswerQuestionRequest_ACCEPT, string(answer.Content)
	case sdk.Declined:
		req.Action = servepb.AnswerQuestionRequest_DECLINE
	case sdk.Cancelled:
		req.Action = servepb.AnswerQuestionRequest_CANCEL
	default:
		return fmt.Errorf("%w: action %q (want accept, decline or cancel)", ErrInvalidArgument, answer.Action)
	}
	cid, err := c.handle(ctx)
	if err != nil {
		return err
	}
	req.ClientId = cid
	_, err = c.rpc.AnswerQuestion(ctx, req)
	return rpcError(ctx, "answer question "+id, err)
}

// AnswerSample answers a pending sampling request with the model's completion
// (its role is "assistant"; empty means so); it reaches the tool's sdk.Sample.
// Errors as AnswerQuestion.
func (c *Client) AnswerSample(ctx context.Context, id string, res sdk.SampleResult) error {
	return c.answerSample(ctx, &servepb.AnswerSampleRequest{Id: id, Result: &servepb.AnswerSampleRequest_Completion{Completion: &servepb.Completion{
		Message: servepb.SampleMessageOf(res.Message), Model: res.Model, StopReason: res.StopReason,
	}}})
}

// FailSample answers a pending sampling request with an error: the tool's
// sdk.Sample fails with message. Errors as AnswerQuestion.
func (c *Client) FailSample(ctx context.Context, id, message string) error {
	return c.answerSample(ctx, &servepb.AnswerSampleRequest{Id: id, Result: &servepb.AnswerSampleRequest_Error{Error: message}})
}

func (c *Client) answerSample(ctx context.Context, req *servepb.AnswerSampleRequest) error {
	cid, err := c.handle(ctx)
	if err != nil {
		return err
	}
	req.ClientId = cid
	_, err = c.rpc.AnswerSample(ctx, req)
	return rpcError(ctx, "answer sample "+req.Id, err)
}

package sdk

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/pluginpb"
)

// hostInteractor is a plugin's Interactor: the host's Interaction capability, for
// one call.
type hostInteractor struct {
	client pluginpb.InteractionClient
	call   uint64
}

func (h hostInteractor) Ask(ctx context.Context, q Question) (Answer, error) {
	res, err := h.client.Ask(ctx, &pluginpb.AskRequest{Call: h.call, Message: q.Message, Schema: q.Schema})
	if err != nil {
		return Answer{}, interactionError("ask", err)
	}
	return Answer{Action: AnswerAction(res.Action), Content: res.Content}, nil
}

func (h hostInteractor) Sample(ctx context.Context, req SampleRequest) (SampleResult, error) {
	pb := &pluginpb.SampleRequest{
		Call: h.call, SystemPrompt: req.SystemPrompt, MaxTokens: int64(req.MaxTokens),
		Temperature: req.Temperature, StopSequences: req.StopSequences, ModelHints: req.ModelHints,
	}
	for _, m := range req.Messages {
		pb.Messages = append(pb.Messages, sampleMessagePB(m))
	}
	res, err := h.client.Sample(ctx, pb)
	if err != nil {
		return SampleResult{}, interactionError("sample", err)
	}
	return SampleResult{Message: sampleMessageOf(res.Message), Model: res.Model, StopReason: res.StopReason}, nil
}

// interactionError maps the host's refusal back to a *UnansweredError.
func interactionError(op string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.FailedPrecondition {
		return &UnansweredError{Op: op, Reason: st.Message()}
	}
	return err
}

// sampleMessagePB is m on the plugin protocol.
func sampleMessagePB(m SampleMessage) *pluginpb.SampleMessage {
	return &pluginpb.SampleMessage{Role: m.Role, Type: string(m.Content.Type), Text: m.Content.Text, MimeType: m.Content.MIMEType, Data: m.Content.Data}
}

// sampleMessageOf is the SampleMessage of m from the plugin protocol.
func sampleMessageOf(m *pluginpb.SampleMessage) SampleMessage {
	if m == nil {
		return SampleMessage{}
	}
	return SampleMessage{Role: m.Role, Content: Part{Type: PartType(m.Type), Text: m.Text, MIMEType: m.MimeType, Data: m.Data}}
}

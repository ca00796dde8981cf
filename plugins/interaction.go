package plugins

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/sdk"
)

// interactionServer is the Interaction capability of one instance: a plugin's
// sdk.Ask and sdk.Sample during one of its calls reach the sdk.Interactor on that
// call's context (whatever runs the call installed it), if the plugin is granted
// them.
type interactionServer struct {
	pluginpb.UnimplementedInteractionServer
	inst   *Instance
	grants []Grant
	// bucket holds the plugin's asks and samples together to askBurst at once and
	// asksPerMinute after (see newInteractionServer).
	bucket *rate.Limiter
}

// A plugin's asks and samples are held to a token bucket, as an MCP server's are by
// default (mcp.DefaultAskBurst, mcp.DefaultAsksPerMinute): each puts something to a
// person, or spends the runner's model on the person's behalf, and without it a
// granted plugin could do so as often as it liked (100 samples in one call all
// reached the model). One past it is refused at once (ResourceExhausted, naming
// the limits) and reaches nobody.
const (
	askBurst      = 10
	asksPerMinute = 20
)

func newInteractionServer(inst *Instance, grants []Grant) *interactionServer {
	return &interactionServer{inst: inst, grants: grants, bucket: rate.NewLimiter(rate.Limit(float64(asksPerMinute)/60), askBurst)}
}

// take takes a token for one ask or sample (what), or refuses it.
func (s *interactionServer) take(what string) error {
	if s.bucket.Allow() {
		return nil
	}
	msg := fmt.Sprintf("toolhost: refused %s: plugin %q asks more often than the host allows (%d at once, then %d a minute, asks and samples together), so nobody was asked; ask again later",
		what, s.inst.cfg.Name, askBurst, asksPerMinute)
	s.inst.log.logs.Log(hclog.Warn, "refused an ask of the plugin's past its rate", "plugin", s.inst.cfg.Name, "what", what)
	return status.Error(codes.ResourceExhausted, msg)
}

// callContext returns the context of the plugin's call id, joined to ctx's
// cancellation, or a FAILED_PRECONDITION status (the sdk's UnansweredError).
func (s *interactionServer) callContext(ctx context.Context, grant Grant, call uint64) (context.Context, context.CancelFunc, error) {
	if !slices.Contains(s.grants, grant) {
		return nil, nil, status.Errorf(codes.FailedPrecondition, "the Location does not grant %q to plugin %q (its config's \"grants\")", grant, s.inst.cfg.Name)
	}
	v, ok := s.inst.calls.Load(call)
	if !ok {
		return nil, nil, status.Error(codes.FailedPrecondition, "the call has ended (or is not one of this plugin's)")
	}
	callCtx := v.(context.Context)
	// The answer is for the call: it ends with the call or with the plugin's request.
	c, cancel := context.WithCancelCause(callCtx)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return c, func() { stop(); cancel(nil) }, nil
}

func (s *interactionServer) Ask(ctx context.Context, req *pluginpb.AskRequest) (*pluginpb.AskResponse, error) {
	c, done, err := s.callContext(ctx, GrantAsk, req.Call)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.take("an ask"); err != nil {
		return nil, err
	}
	a, err := sdk.Ask(c, sdk.Question{Message: req.Message, Schema: req.Schema})
	if err != nil {
		return nil, interactionStatus(c, err)
	}
	return &pluginpb.AskResponse{Action: string(a.Action), Content: a.Content}, nil
}

func (s *interactionServer) Sample(ctx context.Context, req *pluginpb.SampleRequest) (*pluginpb.SampleResponse, error) {
	c, done, err := s.callContext(ctx, GrantSample, req.Call)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.take("a sample"); err != nil {
		return nil, err
	}
	sr := sdk.SampleRequest{
		SystemPrompt: req.SystemPrompt, MaxTokens: int(req.MaxTokens), Temperature: req.Temperature,
		StopSequences: req.StopSequences, ModelHints: req.ModelHints,
	}
	for _, m := range req.Messages {
		sr.Messages = append(sr.Messages, sampleMessageOf(m))
	}
	res, err := sdk.Sample(c, sr)
	if err != nil {
		return nil, interactionStatus(c, err)
	}
	return &pluginpb.SampleResponse{Message: sampleMessagePB(res.Message), Model: res.Model, StopReason: res.StopReason}, nil
}

// interactionStatus is the status of a failed Ask or Sample: nobody to answer is
// FAILED_PRECONDITION (the plugin's sdk makes it an UnansweredError again).
func interactionStatus(ctx context.Context, err error) error {
	var un *sdk.UnansweredError
	switch {
	case errors.As(err, &un):
		return status.Error(codes.FailedPrecondition, un.Reason)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Unknown, err.Error())
}

func sampleMessagePB(m sdk.SampleMessage) *pluginpb.SampleMessage {
	return &pluginpb.SampleMessage{Role: m.Role, Type: string(m.Content.Type), Text: m.Content.Text, MimeType: m.Content.MIMEType, Data: m.Content.Data}
}

func sampleMessageOf(m *pluginpb.SampleMessage) sdk.SampleMessage {
	if m == nil {
		return sdk.SampleMessage{}
	}
	return sdk.SampleMessage{Role: m.Role, Content: sdk.Part{Type: sdk.PartType(m.Type), Text: m.Text, MIMEType: m.MimeType, Data: m.Data}}
}

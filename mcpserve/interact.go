package mcpserve

import (
	"context"
	"encoding/json"
	"fmt"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/sdk"
)

// clientInteractor is the sdk.Interactor of a call: sdk.Ask is elicitation/create
// and sdk.Sample is sampling/createMessage, on the session whose call it is, when
// its client declared the capability; otherwise they fail with a
// *sdk.UnansweredError.
type clientInteractor struct{ ss *gomcp.ServerSession }

var _ sdk.Interactor = clientInteractor{}

func (c clientInteractor) Ask(ctx context.Context, q sdk.Question) (sdk.Answer, error) {
	if !canElicit(c.ss) {
		return sdk.Answer{}, &sdk.UnansweredError{Op: "ask", Reason: "the MCP client did not declare the elicitation capability"}
	}
	var schema any
	if err := json.Unmarshal(q.Schema, &schema); err != nil {
		return sdk.Answer{}, fmt.Errorf("mcpserve: ask: schema: %w", err)
	}
	res, err := c.ss.Elicit(ctx, &gomcp.ElicitParams{Mode: "form", Message: q.Message, RequestedSchema: schema})
	if err != nil {
		if ctx.Err() != nil {
			return sdk.Answer{}, context.Cause(ctx)
		}
		return sdk.Answer{}, fmt.Errorf("mcpserve: elicitation: %w", err)
	}
	a := sdk.Answer{Action: sdk.AnswerAction(res.Action)}
	if a.Action == sdk.Accepted {
		content := res.Content
		if content == nil {
			content = map[string]any{}
		}
		if a.Content, err = json.Marshal(content); err != nil {
			return sdk.Answer{}, fmt.Errorf("mcpserve: elicitation: %w", err)
		}
	}
	return a, nil
}

func (c clientInteractor) Sample(ctx context.Context, req sdk.SampleRequest) (sdk.SampleResult, error) {
	p := c.ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Sampling == nil {
		return sdk.SampleResult{}, &sdk.UnansweredError{Op: "sample", Reason: "the MCP client did not declare the sampling capability"}
	}
	params := &gomcp.CreateMessageParams{
		MaxTokens: int64(req.MaxTokens), SystemPrompt: req.SystemPrompt, StopSequences: req.StopSequences,
	}
	if req.Temperature != nil {
		params.Temperature = *req.Temperature
	}
	if len(req.ModelHints) > 0 {
		params.ModelPreferences = &gomcp.ModelPreferences{}
		for _, h := range req.ModelHints {
			params.ModelPreferences.Hints = append(params.ModelPreferences.Hints, &gomcp.ModelHint{Name: h})
		}
	}
	for _, m := range req.Messages {
		content, err := samplingContent(m.Content)
		if err != nil {
			return sdk.SampleResult{}, err
		}
		params.Messages = append(params.Messages, &gomcp.SamplingMessage{Role: gomcp.Role(m.Role), Content: content})
	}
	res, err := c.ss.CreateMessage(ctx, params)
	if err != nil {
		if ctx.Err() != nil {
			return sdk.SampleResult{}, context.Cause(ctx)
		}
		return sdk.SampleResult{}, fmt.Errorf("mcpserve: sampling: %w", err)
	}
	out := sdk.SampleResult{Model: res.Model, StopReason: res.StopReason, Message: sdk.SampleMessage{Role: string(res.Role)}}
	switch c := res.Content.(type) {
	case *gomcp.TextContent:
		out.Message.Content = sdk.Text(c.Text)
	case *gomcp.ImageContent:
		out.Message.Content = sdk.Media(c.MIMEType, c.Data)
	case *gomcp.AudioContent:
		out.Message.Content = sdk.Media(c.MIMEType, c.Data)
	default:
		return sdk.SampleResult{}, fmt.Errorf("mcpserve: sampling: the client answered content of type %T", res.Content)
	}
	return out, nil
}

// samplingContent is the MCP content of one sample message's part.
func samplingContent(p sdk.Part) (gomcp.Content, error) {
	switch {
	case p.Type == sdk.PartText:
		return &gomcp.TextContent{Text: p.Text}, nil
	case p.Type == sdk.PartMedia && len(p.MIMEType) > 6 && p.MIMEType[:6] == "image/":
		return &gomcp.ImageContent{MIMEType: p.MIMEType, Data: p.Data}, nil
	case p.Type == sdk.PartMedia && len(p.MIMEType) > 6 && p.MIMEType[:6] == "audio/":
		return &gomcp.AudioContent{MIMEType: p.MIMEType, Data: p.Data}, nil
	}
	return nil, fmt.Errorf("mcpserve: sampling: a message's content must be text, image/* or audio/*, not %s %q", p.Type, p.MIMEType)
}

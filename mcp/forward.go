package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/sdk"
)

// A hosted server's sampling/createMessage and elicitation/create requests are put,
// through sdk.Sample and sdk.Ask, to whoever runs the server's call in flight (the
// MCP client of toolhost mcp, …); with none in flight, or nobody to answer, the
// server gets an error. MCP does not say which call a server's request belongs to
// (on stdio nothing links them): with several in flight it goes to the one that
// started last.

// currentCall returns the context of the call that started last among those in
// flight, or nil.
func (inst *Instance) currentCall() context.Context {
	inst.progressMu.Lock()
	defer inst.progressMu.Unlock()
	var best *progressSink
	for _, s := range inst.progress {
		if best == nil || s.seq > best.seq {
			best = s
		}
	}
	if best == nil {
		return nil
	}
	return best.ctx
}

// callContext is the current call's context, also ended by the server's request's.
func (inst *Instance) callContext(ctx context.Context, op string) (context.Context, context.CancelFunc, error) {
	call := inst.currentCall()
	if call == nil {
		return nil, nil, fmt.Errorf("toolhost: %s: no call of this server is in flight, so there is no one to answer", op)
	}
	c, cancel := context.WithCancelCause(call)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return c, func() { stop(); cancel(nil) }, nil
}

func (inst *Instance) onElicit(ctx context.Context, req *gomcp.ElicitRequest) (*gomcp.ElicitResult, error) {
	if req.Params == nil || req.Params.Mode == "url" {
		return nil, errors.New("toolhost: only form elicitation is forwarded")
	}
	c, done, err := inst.callContext(ctx, "elicitation")
	if err != nil {
		return nil, err
	}
	defer done()
	end, err := inst.asks.begin("elicitation/create")
	if err != nil {
		return nil, err
	}
	defer end()
	schema, err := json.Marshal(req.Params.RequestedSchema)
	if err != nil || req.Params.RequestedSchema == nil {
		schema = []byte(`{"type":"object","properties":{}}`)
	}
	a, err := sdk.Ask(c, sdk.Question{Message: req.Params.Message, Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("toolhost: elicitation: %w", err)
	}
	res := &gomcp.ElicitResult{Action: string(a.Action)}
	if a.Action == sdk.Accepted {
		if err := json.Unmarshal(a.Content, &res.Content); err != nil {
			return nil, fmt.Errorf("toolhost: elicitation: %w", err)
		}
	}
	return res, nil
}

func (inst *Instance) onCreateMessage(ctx context.Context, req *gomcp.CreateMessageRequest) (*gomcp.CreateMessageResult, error) {
	if req.Params == nil {
		return nil, errors.New("toolhost: sampling: no params")
	}
	c, done, err := inst.callContext(ctx, "sampling")
	if err != nil {
		return nil, err
	}
	defer done()
	end, err := inst.asks.begin("sampling/createMessage")
	if err != nil {
		return nil, err
	}
	defer end()
	p := req.Params
	sr := sdk.SampleRequest{SystemPrompt: p.SystemPrompt, MaxTokens: int(p.MaxTokens), StopSequences: p.StopSequences}
	if p.Temperature != 0 {
		t := p.Temperature
		sr.Temperature = &t
	}
	if mp := p.ModelPreferences; mp != nil {
		for _, h := range mp.Hints {
			if h != nil {
				sr.ModelHints = append(sr.ModelHints, h.Name)
			}
		}
	}
	for _, m := range p.Messages {
		part, err := partOf(m.Content)
		if err != nil {
			return nil, err
		}
		sr.Messages = append(sr.Messages, sdk.SampleMessage{Role: string(m.Role), Content: part})
	}
	res, err := sdk.Sample(c, sr)
	if err != nil {
		return nil, fmt.Errorf("toolhost: sampling: %w", err)
	}
	out := &gomcp.CreateMessageResult{Model: res.Model, StopReason: res.StopReason, Role: gomcp.Role(res.Message.Role)}
	switch part := res.Message.Content; {
	case part.Type == sdk.PartText:
		out.Content = &gomcp.TextContent{Text: part.Text}
	case strings.HasPrefix(part.MIMEType, "image/"):
		out.Content = &gomcp.ImageContent{MIMEType: part.MIMEType, Data: part.Data}
	case strings.HasPrefix(part.MIMEType, "audio/"):
		out.Content = &gomcp.AudioContent{MIMEType: part.MIMEType, Data: part.Data}
	default:
		return nil, fmt.Errorf("toolhost: sampling: the completion's content is %s %q", part.Type, part.MIMEType)
	}
	return out, nil
}

// partOf is the sdk part of a sampling message's content.
func partOf(c gomcp.Content) (sdk.Part, error) {
	switch c := c.(type) {
	case *gomcp.TextContent:
		return sdk.Text(c.Text), nil
	case *gomcp.ImageContent:
		return sdk.Media(c.MIMEType, c.Data), nil
	case *gomcp.AudioContent:
		return sdk.Media(c.MIMEType, c.Data), nil
	}
	return sdk.Part{}, fmt.Errorf("toolhost: sampling: content of type %T is not forwarded", c)
}

// onLog passes the server's notifications/message to the host's log at their
// level (where toolhost mcp's sessions, among others, receive them).
func (inst *Instance) onLog(p *gomcp.LoggingMessageParams) {
	level := hclog.Info
	switch p.Level {
	case "debug":
		level = hclog.Debug
	case "info", "notice":
		level = hclog.Info
	case "warning":
		level = hclog.Warn
	default:
		level = hclog.Error
	}
	data, _ := json.Marshal(p.Data)
	inst.serverLog(level, p.Logger, string(data))
}

package mcpserve

import (
	"context"
	"fmt"
	"strings"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/permission"
)

var _ permission.Asker = (*Server)(nil)

// askSchema is the form of a permission elicitation.
var askSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"decision": map[string]any{
			"type":        "string",
			"title":       "Decision",
			"description": "once: allow this request; always: allow it and remember; reject: refuse it",
			"enum":        []any{string(permission.Once), string(permission.Always), string(permission.Reject)},
			"default":     string(permission.Once),
		},
		"message": map[string]any{
			"type":        "string",
			"title":       "Message for the model",
			"description": "optional: with reject, tells the model why (otherwise the call just ends)",
		},
	},
	"required": []any{"decision"},
}

// Ask implements permission.Asker for the Locations the Server serves (pass it as
// location.Options.Asker): the ask goes, as elicitation/create, to the session of
// the call that asked. When that session's client cannot elicit, or the call is not
// one of the Server's, it fails with permission.ErrCannotAsk: a deny the model sees
// without advice on widening the rules.
func (s *Server) Ask(ctx context.Context, id string, req permission.Request) (permission.Answer, error) {
	ss, _ := ctx.Value(sessionKey{}).(*gomcp.ServerSession)
	if ss == nil { // a trusted plugin asks over its own connection: find its call
		s.mu.Lock()
		ss = s.calls[callKey{session: req.SessionID, call: req.Source.CallID}]
		s.mu.Unlock()
	}
	if ss == nil || !canElicit(ss) {
		return permission.Answer{}, permission.ErrCannotAsk
	}
	res, err := ss.Elicit(ctx, &gomcp.ElicitParams{Mode: "form", Message: askMessage(req), RequestedSchema: askSchema})
	if err != nil {
		if ctx.Err() != nil {
			return permission.Answer{}, context.Cause(ctx)
		}
		return permission.Answer{}, fmt.Errorf("mcpserve: elicitation: %w", err)
	}
	if res.Action != "accept" {
		return permission.Answer{Reply: permission.Reject}, nil // decline, cancel: the call ends
	}
	decision, _ := res.Content["decision"].(string)
	message, _ := res.Content["message"].(string)
	switch r := permission.Reply(decision); r {
	case permission.Once, permission.Always, permission.Reject:
		return permission.Answer{Reply: r, Message: message}, nil
	}
	return permission.Answer{}, fmt.Errorf("mcpserve: elicitation answered decision %q, want once, always or reject", decision)
}

func canElicit(ss *gomcp.ServerSession) bool {
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil
}

// askMessage says what is asked, for the person.
func askMessage(req permission.Request) string {
	var b strings.Builder
	tool := req.Source.Tool
	if tool == "" {
		tool = req.Action
	}
	fmt.Fprintf(&b, "toolhost: the tool %q asks to %q", tool, req.Action)
	if len(req.Resources) > 0 {
		res := req.Resources
		more := ""
		if len(res) > 5 {
			res, more = res[:5], fmt.Sprintf(" and %d more", len(req.Resources)-5)
		}
		fmt.Fprintf(&b, " on %s%s", strings.Join(res, ", "), more)
	}
	b.WriteString(". Allow it once, always, or reject it?")
	if len(req.Save) > 0 {
		fmt.Fprintf(&b, " (always remembers: %s)", strings.Join(req.Save, ", "))
	}
	return b.String()
}

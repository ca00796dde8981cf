package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/sdk"
)

// output maps a tool result to sdk output; see the package documentation.
func output(res *gomcp.CallToolResult) (sdk.Output, error) {
	parts := make([]sdk.Part, 0, len(res.Content))
	for _, c := range res.Content {
		if p, ok := part(c); ok {
			parts = append(parts, p)
		}
	}
	if res.IsError {
		return sdk.Output{}, &sdk.ToolFailure{Message: failureText(parts)}
	}
	switch {
	case res.StructuredContent != nil:
		data, err := marshal(res.StructuredContent)
		if err != nil {
			return sdk.Output{}, &sdk.OutputEncodingError{Err: err}
		}
		return sdk.Output{JSON: data, Content: parts, HasContent: true}, nil
	case len(parts) == 1 && parts[0].Type == sdk.PartText:
		data, err := marshal(parts[0].Text)
		if err != nil {
			return sdk.Output{}, &sdk.OutputEncodingError{Err: err}
		}
		return sdk.Output{JSON: data}, nil
	}
	return sdk.Output{JSON: json.RawMessage("null"), Content: parts, HasContent: true}, nil
}

// part maps one content block; blocks that carry nothing (an embedded resource
// without contents) are dropped.
func part(c gomcp.Content) (sdk.Part, bool) {
	switch c := c.(type) {
	case *gomcp.TextContent:
		return sdk.Text(c.Text), true
	case *gomcp.ImageContent:
		return sdk.Media(mimeOr(c.MIMEType, "image/octet-stream"), c.Data), true
	case *gomcp.AudioContent:
		return sdk.Media(mimeOr(c.MIMEType, "audio/octet-stream"), c.Data), true
	case *gomcp.ResourceLink:
		return sdk.Text(describeLink(c)), true
	case *gomcp.EmbeddedResource:
		r := c.Resource
		if r == nil {
			return sdk.Part{}, false
		}
		if r.Blob != nil {
			return sdk.Media(mimeOr(r.MIMEType, "application/octet-stream"), r.Blob), true
		}
		head := "[resource " + r.URI
		if r.MIMEType != "" {
			head += " (" + r.MIMEType + ")"
		}
		return sdk.Text(head + "]\n" + r.Text), true
	}
	// Block types only valid elsewhere (sampling); keep them visible as JSON.
	data, err := marshal(c)
	if err != nil {
		return sdk.Text(fmt.Sprintf("[unrepresentable %T content]", c)), true
	}
	return sdk.Text(string(data)), true
}

func describeLink(l *gomcp.ResourceLink) string {
	var b strings.Builder
	b.WriteString("[resource link] ")
	name := l.Name
	if l.Title != "" && l.Title != l.Name {
		name += " (" + l.Title + ")"
	}
	if name != "" {
		b.WriteString(name + ": ")
	}
	b.WriteString(l.URI)
	var attrs []string
	if l.MIMEType != "" {
		attrs = append(attrs, l.MIMEType)
	}
	if l.Size != nil {
		attrs = append(attrs, fmt.Sprintf("%d bytes", *l.Size))
	}
	if len(attrs) > 0 {
		b.WriteString(" (" + strings.Join(attrs, ", ") + ")")
	}
	if l.Description != "" {
		b.WriteString(" — " + l.Description)
	}
	return b.String()
}

func failureText(parts []sdk.Part) string {
	var texts []string
	for _, p := range parts {
		if p.Type == sdk.PartText && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	if len(texts) == 0 {
		return "the tool reported an error without a message"
	}
	return strings.Join(texts, "\n")
}

func mimeOr(mime, def string) string {
	if mime == "" {
		return def
	}
	return mime
}

// marshal encodes v without HTML escaping and without the trailing newline.
func marshal(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/toolhost/toolhost/sdk"
)

// questionPrompt puts a tool's sdk.Ask questions to the person at the terminal,
// through the permission prompt's reader (one prompt at a time): a prompt per field
// when every property of the question's schema is a string, number, integer,
// boolean or array of enum strings, else one line of JSON. The answer is checked
// against the schema, and asked again while it does not match. sdk.Sample gets no
// answer: the command has no model.
type questionPrompt struct{ p *promptAsker }

var _ sdk.Interactor = questionPrompt{}

func (qp questionPrompt) Sample(context.Context, sdk.SampleRequest) (sdk.SampleResult, error) {
	return sdk.SampleResult{}, &sdk.UnansweredError{Op: "sample", Reason: "toolhost call has no model to ask"}
}

func (qp questionPrompt) Ask(ctx context.Context, q sdk.Question) (sdk.Answer, error) {
	p := qp.p
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "\nquestion from the tool: %s\n", q.Message)
	for {
		fmt.Fprint(p.out, "answer? [a]nswer, [d]ecline, [c]ancel: ")
		line, err := p.readLine(ctx)
		if err != nil {
			return sdk.Answer{}, err
		}
		switch strings.ToLower(line) {
		case "d", "decline", "n", "no":
			return sdk.Answer{Action: sdk.Declined}, nil
		case "c", "cancel":
			return sdk.Answer{Action: sdk.Cancelled}, nil
		case "a", "answer", "y", "yes":
		default:
			continue
		}
		fields, simple := questionFields(q.Schema)
		for {
			var content json.RawMessage
			if simple {
				content, err = qp.readFields(ctx, fields)
			} else {
				content, err = qp.readJSON(ctx, q.Schema)
			}
			if err != nil {
				return sdk.Answer{}, err
			}
			if err := sdk.CheckAnswer(q, content); err != nil {
				fmt.Fprintf(p.out, "not an answer to the question: %v\n", err)
				continue
			}
			return sdk.Answer{Action: sdk.Accepted, Content: content}, nil
		}
	}
}

// questionField is one property of a simple question schema.
type questionField struct {
	name        string
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Enum        []string `json:"enum"`
	Items       *struct {
		Enum []string `json:"enum"`
	} `json:"items"`
	required bool
}

// questionFields returns the properties of schema in their order, and whether a
// prompt per field can answer it.
func questionFields(schema json.RawMessage) ([]questionField, bool) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(s.Properties))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	var fields []questionField
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, _ := t.(string)
		f := questionField{name: name, required: slices.Contains(s.Required, name)}
		if err := dec.Decode(&f); err != nil {
			return nil, false // not a simple property (an enum of numbers, say)
		}
		switch {
		case f.Type == "string", f.Type == "number", f.Type == "integer", f.Type == "boolean":
		case f.Type == "array" && f.Items != nil && len(f.Items.Enum) > 0:
		default:
			return nil, false
		}
		fields = append(fields, f)
	}
	return fields, len(fields) > 0
}

// readFields asks for each field in turn and returns the object they make. An empty
// line leaves an optional field out; a required one is asked again.
func (qp questionPrompt) readFields(ctx context.Context, fields []questionField) (json.RawMessage, error) {
	p := qp.p
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, f := range fields {
		for {
			fmt.Fprint(p.out, f.prompt())
			line, err := p.readLine(ctx)
			if err != nil {
				return nil, err
			}
			if line == "" {
				if f.required {
					continue
				}
				break
			}
			v, ok := f.value(line)
			if !ok {
				fmt.Fprintf(p.out, "not a %s\n", f.kind())
				continue
			}
			if n > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(f.name)
			b.Write(name)
			b.WriteByte(':')
			b.Write(v)
			n++
			break
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// readJSON shows the schema and reads the answer as one line of JSON.
func (qp questionPrompt) readJSON(ctx context.Context, schema json.RawMessage) (json.RawMessage, error) {
	p := qp.p
	var indented bytes.Buffer
	if json.Indent(&indented, schema, "  ", "  ") != nil {
		indented.Write(schema)
	}
	fmt.Fprintf(p.out, "the answer is a JSON object of this schema:\n  %s\n", indented.String())
	for {
		fmt.Fprint(p.out, "answer (JSON, on one line): ")
		line, err := p.readLine(ctx)
		if err != nil {
			return nil, err
		}
		if json.Valid([]byte(line)) {
			return json.RawMessage(line), nil
		}
		fmt.Fprintln(p.out, "not JSON")
	}
}

// kind describes what the field takes.
func (f questionField) kind() string {
	switch {
	case len(f.Enum) > 0:
		return "one of " + strings.Join(f.Enum, ", ")
	case f.Type == "array":
		return "comma-separated list of " + strings.Join(f.Items.Enum, ", ")
	case f.Type == "boolean":
		return "yes or no"
	}
	return f.Type
}

func (f questionField) prompt() string {
	var b strings.Builder
	b.WriteString(f.name)
	if f.Title != "" && f.Title != f.name {
		fmt.Fprintf(&b, " (%s)", f.Title)
	}
	if f.Description != "" {
		fmt.Fprintf(&b, ", %s", f.Description)
	}
	fmt.Fprintf(&b, " [%s", f.kind())
	if !f.required {
		b.WriteString("; empty: none")
	}
	b.WriteString("]: ")
	return b.String()
}

// value encodes what was typed for f, or reports that it is not of f's kind.
func (f questionField) value(line string) (json.RawMessage, bool) {
	var v any
	switch f.Type {
	case "string":
		if len(f.Enum) > 0 && !slices.Contains(f.Enum, line) {
			return nil, false
		}
		v = line
	case "number":
		x, err := strconv.ParseFloat(line, 64)
		if err != nil {
			return nil, false
		}
		v = x
	case "integer":
		x, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, false
		}
		v = x
	case "boolean":
		switch strings.ToLower(line) {
		case "y", "yes", "true":
			v = true
		case "n", "no", "false":
			v = false
		default:
			return nil, false
		}
	case "array":
		var items []string
		for _, s := range strings.Split(line, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(f.Items.Enum, s) {
				return nil, false
			}
			items = append(items, s)
		}
		v = items
	}
	data, err := json.Marshal(v)
	return data, err == nil
}

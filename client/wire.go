package client

import (
	"encoding/json"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// outcomes maps the wire's outcomes to the registry's.
var outcomes = map[servepb.Outcome]registry.Outcome{
	servepb.Outcome_OUTCOME_COMPLETED:      registry.Completed,
	servepb.Outcome_OUTCOME_TOOL_FAILURE:   registry.ToolFailed,
	servepb.Outcome_OUTCOME_UNKNOWN:        registry.Unknown,
	servepb.Outcome_OUTCOME_INVALID_INPUT:  registry.InvalidInput,
	servepb.Outcome_OUTCOME_INVALID_OUTPUT: registry.InvalidOutput,
	servepb.Outcome_OUTCOME_UNAVAILABLE:    registry.Unavailable,
}

func settlementFrom(p *servepb.Settlement, hint string) *registry.Settlement {
	s := &registry.Settlement{
		Name:         p.Name,
		ToolCallID:   p.ToolCallId,
		Outcome:      outcomes[p.Outcome],
		ManagedPaths: p.ManagedPaths,
		Hint:         hint,
	}
	if s.Outcome == "" {
		s.Outcome = registry.Outcome(p.Outcome.String()) // a newer server's outcome
	}
	if p.StructuredJson != "" {
		s.Structured = json.RawMessage(p.StructuredJson)
	}
	if len(p.Content) > 0 {
		s.Content = make([]sdk.Part, len(p.Content))
		for i, part := range p.Content {
			s.Content[i] = part.SDK()
		}
	}
	for _, pr := range p.Problems {
		s.Problems = append(s.Problems, registry.Problem{Pointer: pr.Pointer, Message: pr.Message})
	}
	return s
}

func definitionFrom(p *servepb.Definition) registry.Definition {
	d := registry.Definition{Name: p.Name, Description: p.Description, Title: p.Title}
	if p.InputSchemaJson != "" {
		d.InputSchema = json.RawMessage(p.InputSchemaJson)
	}
	if p.OutputSchemaJson != "" {
		d.OutputSchema = json.RawMessage(p.OutputSchemaJson)
	}
	if a := p.Annotations; a != nil {
		d.Annotations = &sdk.Annotations{
			ReadOnlyHint:    a.ReadOnly,
			DestructiveHint: a.Destructive,
			IdempotentHint:  a.Idempotent,
			OpenWorldHint:   a.OpenWorld,
		}
	}
	return d
}

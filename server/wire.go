package server

import (
	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/registry"
)

// outcomes maps the registry's outcomes to the wire's.
var outcomes = map[registry.Outcome]servepb.Outcome{
	registry.Completed:     servepb.Outcome_OUTCOME_COMPLETED,
	registry.ToolFailed:    servepb.Outcome_OUTCOME_TOOL_FAILURE,
	registry.Unknown:       servepb.Outcome_OUTCOME_UNKNOWN,
	registry.InvalidInput:  servepb.Outcome_OUTCOME_INVALID_INPUT,
	registry.InvalidOutput: servepb.Outcome_OUTCOME_INVALID_OUTPUT,
	registry.Unavailable:   servepb.Outcome_OUTCOME_UNAVAILABLE,
}

// settlementProto is s on the wire (without its Hint, which travels beside it).
func settlementProto(s *registry.Settlement) *servepb.Settlement {
	p := &servepb.Settlement{
		Name:           s.Name,
		ToolCallId:     s.ToolCallID,
		Outcome:        outcomes[s.Outcome],
		StructuredJson: string(s.Structured),
		ManagedPaths:   s.ManagedPaths,
	}
	if len(s.Content) > 0 {
		p.Content = make([]*servepb.ContentPart, len(s.Content))
		for i, part := range s.Content {
			p.Content[i] = servepb.PartOf(part)
		}
	}
	for _, pr := range s.Problems {
		p.Problems = append(p.Problems, &servepb.Problem{Pointer: pr.Pointer, Message: pr.Message})
	}
	return p
}

// definitionProto is d on the wire, with inputSchema (d's, or adapted for a
// provider) as its input schema.
func definitionProto(d registry.Definition, inputSchema []byte) *servepb.Definition {
	p := &servepb.Definition{
		Name:             d.Name,
		Description:      d.Description,
		InputSchemaJson:  string(inputSchema),
		OutputSchemaJson: string(d.OutputSchema),
		Title:            d.Title,
	}
	if a := d.Annotations; a != nil {
		p.Annotations = &servepb.Annotations{
			ReadOnly:    a.ReadOnlyHint,
			Destructive: a.DestructiveHint,
			Idempotent:  a.IdempotentHint,
			OpenWorld:   a.OpenWorldHint,
		}
	}
	return p
}

package telemetry

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// TestRootAttributesKeepOthersUnderTheirOwnKeys: attributes set on a recorded
// settlement span before its end (by its sampler, or through the span) are
// exported beside the settlement's own, which replace any under the same key.
func TestRootAttributesKeepOthersUnderTheirOwnKeys(t *testing.T) {
	s := &settling{key: callKey{"/l", "s", "c"}, tool: "echo", outcome: "completed", outputBytes: -1, spans: new([1 + maxSteps]stepSpan)}
	s.spans[0].extra = &stepExtra{attrs: []attribute.KeyValue{attribute.String("toolhost.tool", "earlier"), attribute.String("sampler.note", "x")}}
	got := map[attribute.Key][]string{}
	for _, a := range s.appendRootAttributes(nil) {
		got[a.Key] = append(got[a.Key], a.Value.Emit())
	}
	if len(got["toolhost.tool"]) != 1 || got["toolhost.tool"][0] != "echo" || len(got["sampler.note"]) != 1 || len(got) != 7 {
		t.Errorf("attributes %v, want the settlement's six, toolhost.tool=echo once, and sampler.note", got)
	}
}

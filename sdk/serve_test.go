package sdk

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/pluginpb"
)

// TestCallResultShapes holds Call to the shape the host asked for: a lone output
// goes in CallResult.output only when the activation set flat_results; anything
// more (a projection, a structured result, a failure) always goes as events.
func TestCallResultShapes(t *testing.T) {
	lone := NewTool("echoes", func(_ context.Context, _ Invocation, in struct {
		Text string `json:"text"`
	}) (string, error) {
		return in.Text, nil
	})
	projected := lone
	projected.Project = func(_, output json.RawMessage) []Part { return []Part{Text(string(output))} }
	structured := lone
	structured.Execute = func(context.Context, Invocation, json.RawMessage) (Output, error) {
		return Output{JSON: json.RawMessage(`"x"`), Structured: json.RawMessage(`{}`)}, nil
	}
	failing := lone
	failing.Execute = func(context.Context, Invocation, json.RawMessage) (Output, error) {
		return Output{}, Failf("no")
	}
	tools := map[string]Tool{"lone": lone, "projected": projected, "structured": structured, "failing": failing}
	for _, flat := range []bool{false, true} {
		s := &pluginServer{logger: hclog.NewNullLogger(), regs: map[uint64]map[string]Tool{1: tools}}
		s.flat.Store(flat)
		for name := range tools {
			res, err := s.Call(t.Context(), &pluginpb.ExecuteRequest{Registration: 1, Tool: name, Input: []byte(`{"text":"hi"}`)})
			if err != nil {
				t.Fatalf("flat=%v %s: %v", flat, name, err)
			}
			wantFlat := flat && name == "lone"
			if got := res.Output != nil; got != wantFlat || wantFlat != (len(res.Events) == 0) {
				t.Fatalf("flat=%v %s: output %q, %d events; want flat %v", flat, name, res.Output, len(res.Events), wantFlat)
			}
			if wantFlat && string(res.Output) != `"hi"` {
				t.Fatalf("flat output %q", res.Output)
			}
		}
	}
}

// TestActivateAtStartDeclinesRegistrationsOverTheCapability: a request that wants
// the activation's registrations over the Tools capability, which only exists once
// the server is up, is left to an activation by a call instead of waiting for itself.
func TestActivateAtStartDeclinesRegistrationsOverTheCapability(t *testing.T) {
	value, ok, err := pluginpb.EncodeActivateRequest(&pluginpb.ActivateRequest{Directory: "/w", ToolsBrokerId: 1})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	t.Setenv("PLUGIN_PROTOCOL_VERSIONS", "1,2,3")
	t.Setenv(pluginpb.StartActivationEnv, value)
	activated := false
	gp := &grpcPlugin{impl: ActivateFunc(func(context.Context, Location, Tools) error { activated = true; return nil }), logger: hclog.NewNullLogger()}
	if activateAtStart(gp, hclog.NewNullLogger()) || activated || gp.server != nil {
		t.Fatal("activated at the start")
	}
}

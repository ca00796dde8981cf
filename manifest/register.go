package manifest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// Register registers tools (the config's, then the loaded files', in that order) in
// the placement location, each in a batch of its own, owned by owner (which may be
// nil) and with source {Kind: "manifest", Name: the tool's registered name} and the
// tool's Overrides.
//
// A tool that cannot be registered — a schema that does not compile, a name that
// does not normalize, a name an earlier tool of the list already uses (so a config
// tool wins over a file of the same name) — is skipped and reported in warnings,
// which are also logged; the others register. authorize, if set, is called before
// each call with the tool's registered name; a non-nil error is the call's result
// and the command does not run (manifest tools are untrusted).
//
// The returned release removes every registration made, newest first; it is
// idempotent and safe to call from any goroutine. It is never nil.
func Register(reg *registry.Registry, location string, owner registry.Owner, tools []Tool,
	authorize func(ctx context.Context, tool string, inv sdk.Invocation) error, logger hclog.Logger,
) (release func(), warnings []error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var releases []func()
	used := map[string]Tool{}
	for _, t := range tools {
		origin := t.File
		if origin == "" {
			origin = "the config"
		}
		name, err := registry.NormalizeName(t.Name)
		if err != nil {
			warnings = append(warnings, fmt.Errorf("manifest: tool %q from %s skipped: %w", t.Name, origin, err))
			continue
		}
		if prev, dup := used[name]; dup {
			from := prev.File
			if from == "" {
				from = "the config"
			}
			warnings = append(warnings, fmt.Errorf("manifest: tool %q from %s skipped: the name %q is already used by the tool from %s", t.Name, origin, name, from))
			continue
		}
		b := registry.Batch{
			Location:  location,
			Source:    registry.Source{Kind: "manifest", Name: name},
			Tools:     map[string]sdk.Tool{t.Name: SDKTool(t, name, authorize)},
			Owner:     owner,
			Overrides: t.Overrides,
		}
		rel, err := reg.Register(b)
		if err != nil {
			warnings = append(warnings, fmt.Errorf("manifest: tool %q from %s skipped: %w", t.Name, origin, err))
			continue
		}
		used[name] = t
		releases = append(releases, rel)
		mode, confined := t.Containment()
		logger.Info("manifest tool sandbox", "tool", name, "containment", mode, "confined", confined, "limits", sandbox.SpecOf(t.Sandbox).Limits.String())
	}
	for _, w := range warnings {
		logger.Warn("manifest tool not registered", "warning", w)
	}
	return sync.OnceFunc(func() {
		for _, rel := range slices.Backward(releases) {
			rel()
		}
	}), warnings
}

// SDKTool returns t as an sdk.Tool whose executor runs t's command per call. name is
// the name the tool is registered under, passed to authorize (which may be nil).
func SDKTool(t Tool, name string, authorize func(ctx context.Context, tool string, inv sdk.Invocation) error) sdk.Tool {
	input := t.InputSchema
	if len(input) == 0 {
		input = json.RawMessage(`{"type":"object"}`)
	}
	t.Command = slices.Clone(t.Command)
	return sdk.Tool{
		Description:  t.Description,
		InputSchema:  input,
		OutputSchema: t.OutputSchema,
		Execute: func(ctx context.Context, inv sdk.Invocation, in json.RawMessage) (sdk.Output, error) {
			if authorize != nil {
				if err := authorize(ctx, name, inv); err != nil {
					return sdk.Output{}, err
				}
			}
			return run(ctx, t, in)
		},
	}
}

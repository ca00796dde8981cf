// Command runtime is an example toolhost plugin that changes its tools while it runs.
// Copy it when tools should come and go after activation, for example behind a
// feature switch or once a resource becomes available.
//
// The pattern:
//   - keep the sdk.Tools capability that Activate receives; it stays usable for the
//     life of the plugin;
//   - Register a batch whenever tools should appear, and keep the sdk.Registration;
//   - Close that registration when they should disappear.
//
// A later registration of a name wins over an earlier one, and closing it reveals the
// earlier one again. Here the beta batch holds beta_echo and also a beta clock_now
// that overrides the one registered at activation; closing the batch brings the
// original clock_now back. Each model request sees the tools current when it was
// prepared; the host never runs a tool whose contract differs from the one the model
// was shown.
package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/toolhost/toolhost/sdk"
)

// plugin holds what the run-time tools need between calls.
type plugin struct {
	tools sdk.Tools // the capability from Activate, kept for run-time registrations

	mu   sync.Mutex       // calls run concurrently; feature_toggle must not race itself
	beta sdk.Registration // the beta batch while it is registered, else nil
}

var _ sdk.Plugin = (*plugin)(nil)

// Activate registers the tools that always exist.
func (p *plugin) Activate(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
	p.tools = tools
	_, err := tools.Register(ctx, map[string]sdk.Tool{
		"clock_now":      clockNow(),
		"feature_toggle": p.featureToggle(),
	})
	return err
}

func clockNow() sdk.Tool {
	return sdk.NewTool("Returns the current time in UTC, in RFC 3339 format.",
		func(ctx context.Context, inv sdk.Invocation, in struct{}) (string, error) {
			return time.Now().UTC().Format(time.RFC3339), nil
		})
}

// BetaClockInput is the input of the beta clock_now: a new, optional field.
type BetaClockInput struct {
	Layout string `json:"layout,omitempty" jsonschema:"description=A Go time layout such as 2006-01-02; default RFC 3339."`
}

func betaClockNow() sdk.Tool {
	return sdk.NewTool("Returns the current time in UTC, in RFC 3339 format or in a Go time layout (beta).",
		func(ctx context.Context, inv sdk.Invocation, in BetaClockInput) (string, error) {
			layout := time.RFC3339
			if in.Layout != "" {
				layout = in.Layout
			}
			return time.Now().UTC().Format(layout), nil
		})
}

// EchoInput is beta_echo's input.
type EchoInput struct {
	Text string `json:"text" jsonschema:"description=The text to echo."`
}

func betaEcho() sdk.Tool {
	return sdk.NewTool("Returns its input text unchanged (beta).",
		func(ctx context.Context, inv sdk.Invocation, in EchoInput) (string, error) {
			return in.Text, nil
		})
}

// ToggleInput is feature_toggle's input.
type ToggleInput struct {
	Enabled bool `json:"enabled" jsonschema:"description=true registers the beta tools; false removes them."`
}

// featureToggle registers or closes the beta batch. The change applies to model
// requests prepared after the call.
func (p *plugin) featureToggle() sdk.Tool {
	return sdk.NewTool("Turns the beta tools (beta_echo and a beta clock_now) on or off.",
		func(ctx context.Context, inv sdk.Invocation, in ToggleInput) (string, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch {
			case in.Enabled && p.beta == nil:
				reg, err := p.tools.Register(ctx, map[string]sdk.Tool{
					"beta_echo": betaEcho(),
					"clock_now": betaClockNow(), // overrides the activation's clock_now
				})
				if err != nil {
					return "", fmt.Errorf("register the beta tools: %w", err)
				}
				p.beta = reg
				return "Beta tools are on: beta_echo, and clock_now accepts a layout.", nil
			case !in.Enabled && p.beta != nil:
				// Closing removes exactly this batch: beta_echo disappears and the
				// original clock_now is revealed again.
				if err := p.beta.Close(ctx); err != nil {
					return "", fmt.Errorf("close the beta tools: %w", err)
				}
				p.beta = nil
				return "Beta tools are off.", nil
			case in.Enabled:
				return "Beta tools are already on.", nil
			}
			return "Beta tools are already off.", nil
		})
}

func main() { sdk.Serve(&plugin{}) }

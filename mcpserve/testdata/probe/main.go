// Command probe is the plugin the mcpserve tests serve: an echo, a long call that
// logs when its work stops, media and structured output, a failure, and a tool
// whose permission rule asks.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/sdk"
)

var logger = hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info})

type TextInput struct {
	Text string `json:"text"`
}

type WaitInput struct {
	Steps  int `json:"steps" jsonschema:"minimum=1"`
	StepMS int `json:"step_ms" jsonschema:"minimum=1"`
}

type Stats struct {
	Length int    `json:"length"`
	Upper  string `json:"upper"`
}

func wait(ctx context.Context, _ sdk.Invocation, in WaitInput) (string, error) {
	logger.Info("probe: work started", "steps", in.Steps)
	for i := 1; i <= in.Steps; i++ {
		select {
		case <-ctx.Done():
			logger.Info("probe: work stopped", "step", i)
			return "", context.Cause(ctx)
		case <-time.After(time.Duration(in.StepMS) * time.Millisecond):
		}
		sdk.ReportProgress(ctx, sdk.Progress{Progress: float64(i), Total: float64(in.Steps), Message: fmt.Sprintf("step %d", i)})
	}
	return fmt.Sprintf("waited %d steps", in.Steps), nil
}

// png is a 1×1 transparent PNG.
var png = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		echo := sdk.NewTool("Returns its text.", func(ctx context.Context, _ sdk.Invocation, in TextInput) (string, error) {
			return in.Text, nil
		})
		echo.Title = "Echo"
		echo.Annotations = &sdk.Annotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: sdk.Hint(false)}
		media := sdk.NewTool("Returns an image, audio and a PDF.", func(ctx context.Context, _ sdk.Invocation, in TextInput) (string, error) {
			return in.Text, nil
		})
		media.Project = func(input, output json.RawMessage) []sdk.Part {
			return []sdk.Part{sdk.Text("media"), sdk.Media("image/png", png), sdk.Media("audio/wav", []byte("RIFF")), sdk.Media("application/pdf", []byte("%PDF"))}
		}
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo": echo,
			"wait": sdk.NewTool("Waits steps×step_ms, reporting progress at each step.", wait),
			"stats": sdk.NewTool("Structured statistics of a text.", func(ctx context.Context, _ sdk.Invocation, in TextInput) (Stats, error) {
				return Stats{Length: len(in.Text), Upper: fmt.Sprintf("%q", in.Text)}, nil
			}),
			"media": media,
			"fail": sdk.NewTool("Always fails.", func(ctx context.Context, _ sdk.Invocation, in TextInput) (string, error) {
				return "", sdk.Failf("failed on purpose: %s", in.Text)
			}),
			"session": sdk.NewTool("Returns the session id its invocation carries.", func(ctx context.Context, inv sdk.Invocation, in TextInput) (string, error) {
				return inv.SessionID, nil
			}),
			"guarded": sdk.NewTool("Needs the user's approval.", func(ctx context.Context, _ sdk.Invocation, in TextInput) (string, error) {
				return "approved: " + in.Text, nil
			}),
		})
		return err
	}))
}

// Command plugin is the plugin the cli tests call: a typed "echo" tool, a "fail" tool
// that returns a ToolFailure, a "progress" tool that reports three progress events, a
// "picture" tool with media content, a "big" tool whose output exceeds the limits,
// a "block" tool that waits until its call is cancelled, a "stuck" tool that
// ignores SIGTERM and SIGINT from then on, creates the file its input names and
// never returns, cancelled or not, and a "confirm" tool that asks the person
// (sdk.Ask) and reports the answer. With EXIT_IN_ACTIVATION set in
// its environment it exits with status 3 while it activates.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/toolhost/toolhost/sdk"
)

type echoInput struct {
	Text string `json:"text" jsonschema:"description=The text to echo."`
}

type echoOutput struct {
	Text  string `json:"text"`
	Agent string `json:"agent"`
	Call  string `json:"call"`
}

type empty struct{}

type stuckInput struct {
	Marker string `json:"marker" jsonschema:"description=The file to create once stuck."`
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, _ sdk.Location, tools sdk.Tools) error {
		if os.Getenv("EXIT_IN_ACTIVATION") != "" {
			// Straight to fd 2, as a log or a panic writes.
			fmt.Fprintln(os.NewFile(2, "stderr"), "plugin: cannot open the cache database")
			os.Exit(3)
		}
		echo := sdk.NewTool("Echo the text back.\nThe second line is not shown in listings.",
			func(_ context.Context, inv sdk.Invocation, in echoInput) (echoOutput, error) {
				return echoOutput{Text: in.Text, Agent: inv.Agent, Call: inv.ToolCallID}, nil
			})
		echo.Title = "Echo"
		echo.Annotations = &sdk.Annotations{ReadOnlyHint: true, OpenWorldHint: sdk.Hint(false)}
		echo.Project = sdk.ProjectTyped(func(_ echoInput, out echoOutput) []sdk.Part {
			return []sdk.Part{sdk.Text("echo: " + out.Text)}
		})
		picture := sdk.NewTool("Return a tiny picture.",
			func(context.Context, sdk.Invocation, empty) (string, error) { return "picture", nil })
		picture.Project = func(_, _ json.RawMessage) []sdk.Part {
			return []sdk.Part{sdk.Text("a picture:"), sdk.Media("image/png", []byte{0x89, 'P', 'N', 'G'})}
		}
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo":    echo,
			"picture": picture,
			"fail": sdk.NewTool("Always fail.",
				func(context.Context, sdk.Invocation, empty) (string, error) {
					return "", sdk.Failf("the file %q does not exist", "missing.txt")
				}),
			"progress": sdk.NewTool("Report three progress events.",
				func(ctx context.Context, _ sdk.Invocation, _ empty) (string, error) {
					for i := 1; i <= 3; i++ {
						sdk.ReportProgress(ctx, sdk.Progress{Progress: float64(i), Total: 3, Message: "step"})
					}
					return "done", nil
				}),
			"big": sdk.NewTool("Return more lines than the model may see.",
				func(context.Context, sdk.Invocation, empty) (string, error) {
					return strings.Repeat("line\n", 5000), nil
				}),
			"confirm": sdk.NewTool("Ask the person to confirm.",
				func(ctx context.Context, _ sdk.Invocation, _ empty) (string, error) {
					a, err := sdk.Ask(ctx, sdk.Question{Message: "Proceed?", Schema: json.RawMessage(
						`{"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": "string", "description": "why"}}, "required": ["ok"]}`)})
					if err != nil {
						return "", sdk.Failf("%v", err)
					}
					return string(a.Action) + " " + string(a.Content), nil
				}),
			"block": sdk.NewTool("Report progress, then wait until cancelled.",
				func(ctx context.Context, _ sdk.Invocation, _ empty) (string, error) {
					sdk.ReportProgress(ctx, sdk.Progress{Progress: 0, Message: "blocking"})
					<-ctx.Done()
					return "", context.Cause(ctx)
				}),
			"stuck": sdk.NewTool("Ignore SIGTERM, create the marker file, never return.",
				func(_ context.Context, _ sdk.Invocation, in stuckInput) (string, error) {
					signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
					if err := os.WriteFile(in.Marker, nil, 0o644); err != nil {
						return "", err
					}
					select {}
				}),
		})
		return err
	}))
}

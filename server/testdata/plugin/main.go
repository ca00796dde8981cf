// Command plugin is the server tests' plugin.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/toolhost/toolhost/sdk"
)

type textIn struct {
	Text string `json:"text"`
}

// nameSchema is the question tool's answer: a non-empty name.
const nameSchema = `{"type": "object", "properties": {"name": {"type": "string", "minLength": 1}}, "required": ["name"]}`

type countIn struct {
	N int `json:"n"`
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo": sdk.NewTool("Echoes the text.", func(_ context.Context, _ sdk.Invocation, in textIn) (string, error) {
				return in.Text, nil
			}),
			"progress": sdk.NewTool("Reports n progress events.", func(ctx context.Context, _ sdk.Invocation, in countIn) (string, error) {
				for i := 1; i <= in.N; i++ {
					sdk.ReportProgress(ctx, sdk.Progress{Progress: float64(i), Total: float64(in.N), Message: fmt.Sprint("step ", i)})
				}
				return "done", nil
			}),
			"flood": sdk.NewTool("Reports n progress events of 32 KiB, then blocks until cancelled.", func(ctx context.Context, _ sdk.Invocation, in countIn) (string, error) {
				pad := strings.Repeat("p", 32<<10)
				for i := 1; i <= in.N; i++ {
					sdk.ReportProgress(ctx, sdk.Progress{Progress: float64(i), Total: float64(in.N), Message: pad})
				}
				<-ctx.Done()
				return "", context.Cause(ctx)
			}),
			"block": sdk.NewTool("Blocks until cancelled.", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
				sdk.ReportProgress(ctx, sdk.Progress{Message: "blocking"})
				<-ctx.Done()
				return "", context.Cause(ctx)
			}),
			"guarded": sdk.NewTool("Needs permission.", func(context.Context, sdk.Invocation, struct{}) (string, error) {
				return "granted", nil
			}),
			"crash": sdk.NewTool("Exits the plugin process, as a crash.", func(context.Context, sdk.Invocation, struct{}) (string, error) {
				os.Exit(3)
				return "", nil
			}),
			"nap": sdk.NewTool("Sleeps ms milliseconds, then says so.", func(ctx context.Context, _ sdk.Invocation, in countIn) (string, error) {
				select {
				case <-time.After(time.Duration(in.N) * time.Millisecond):
					return "rested", nil
				case <-ctx.Done():
					return "", context.Cause(ctx)
				}
			}),
			"question": sdk.NewTool("Asks the person for a name (sdk.Ask) and says how they answered.", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
				a, err := sdk.Ask(ctx, sdk.Question{Message: "What is your name?", Schema: json.RawMessage(nameSchema)})
				var un *sdk.UnansweredError
				if errors.As(err, &un) {
					return "unanswered: " + un.Reason, nil
				}
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%s %s", a.Action, a.Content), nil
			}),
			"sample": sdk.NewTool("Asks the model (sdk.Sample) to complete the text.", func(ctx context.Context, _ sdk.Invocation, in textIn) (string, error) {
				temp := 0.5
				res, err := sdk.Sample(ctx, sdk.SampleRequest{
					Messages:     []sdk.SampleMessage{{Role: "user", Content: sdk.Text(in.Text)}},
					SystemPrompt: "Be brief.", MaxTokens: 50, Temperature: &temp, ModelHints: []string{"small"},
				})
				var un *sdk.UnansweredError
				switch {
				case errors.As(err, &un):
					return "unanswered: " + un.Reason, nil
				case ctx.Err() != nil:
					return "", context.Cause(ctx)
				case err != nil:
					return "", sdk.Failf("sampling failed: %v", err)
				}
				return fmt.Sprintf("%s %s: %s (%s)", res.Model, res.Message.Role, res.Message.Content.Text, res.StopReason), nil
			}),
			"whoami": sdk.NewTool("Returns the pid.", func(context.Context, sdk.Invocation, struct{}) (int, error) {
				return os.Getpid(), nil
			}),
		})
		return err
	}))
}

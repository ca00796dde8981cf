// Command slow is an example toolhost plugin with one long-running tool, countdown.
// Copy it for tools that take a while: it shows how to report progress and how to
// honour cancellation.
//
// Cancellation crosses the process boundary: when the session runner cancels a call,
// or the Location closes, the executor's ctx is cancelled. A tool must then stop and
// return promptly; a plugin that ignores it is killed when its scope closes.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/toolhost/toolhost/sdk"
)

// CountdownInput is countdown's input. A field with omitempty is optional.
type CountdownInput struct {
	Seconds int `json:"seconds" jsonschema:"description=How many steps to count down.,minimum=1,maximum=3600"`
	StepMS  int `json:"step_ms,omitempty" jsonschema:"description=Length of one step in milliseconds; default 1000 (one second).,minimum=1,maximum=60000"`
}

func countdown(ctx context.Context, inv sdk.Invocation, in CountdownInput) (string, error) {
	step := time.Second
	if in.StepMS > 0 {
		step = time.Duration(in.StepMS) * time.Millisecond
	}
	tick := time.NewTicker(step)
	defer tick.Stop()

	// Progress goes to whoever watches the call (the CLI prints it on stderr). Total
	// lets a watcher show a fraction; report once at the start so the watcher knows
	// the call is under way.
	total := float64(in.Seconds)
	sdk.ReportProgress(ctx, sdk.Progress{Progress: 0, Total: total, Message: fmt.Sprintf("%d left", in.Seconds)})
	for done := 1; done <= in.Seconds; done++ {
		select {
		case <-ctx.Done():
			// Stop at once and return the cancellation's cause. Never wrap it in a
			// ToolFailure: an interrupted call is not the tool's answer.
			return "", context.Cause(ctx)
		case <-tick.C:
		}
		sdk.ReportProgress(ctx, sdk.Progress{Progress: float64(done), Total: total, Message: fmt.Sprintf("%d left", in.Seconds-done)})
	}
	return fmt.Sprintf("Lift-off after %d steps of %s.", in.Seconds, step), nil
}

// Activate registers the plugin's one tool; sdk.ActivateFunc turns a function into
// an sdk.Plugin.
func Activate(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
	_, err := tools.Register(ctx, map[string]sdk.Tool{
		"countdown": sdk.NewTool("Counts down, one step per second unless step_ms says otherwise, reporting progress at every step.", countdown),
	})
	return err
}

func main() { sdk.Serve(sdk.ActivateFunc(Activate)) }

// Command echo is the plugin the location tests activate: a typed "echo" tool that
// also reports which process and Location served it, and a "wait" tool that reports
// progress and then blocks until its call is cancelled.
package main

import (
	"context"
	"os"
	"strconv"

	"github.com/toolhost/toolhost/sdk"
)

type echoInput struct {
	Text string `json:"text" jsonschema:"description=The text to echo."`
}

type echoOutput struct {
	Text      string `json:"text"`
	PID       int    `json:"pid"`
	Directory string `json:"directory"`
}

type waitInput struct{}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo": sdk.NewTool("Echo the text back.\nAlso reports the serving process.",
				func(_ context.Context, _ sdk.Invocation, in echoInput) (echoOutput, error) {
					return echoOutput{Text: in.Text, PID: hostPID(), Directory: loc.Directory}, nil
				}),
			"wait": sdk.NewTool("Report progress, then wait until cancelled.",
				func(ctx context.Context, _ sdk.Invocation, _ waitInput) (string, error) {
					sdk.ReportProgress(ctx, sdk.Progress{Progress: 1, Total: 2, Message: "waiting"})
					<-ctx.Done()
					return "", context.Cause(ctx)
				}),
		})
		return err
	}))
}

// hostPID is this process's pid as the host sees it: /proc is the host's, so
// /proc/self names it even inside the sandbox's PID namespace.
func hostPID() int {
	link, err := os.Readlink("/proc/self")
	if pid, err2 := strconv.Atoi(link); err == nil && err2 == nil {
		return pid
	}
	return os.Getpid()
}

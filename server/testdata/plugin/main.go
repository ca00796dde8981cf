// Command plugin is the server tests' plugin.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/toolhost/toolhost/sdk"
)

type textIn struct {
	Text string `json:"text"`
}

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
			"whoami": sdk.NewTool("Returns the pid.", func(context.Context, sdk.Invocation, struct{}) (int, error) {
				return os.Getpid(), nil
			}),
		})
		return err
	}))
}

// Command plugin is the client's end-to-end tests' plugin. Its version is set at
// build time with -ldflags "-X main.version=...".
package main

import (
	"context"

	"github.com/toolhost/toolhost/sdk"
)

var version = "dev"

type textIn struct {
	Text string `json:"text"`
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo": sdk.NewTool("Echoes the text.", func(_ context.Context, _ sdk.Invocation, in textIn) (string, error) {
				return in.Text, nil
			}),
			"block": sdk.NewTool("Blocks until cancelled.", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
				sdk.ReportProgress(ctx, sdk.Progress{Message: "blocking"})
				<-ctx.Done()
				return "", context.Cause(ctx)
			}),
			"guarded": sdk.NewTool("Needs permission.", func(context.Context, sdk.Invocation, struct{}) (string, error) {
				return "granted", nil
			}),
			"version": sdk.NewTool("Returns the build's version.", func(context.Context, sdk.Invocation, struct{}) (string, error) {
				return version, nil
			}),
		})
		return err
	}))
}

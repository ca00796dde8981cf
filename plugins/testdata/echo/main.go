// Command echo is the benchmark's toolhost plugin: one typed echo tool, the
// counterpart of the bare go-plugin baseline.
package main

import (
	"context"

	"github.com/toolhost/toolhost/sdk"
)

type in struct {
	Text string `json:"text"`
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, _ sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo": sdk.NewTool("echoes", func(_ context.Context, _ sdk.Invocation, in in) (string, error) { return in.Text, nil }),
		})
		return err
	}))
}

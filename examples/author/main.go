// Command greeter is a toolhost plugin with one tool, greet. It is the example of the
// author walkthrough (README.md): a module of its own, tested with plugintest.
package main

import (
	"context"
	"strings"

	"github.com/toolhost/toolhost/sdk"
)

// GreetInput is greet's input; its JSON Schema is derived from the type.
type GreetInput struct {
	Name string `json:"name" jsonschema:"description=who to greet"`
}

// greet answers with a greeting, or a failure the model sees when there is nobody to greet.
func greet(ctx context.Context, inv sdk.Invocation, in GreetInput) (string, error) {
	if strings.TrimSpace(in.Name) == "" {
		return "", sdk.Failf("name is empty: say who to greet")
	}
	return "Hello, " + in.Name + "!", nil
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"greet": sdk.NewTool("Greets someone by name.", greet),
		})
		return err
	}))
}

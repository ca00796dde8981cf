// Command plugin is the telemetry tests' plugin. With OTEL_EXPORTER_OTLP_ENDPOINT in
// its environment it exports a span of its own ("plugin.work") for each call of
// traced, synchronously, so the span has arrived when the call returns.
package main

import (
	"context"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolhost/toolhost/sdk"
)

type textIn struct {
	Text string `json:"text"`
}

func main() {
	var tracer trace.Tracer = noop.NewTracerProvider().Tracer("plugin")
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		exp, err := otlptracegrpc.New(context.Background())
		if err != nil {
			panic(err)
		}
		tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("plugin")
	}
	echo := func(_ context.Context, _ sdk.Invocation, in textIn) (string, error) { return in.Text, nil }
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, _ sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo":    sdk.NewTool("Echoes the text.", echo),
			"guarded": sdk.NewTool("Echoes the text, with permission.", echo),
			"denied":  sdk.NewTool("Echoes the text, never.", echo),
			"traced": sdk.NewTool("Echoes the text inside a span of its own.", func(ctx context.Context, _ sdk.Invocation, in textIn) (string, error) {
				_, span := tracer.Start(ctx, "plugin.work", trace.WithAttributes(attribute.Int("text.bytes", len(in.Text))))
				defer span.End()
				return in.Text, nil
			}),
			"fail": sdk.NewTool("Fails as a tool.", func(context.Context, sdk.Invocation, textIn) (string, error) {
				return "", &sdk.ToolFailure{Message: "failed on purpose"}
			}),
			"crash": sdk.NewTool("Exits the plugin process, as a crash.", func(context.Context, sdk.Invocation, struct{}) (string, error) {
				os.Exit(3)
				return "", nil
			}),
		})
		return err
	}))
}

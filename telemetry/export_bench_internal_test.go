package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/toolhost/toolhost/internal/tracectx"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/tool"
)

// BenchmarkExportBatch measures what the exporting goroutine does with a batch of
// recorded spans as the benchmark's plugin calls make them (73 settlements of 7
// spans: the settlement, 5 steps and the plugin call): convert it (otlpUpload)
// and encode it (otlpCodec), as an export to an OTLP/gRPC receiver does, without
// the round trip.
func BenchmarkExportBatch(b *testing.B) {
	env := map[string]string{
		"OTEL_TRACES_EXPORTER":           "otlp",
		"OTEL_EXPORTER_OTLP_PROTOCOL":    "grpc",
		"OTEL_TRACES_SAMPLER":            "always_on",
		"OTEL_METRICS_EXPORTER":          "none",
		"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100000", // the test takes the batch itself
		"OTEL_BSP_MAX_QUEUE_SIZE":        "100000",
	}
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tel, err := Start(b.Context(), Options{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		b.Fatal(err)
	}
	obs := tel.Observer()
	src := registry.Source{Kind: "plugin", Name: "test"}
	settlement := &registry.Settlement{Outcome: registry.Completed, Content: []tool.Part{{Type: tool.PartText, Text: "0123456789012345678901234567890123456789012345678901"}}}
	for range 73 {
		call := registry.Call{Name: "echo", Input: []byte(`{"text":"0123456789012345678901234567890123456789012345678901"}`),
			Invocation: sdk.Invocation{SessionID: "s", ToolCallID: "c"}}
		ctx, s := obs.StartSettle(context.Background(), "/tmp/BenchmarkTelemetryAlternating3562127621/005", call)
		s.Resolved(src)
		for _, step := range []registry.Step{registry.StepValidateInput, registry.StepExecute, registry.StepValidateOutput, registry.StepProject, registry.StepBound} {
			sctx := s.Step(ctx, step)
			if step == registry.StepExecute {
				_, span := tracectx.StartPluginCall(sctx, "plugin:test", "echo")
				span.End()
			}
		}
		s.End(settlement, nil)
	}
	tel.batch.mu.Lock()
	batch := tel.batch.queue
	tel.batch.queue = nil
	tel.batch.mu.Unlock()
	if len(batch) != 73*7 {
		b.Fatalf("%d spans recorded, want %d", len(batch), 73*7)
	}
	client := &encodeClient{codec: newOTLPCodec(maxExportRequest)}
	u := &otlpUpload{client: client}
	b.ReportAllocs()
	for b.Loop() {
		if err := u.export(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(client.bytes)/float64(len(batch)), "bytes/span")
	if err := tel.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// encodeClient encodes what it is given to upload, as gRPC's codec would.
type encodeClient struct {
	codec *otlpCodec
	bytes int
}

var _ otlptrace.Client = (*encodeClient)(nil)

func (*encodeClient) Start(context.Context) error { return nil }
func (*encodeClient) Stop(context.Context) error  { return nil }
func (c *encodeClient) UploadTraces(_ context.Context, rss []*tracepb.ResourceSpans) error {
	buf, err := c.codec.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rss})
	c.bytes = buf.Len()
	buf.Free()
	return err
}

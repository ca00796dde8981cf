package telemetry_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/telemetry"
)

// BenchmarkTelemetryAlternating calls a plugin's echo tool in blocks of 100, in
// turn through a registry without telemetry and through one with traces and
// metrics on (every call sampled, spans batched to an OTLP receiver in this
// process, metrics read by a periodic OTLP reader), each Location with its own
// copy of the plugin. It reports each side's median and their ratio (on / off).
func BenchmarkTelemetryAlternating(b *testing.B) {
	rcv := startReceiver(b)
	otlpEnv(b, rcv)
	b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tel, err := telemetry.Start(b.Context(), telemetry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	rules := `[{"action": "*", "resource": "*", "effect": "allow"}]`
	activate := func(reg *registry.Registry, observe func(context.Context, string, permission.Decision)) *registry.Request {
		loc, err := location.Activate(b.Context(), root, workspace(b, `, "trusted": true`, rules), location.Options{
			Registry: reg, StateDir: b.TempDir(), ObservePermission: observe,
		})
		if err != nil {
			b.Fatal(err)
		}
		q, err := loc.Prepare()
		if err != nil {
			b.Fatal(err)
		}
		return q
	}
	off := activate(newRegistry(b, nil), nil)
	regOn := newRegistry(b, tel.Observer())
	tel.SetStorage(regOn.Storage())
	on := activate(regOn, tel.ObservePermission())

	call := registry.Call{Name: "echo", Input: []byte(`{"text":"0123456789012345678901234567890123456789012345678901"}`),
		Invocation: sdk.Invocation{SessionID: "s", ToolCallID: "c"}}
	const block = 100
	var offLat, onLat []time.Duration
	run := func(q *registry.Request, lat *[]time.Duration) {
		for range block {
			start := time.Now()
			if s, err := q.Settle(context.Background(), call); err != nil || s.Outcome != registry.Completed {
				b.Fatal(s, err)
			}
			*lat = append(*lat, time.Since(start))
		}
	}
	for b.Loop() {
		run(off, &offLat)
		run(on, &onLat)
	}
	slices.Sort(offLat)
	slices.Sort(onLat)
	off50, on50 := offLat[len(offLat)/2], onLat[len(onLat)/2]
	b.ReportMetric(float64(off50.Nanoseconds()), "off-p50-ns")
	b.ReportMetric(float64(on50.Nanoseconds()), "on-p50-ns")
	b.ReportMetric(float64(on50)/float64(off50), "p50-ratio")
	b.ReportMetric(float64(onLat[len(onLat)*99/100])/float64(offLat[len(offLat)*99/100]), "p99-ratio")
}

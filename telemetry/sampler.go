package telemetry

import (
	"fmt"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// samplerFromEnv is the sampler OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// name, decided as the SDK decides it from the same variables: the settlement span,
// which telemetry records itself (see settling.startSpan), and the SDK's spans
// must be sampled alike, so Start gives the SDK this sampler too. Unset: parent
// based, always on. An unknown sampler or a bad ratio gives the SDK's fallback
// and an error to report, as the SDK reports it.
func samplerFromEnv(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || v < 0 || v > 1 {
			return sdktrace.TraceIDRatioBased(1), fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER_ARG %q is not a ratio between 0 and 1; sampling every trace", arg)
		}
		return sdktrace.TraceIDRatioBased(v), nil
	}
	switch name {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		s, err := ratio()
		return sdktrace.ParentBased(s), err
	}
	return sdktrace.ParentBased(sdktrace.AlwaysSample()), fmt.Errorf("telemetry: OTEL_TRACES_SAMPLER %q is not a sampler toolhost knows (always_on, always_off, traceidratio and their parentbased_ forms); using parentbased_always_on", name)
}

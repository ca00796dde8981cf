package telemetry

import (
	"context"
	"slices"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// collectDurations collects r and returns its toolhost.call.duration points by
// tool.
func collectDurations(t *testing.T, r *sdkmetric.ManualReader) (metricdata.Temporality, map[string]metricdata.HistogramDataPoint[float64]) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]metricdata.HistogramDataPoint[float64]{}
	var temporality metricdata.Temporality
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != durationName {
				continue
			}
			h := m.Data.(metricdata.Histogram[float64])
			temporality = h.Temporality
			for _, p := range h.DataPoints {
				tool, _ := p.Attributes.Value("toolhost.tool")
				points[tool.AsString()] = p
			}
		}
	}
	return temporality, points
}

func extrema(t *testing.T, p metricdata.HistogramDataPoint[float64]) (float64, float64) {
	t.Helper()
	lo, ok1 := p.Min.Value()
	hi, ok2 := p.Max.Value()
	if !ok1 || !ok2 {
		t.Fatalf("point without min or max: %+v", p)
	}
	return lo, hi
}

// TestDurationHistogram checks the call durations a reader collects, in either
// temporality: the buckets (a value on a bound counts in that bound's bucket, as
// Prometheus's "le" says), count, sum and extremes; cumulative points keep
// everything since the breakdown began, delta points only what came since the
// last collection, and a breakdown without calls since then is left out.
func TestDurationHistogram(t *testing.T) {
	key := func(tool string) callAttrKey { return callAttrKey{"loc", "plugin", "p", tool, "completed"} }
	t.Run("cumulative", func(t *testing.T) {
		calls := &attrCache{}
		r := sdkmetric.NewManualReader(sdkmetric.WithProducer(producerFor(calls, sdkmetric.DefaultTemporalitySelector)))
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		if _, points := collectDurations(t, r); len(points) != 0 {
			t.Fatalf("points before any call: %v", points)
		}
		a := calls.get(key("a"))
		var sum float64
		for _, v := range []float64{0.0005, 0.0004, 2, 400} {
			a.duration.record(v, calls.interval)
			sum += v
		}
		temporality, points := collectDurations(t, r)
		if temporality != metricdata.CumulativeTemporality {
			t.Errorf("temporality %v, want cumulative", temporality)
		}
		p := points["a"]
		want := make([]uint64, len(durationBounds)+1)
		want[0], want[slices.Index(durationBounds[:], 2.5)], want[len(durationBounds)] = 2, 1, 1
		if p.Count != 4 || p.Sum != sum || !slices.Equal(p.BucketCounts, want) || !slices.Equal(p.Bounds, durationBounds[:]) {
			t.Errorf("point: count %d sum %v buckets %v, want 4, %v, %v", p.Count, p.Sum, p.BucketCounts, sum, want)
		}
		if lo, hi := extrema(t, p); lo != 0.0004 || hi != 400 {
			t.Errorf("min, max = %v, %v, want 0.0004, 400", lo, hi)
		}
		a.duration.record(0.01, calls.interval)
		_, points = collectDurations(t, r)
		if p2 := points["a"]; p2.Count != 5 || !p2.StartTime.Equal(p.StartTime) {
			t.Errorf("second collection: count %d, start %v; want 5 and the first's start %v", p2.Count, p2.StartTime, p.StartTime)
		}
	})
	t.Run("delta", func(t *testing.T) {
		calls := &attrCache{}
		r := sdkmetric.NewManualReader(sdkmetric.WithProducer(producerFor(calls, func(sdkmetric.InstrumentKind) metricdata.Temporality {
			return metricdata.DeltaTemporality
		})))
		sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
		a, b := calls.get(key("a")), calls.get(key("b"))
		a.duration.record(0.3, calls.interval)
		a.duration.record(0.001, calls.interval)
		b.duration.record(5, calls.interval)
		temporality, points := collectDurations(t, r)
		if temporality != metricdata.DeltaTemporality {
			t.Errorf("temporality %v, want delta", temporality)
		}
		if p := points["a"]; p.Count != 2 || p.Sum != 0.3+0.001 {
			t.Errorf("first interval of a: count %d sum %v, want 2, %v", p.Count, p.Sum, 0.3+0.001)
		}
		first := points["a"].Time
		a.duration.record(0.02, calls.interval)
		_, points = collectDurations(t, r)
		if _, ok := points["b"]; ok {
			t.Errorf("b, without calls since the last collection, was reported: %+v", points["b"])
		}
		p := points["a"]
		if p.Count != 1 || p.Sum != 0.02 || !p.StartTime.Equal(first) {
			t.Errorf("second interval of a: count %d sum %v start %v, want 1, 0.02 and the first collection's time %v", p.Count, p.Sum, p.StartTime, first)
		}
		if lo, hi := extrema(t, p); lo != 0.02 || hi != 0.02 {
			t.Errorf("second interval's min, max = %v, %v, want 0.02, 0.02 (not the first interval's)", lo, hi)
		}
	})
}

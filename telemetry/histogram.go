package telemetry

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolhost/toolhost/internal/tracectx"
)

// The toolhost.call.duration histogram is aggregated here, in each call
// breakdown's callOpts, and handed to the metric readers by a durationProducer,
// rather than recorded through the SDK's synchronous histogram: the SDK's Record
// checks, normalises and hashes the attribute set on every call (500 ns a call on
// this project's benchmark machine, against 30 ns here), and a settlement records
// one duration on the call's own path.

const (
	durationName = "toolhost.call.duration"
	durationDesc = "Time from a call's start to its settlement, by Location, source, tool and outcome."
	durationUnit = "s"
)

// durationBounds are the histogram's bucket boundaries, in seconds.
var durationBounds = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// histogram is one breakdown's call durations, as an explicit-bucket histogram:
// since the breakdown began, and, when there is a delta reader, over its current
// interval (see durationProducer).
type histogram struct {
	mu            sync.Mutex
	all, interval histData
}

// histData is a histogram's data over some time.
type histData struct {
	counts   [len(durationBounds) + 1]uint64 // a value v counts in the first bucket whose bound is ≥ v
	sum      float64
	min, max float64 // meaningful when a count is not 0
}

func (d *histData) add(i int, v float64) {
	if d.count() == 0 {
		d.min, d.max = v, v
	}
	d.counts[i]++
	d.sum += v
	d.min, d.max = math.Min(d.min, v), math.Max(d.max, v)
}

func (d *histData) count() uint64 {
	var n uint64
	for _, c := range d.counts {
		n += c
	}
	return n
}

// record adds v, to the interval's data too when interval is set (a delta reader
// takes them: attrCache.interval).
func (h *histogram) record(v float64, interval bool) {
	i := 0
	for i < len(durationBounds) && v > durationBounds[i] {
		i++
	}
	h.mu.Lock()
	h.all.add(i, v)
	if interval {
		h.interval.add(i, v)
	}
	h.mu.Unlock()
}

// take returns h's data since it began, or, with interval, over the current
// interval, which it then ends.
func (h *histogram) take(interval bool) histData {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !interval {
		return h.all
	}
	d := h.interval
	h.interval = histData{}
	return d
}

// durationProducer hands the call breakdowns' histograms to one metric reader as
// toolhost.call.duration, in the reader's temporality. There is one delta producer
// at most (the OTLP reader's, when OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE
// asks for delta): it ends the breakdowns' intervals as it collects them.
type durationProducer struct {
	c     *attrCache
	delta bool

	mu sync.Mutex
	at time.Time // delta only: the last collection's time
}

var _ sdkmetric.Producer = (*durationProducer)(nil)

// producerFor returns a producer for a reader whose exporter chooses temporality.
// A delta producer sets c.interval: it must be made before c records.
func producerFor(c *attrCache, temporality func(sdkmetric.InstrumentKind) metricdata.Temporality) *durationProducer {
	p := &durationProducer{c: c, delta: temporality(sdkmetric.InstrumentKindHistogram) == metricdata.DeltaTemporality, at: time.Now()}
	c.interval = c.interval || p.delta
	return p
}

// Produce returns one data point for each breakdown with a call (a delta producer:
// with a call since its last collection).
func (p *durationProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var points []metricdata.HistogramDataPoint[float64]
	p.c.each(func(opts *callOpts) {
		d := opts.duration.take(p.delta)
		count := d.count()
		if count == 0 {
			return
		}
		start := opts.start
		if p.delta && p.at.After(start) {
			start = p.at
		}
		points = append(points, metricdata.HistogramDataPoint[float64]{
			Attributes:   opts.set,
			StartTime:    start,
			Time:         now,
			Count:        count,
			Bounds:       durationBounds[:],
			BucketCounts: append([]uint64(nil), d.counts[:]...),
			Min:          metricdata.NewExtrema(d.min),
			Max:          metricdata.NewExtrema(d.max),
			Sum:          d.sum,
		})
	})
	p.at = now
	if len(points) == 0 {
		return nil, nil
	}
	temporality := metricdata.CumulativeTemporality
	if p.delta {
		temporality = metricdata.DeltaTemporality
	}
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: tracectx.Scope},
		Metrics: []metricdata.Metrics{{
			Name: durationName, Description: durationDesc, Unit: durationUnit,
			Data: metricdata.Histogram[float64]{Temporality: temporality, DataPoints: points},
		}},
	}}, nil
}

package telemetry

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
)

// TestPromTextExposition writes every kind of data toolhost records as
// Prometheus text and checks it line for line (the names, suffixes, labels and
// their order that the OpenTelemetry Prometheus exporter gave), then parses it
// with the Prometheus text parser: label values with quotes, backslashes and
// newlines, and HELP texts with them, come back as they were recorded.
func TestPromTextExposition(t *testing.T) {
	awkward := "a \"quoted\" \\path\\\nsecond line"
	scope := instrumentation.Scope{Name: "github.com/toolhost/toolhost", Version: "1.2"}
	rm := metricdata.ResourceMetrics{
		Resource: resource.NewSchemaless(attribute.String("service.name", "toolhost"), attribute.String("host.name", "box")),
		ScopeMetrics: []metricdata.ScopeMetrics{{Scope: scope, Metrics: []metricdata.Metrics{
			{Name: "toolhost.calls", Description: "Settled calls.", Unit: "{call}", Data: metricdata.Sum[int64]{
				IsMonotonic: true, Temporality: metricdata.CumulativeTemporality,
				DataPoints: []metricdata.DataPoint[int64]{
					{Attributes: attribute.NewSet(attribute.String("toolhost.tool", "zeta")), Value: 2},
					{Attributes: attribute.NewSet(attribute.String("toolhost.tool", awkward), attribute.Bool("toolhost.ok", true)), Value: 1},
				},
			}},
			{Name: "toolhost.call.duration", Description: "Call time,\nin seconds \\ of wall clock.", Unit: "s", Data: metricdata.Histogram[float64]{
				Temporality: metricdata.CumulativeTemporality,
				DataPoints: []metricdata.HistogramDataPoint[float64]{{
					Attributes: attribute.NewSet(attribute.String("toolhost.tool", "echo")),
					StartTime:  time.Unix(0, 0), Time: time.Unix(1, 0),
					Count: 4, Bounds: []float64{0.0005, 1, 300}, BucketCounts: []uint64{1, 2, 0, 1}, Sum: 301.5,
				}},
			}},
			{Name: "toolhost.storage.bytes", Description: "Bytes kept.", Unit: "By", Data: metricdata.Gauge[int64]{
				DataPoints: []metricdata.DataPoint[int64]{{Attributes: attribute.NewSet(attribute.String("1st.key", "v")), Value: 4096}},
			}},
			{Name: "queue.depth", Unit: "{item}", Data: metricdata.Sum[float64]{ // not monotonic: a gauge
				DataPoints: []metricdata.DataPoint[float64]{{Value: math.Inf(1)}},
			}},
			{Name: "cache.hits", Unit: "1", Data: metricdata.Gauge[float64]{
				DataPoints: []metricdata.DataPoint[float64]{{Value: 0.25}},
			}},
			{Name: "io", Unit: "By/s", Data: metricdata.Gauge[float64]{
				DataPoints: []metricdata.DataPoint[float64]{{Value: 1e6}},
			}},
		}}},
	}
	var buf bytes.Buffer
	writePromText(&buf, &rm)

	const sc = `otel_scope_name="github.com/toolhost/toolhost",otel_scope_schema_url="",otel_scope_version="1.2"`
	want := `# HELP target_info Target metadata
# TYPE target_info gauge
target_info{host_name="box",service_name="toolhost"} 1
# TYPE cache_hits_ratio gauge
cache_hits_ratio{` + sc + `} 0.25
# TYPE io_bytes_per_second gauge
io_bytes_per_second{` + sc + `} 1e+06
# TYPE queue_depth gauge
queue_depth{` + sc + `} +Inf
# HELP toolhost_call_duration_seconds Call time,\nin seconds \\ of wall clock.
# TYPE toolhost_call_duration_seconds histogram
toolhost_call_duration_seconds_bucket{` + sc + `,toolhost_tool="echo",le="0.0005"} 1
toolhost_call_duration_seconds_bucket{` + sc + `,toolhost_tool="echo",le="1"} 3
toolhost_call_duration_seconds_bucket{` + sc + `,toolhost_tool="echo",le="300"} 3
toolhost_call_duration_seconds_bucket{` + sc + `,toolhost_tool="echo",le="+Inf"} 4
toolhost_call_duration_seconds_sum{` + sc + `,toolhost_tool="echo"} 301.5
toolhost_call_duration_seconds_count{` + sc + `,toolhost_tool="echo"} 4
# HELP toolhost_calls_total Settled calls.
# TYPE toolhost_calls_total counter
toolhost_calls_total{` + sc + `,toolhost_ok="true",toolhost_tool="a \"quoted\" \\path\\\nsecond line"} 1
toolhost_calls_total{` + sc + `,toolhost_tool="zeta"} 2
# HELP toolhost_storage_bytes Bytes kept.
# TYPE toolhost_storage_bytes gauge
toolhost_storage_bytes{key_1st_key="v",` + sc + `} 4096
`
	if got := buf.String(); got != want {
		t.Errorf("Prometheus text:\n%s\nwant:\n%s", got, want)
	}

	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("the Prometheus text parser refuses the output: %v", err)
	}
	if got := families["toolhost_call_duration_seconds"].GetHelp(); got != "Call time,\nin seconds \\ of wall clock." {
		t.Errorf("HELP parsed back as %q", got)
	}
	var found bool
	for _, m := range families["toolhost_calls_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "toolhost_tool" && l.GetValue() == awkward {
				found = m.GetCounter().GetValue() == 1
			}
		}
	}
	if !found {
		t.Errorf("no toolhost_calls_total with toolhost_tool=%q and value 1 parsed back: %v", awkward, families["toolhost_calls_total"])
	}
	h := families["toolhost_call_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 4 || h.GetSampleSum() != 301.5 || len(h.GetBucket()) != 4 || h.GetBucket()[1].GetCumulativeCount() != 3 {
		t.Errorf("histogram parsed back as %v", h)
	}
}

// TestPromName translates instrument names and units as the OpenTelemetry
// specification says: words split at characters Prometheus does not allow, the
// unit's word unless the name has it, _total for counters, _ratio for unit "1"
// gauges, annotations in braces ignored.
func TestPromName(t *testing.T) {
	for _, c := range []struct{ name, unit, typ, want string }{
		{"toolhost.calls", "{call}", "counter", "toolhost_calls_total"},
		{"toolhost.call.duration", "s", "histogram", "toolhost_call_duration_seconds"},
		{"toolhost.source.restarts", "{restart}", "counter", "toolhost_source_restarts_total"},
		{"toolhost.storage.bytes", "By", "gauge", "toolhost_storage_bytes"},
		{"requests.total", "", "counter", "requests_total"},
		{"latency", "ms", "gauge", "latency_milliseconds"},
		{"throughput", "KiBy/s", "gauge", "throughput_kibibytes_per_second"},
		{"cpu.utilization", "1", "gauge", "cpu_utilization_ratio"},
		{"cpu.utilization", "1", "counter", "cpu_utilization_total"},
		{"9lives", "", "gauge", "_9lives"},
		{"http..server--size", "furlong", "gauge", "http_server_size_furlong"},
	} {
		if got := promName(c.name, c.unit, c.typ); got != c.want {
			t.Errorf("promName(%q, %q, %s) = %q, want %q", c.name, c.unit, c.typ, got, c.want)
		}
	}
}

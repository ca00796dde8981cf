package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/telemetry"
)

// TestPrometheusText settles calls in a watched Location and parses /metrics with
// the Prometheus text parser: call counts by outcome, the latency histogram, the
// source gauges and the managed storage of the Location.
func TestPrometheusText(t *testing.T) {
	tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: func(string) string { return "" }, Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	reg := newRegistry(t, tel.Observer())
	tel.SetStorage(reg.Storage())
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	dir := workspace(t, "", `[{"action": "*", "resource": "*", "effect": "allow"}, {"action": "denied", "resource": "*", "effect": "deny"}]`)
	loc, err := location.Activate(t.Context(), root, dir, location.Options{
		Registry: reg, StateDir: t.TempDir(), ObservePermission: tel.ObservePermission(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Watch(loc)()
	q, err := loc.Prepare(registry.OfferAll()) // the denied tool is called, not offered
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"echo", "echo", "denied"} {
		if _, err := q.Settle(t.Context(), registry.Call{Name: tool, Input: []byte(`{"text":"x"}`), Invocation: sdk.Invocation{ToolCallID: "c"}}); err != nil {
			t.Fatal(err)
		}
	}

	hs := httptest.NewServer(tel.Handler())
	defer hs.Close()
	checkRefusesOtherHosts(t, hs.URL)
	resp, err := http.Get(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	value := func(family string, labels map[string]string) (float64, bool) {
		f := families[family]
		if f == nil {
			return 0, false
		}
	next:
		for _, m := range f.Metric {
			have := map[string]string{}
			for _, l := range m.Label {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"toolhost_calls_total", map[string]string{"toolhost_tool": "echo", "toolhost_outcome": "completed", "toolhost_source": "plugin:test", "toolhost_location": loc.ID()}, 2},
		{"toolhost_calls_total", map[string]string{"toolhost_tool": "denied", "toolhost_outcome": "tool_failure"}, 1},
		{"toolhost_call_duration_seconds", map[string]string{"toolhost_tool": "echo"}, 2},
		{"toolhost_permission_decisions_total", map[string]string{"toolhost_effect": "allow", "toolhost_allowed": "true"}, 2},
		{"toolhost_permission_decisions_total", map[string]string{"toolhost_effect": "deny", "toolhost_allowed": "false"}, 1},
		{"toolhost_source_state", map[string]string{"toolhost_source": "plugin:test", "toolhost_state": "running"}, 1},
		{"toolhost_source_restarts_total", map[string]string{"toolhost_source": "plugin:test"}, 0},
		{"toolhost_storage_bytes", map[string]string{"toolhost_location": loc.ID()}, 0},
	} {
		got, ok := value(c.family, c.labels)
		if !ok || got != c.want {
			var have []string
			for name := range families {
				have = append(have, name)
			}
			t.Errorf("%s%v = %v (found %v), want %v; families: %v", c.family, c.labels, got, ok, c.want, have)
		}
	}
}

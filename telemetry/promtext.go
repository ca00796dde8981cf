package telemetry

import (
	"bytes"
	"cmp"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/toolhost/toolhost/internal/loopback"
)

// Prometheus text is written here from the SDK's collected data rather than by the
// OpenTelemetry Prometheus exporter: that one goes through client_golang's
// registry, whose packages (with procfs and runtime/metrics) every toolhost
// command would initialise at start. The output is the one that exporter gave:
// the text exposition format 0.0.4, names and labels escaped to underscores, unit
// and _total suffixes, a target_info gauge of the resource, and otel_scope_*
// labels.

// promContentType is the media type of the text exposition format.
const promContentType = "text/plain; version=0.0.4; charset=utf-8"

// promHandler serves what its reader collects as Prometheus text. A local one,
// listening on loopback, serves only requests that name loopback in Host and, if
// they have one, Origin: a web page whose name resolves to 127.0.0.1 (DNS
// rebinding) would otherwise read the Location paths and tool names of the
// metrics.
type promHandler struct {
	r     *sdkmetric.ManualReader
	local bool
}

func (h promHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if h.local {
		if !loopback.Host(req.Host) {
			http.Error(w, "forbidden: Host must name a loopback address (DNS rebinding protection); scrape http://127.0.0.1:PORT/metrics", http.StatusForbidden)
			return
		}
		if origin := req.Header.Get("Origin"); origin != "" && !loopback.Origin(origin) {
			http.Error(w, "forbidden: Origin must be a loopback address", http.StatusForbidden)
			return
		}
	}
	var rm metricdata.ResourceMetrics
	if err := h.r.Collect(req.Context(), &rm); err != nil {
		http.Error(w, "telemetry: collect metrics: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	var buf bytes.Buffer
	writePromText(&buf, &rm)
	w.Header().Set("Content-Type", promContentType)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes())
}

// promFamily is one metric family: its samples are written together under one
// HELP and TYPE line.
type promFamily struct {
	help, typ string
	points    []promPoint
}

// promPoint is one data point: its labels, rendered without braces, and the
// sample lines (without the family name) it contributes.
type promPoint struct {
	labels string
	write  func(b *bytes.Buffer, name, labels string)
}

// writePromText writes rm as Prometheus text: target_info first when the resource
// has attributes, then the families sorted by name, each family's points sorted by
// their labels. Exponential histograms and summaries, which toolhost does not
// record, are left out.
func writePromText(b *bytes.Buffer, rm *metricdata.ResourceMetrics) {
	if rm.Resource != nil && rm.Resource.Len() > 0 {
		b.WriteString("# HELP target_info Target metadata\n# TYPE target_info gauge\ntarget_info")
		writeLabelSet(b, promLabels(rm.Resource.Iter(), nil))
		b.WriteString(" 1\n")
	}
	families := map[string]*promFamily{}
	for _, sm := range rm.ScopeMetrics {
		scope := []promLabel{
			{"otel_scope_name", sm.Scope.Name},
			{"otel_scope_schema_url", sm.Scope.SchemaURL},
			{"otel_scope_version", sm.Scope.Version},
		}
		for _, m := range sm.Metrics {
			addPromMetric(families, m, scope)
		}
	}
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f := families[name]
		slices.SortStableFunc(f.points, func(a, b promPoint) int { return cmp.Compare(a.labels, b.labels) })
		if f.help != "" {
			b.WriteString("# HELP ")
			b.WriteString(name)
			b.WriteByte(' ')
			b.WriteString(escapeHelp(f.help))
			b.WriteByte('\n')
		}
		b.WriteString("# TYPE ")
		b.WriteString(name)
		b.WriteByte(' ')
		b.WriteString(f.typ)
		b.WriteByte('\n')
		for _, p := range f.points {
			p.write(b, name, p.labels)
		}
	}
}

// addPromMetric adds m's data points to the family its Prometheus name and type
// make.
func addPromMetric(families map[string]*promFamily, m metricdata.Metrics, scope []promLabel) {
	var typ string
	var points []promPoint
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		typ, points = sumType(d.IsMonotonic), valuePoints(d.DataPoints, scope)
	case metricdata.Sum[float64]:
		typ, points = sumType(d.IsMonotonic), valuePoints(d.DataPoints, scope)
	case metricdata.Gauge[int64]:
		typ, points = "gauge", valuePoints(d.DataPoints, scope)
	case metricdata.Gauge[float64]:
		typ, points = "gauge", valuePoints(d.DataPoints, scope)
	case metricdata.Histogram[int64]:
		typ, points = "histogram", histogramPoints(d.DataPoints, scope)
	case metricdata.Histogram[float64]:
		typ, points = "histogram", histogramPoints(d.DataPoints, scope)
	default:
		return
	}
	name := promName(m.Name, m.Unit, typ)
	f := families[name]
	if f == nil {
		f = &promFamily{help: m.Description, typ: typ}
		families[name] = f
	} else if f.typ != typ {
		return // two instruments of different kinds under one name: the first wins
	}
	f.points = append(f.points, points...)
}

func sumType(monotonic bool) string {
	if monotonic {
		return "counter"
	}
	return "gauge"
}

func valuePoints[N int64 | float64](dps []metricdata.DataPoint[N], scope []promLabel) []promPoint {
	out := make([]promPoint, 0, len(dps))
	for _, dp := range dps {
		v := formatValue(dp.Value)
		out = append(out, promPoint{labels: renderLabels(promLabels(dp.Attributes.Iter(), scope)), write: func(b *bytes.Buffer, name, labels string) {
			writeSample(b, name, "", labels, "", v)
		}})
	}
	return out
}

func histogramPoints[N int64 | float64](dps []metricdata.HistogramDataPoint[N], scope []promLabel) []promPoint {
	out := make([]promPoint, 0, len(dps))
	for _, dp := range dps {
		out = append(out, promPoint{labels: renderLabels(promLabels(dp.Attributes.Iter(), scope)), write: func(b *bytes.Buffer, name, labels string) {
			var cum uint64
			for i, n := range dp.BucketCounts { // one more than Bounds: the last is +Inf
				cum += n
				le := "+Inf"
				if i < len(dp.Bounds) {
					le = formatFloat(dp.Bounds[i])
				}
				writeSample(b, name, "_bucket", labels, `le="`+le+`"`, strconv.FormatUint(cum, 10))
			}
			writeSample(b, name, "_sum", labels, "", formatValue(dp.Sum))
			writeSample(b, name, "_count", labels, "", strconv.FormatUint(dp.Count, 10))
		}})
	}
	return out
}

// writeSample writes one line: name+suffix, the labels and extra (either may be
// empty) in braces, and the value.
func writeSample(b *bytes.Buffer, name, suffix, labels, extra, value string) {
	b.WriteString(name)
	b.WriteString(suffix)
	if labels != "" || extra != "" {
		b.WriteByte('{')
		b.WriteString(labels)
		if labels != "" && extra != "" {
			b.WriteByte(',')
		}
		b.WriteString(extra)
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(value)
	b.WriteByte('\n')
}

// promLabel is a label with its name already escaped.
type promLabel struct{ name, value string }

// promLabels returns scope's labels and the attributes as labels, sorted by name.
// Attributes whose escaped names collide keep the first in the set's order.
func promLabels(it attribute.Iterator, scope []promLabel) []promLabel {
	out := append(make([]promLabel, 0, it.Len()+len(scope)), scope...)
	for it.Next() {
		kv := it.Attribute()
		name := promLabelName(string(kv.Key))
		if slices.ContainsFunc(out, func(l promLabel) bool { return l.name == name }) {
			continue
		}
		out = append(out, promLabel{name, kv.Value.Emit()})
	}
	slices.SortFunc(out, func(a, b promLabel) int { return cmp.Compare(a.name, b.name) })
	return out
}

// renderLabels returns the labels as name="value" pairs joined by commas.
func renderLabels(ls []promLabel) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.name)
		b.WriteString(`="`)
		b.WriteString(escapeLabelValue(l.value))
		b.WriteByte('"')
	}
	return b.String()
}

func writeLabelSet(b *bytes.Buffer, ls []promLabel) {
	if len(ls) == 0 {
		return
	}
	b.WriteByte('{')
	b.WriteString(renderLabels(ls))
	b.WriteByte('}')
}

// promUnit returns the Prometheus word for an OpenTelemetry (UCUM) unit, or the
// unit as it is written when it has none.
func promUnit(u string) string {
	switch u {
	case "d":
		return "days"
	case "h":
		return "hours"
	case "min":
		return "minutes"
	case "s":
		return "seconds"
	case "ms":
		return "milliseconds"
	case "us":
		return "microseconds"
	case "ns":
		return "nanoseconds"
	case "By":
		return "bytes"
	case "KiBy":
		return "kibibytes"
	case "MiBy":
		return "mebibytes"
	case "GiBy":
		return "gibibytes"
	case "TiBy":
		return "tibibytes"
	case "KBy":
		return "kilobytes"
	case "MBy":
		return "megabytes"
	case "GBy":
		return "gigabytes"
	case "TBy":
		return "terabytes"
	case "m":
		return "meters"
	case "V":
		return "volts"
	case "A":
		return "amperes"
	case "J":
		return "joules"
	case "W":
		return "watts"
	case "g":
		return "grams"
	case "Cel":
		return "celsius"
	case "Hz":
		return "hertz"
	case "1":
		return ""
	case "%":
		return "percent"
	}
	return u
}

// promPerUnit returns the word after "per" for the unit of a rate (s in "By/s").
func promPerUnit(u string) string {
	switch u {
	case "s":
		return "second"
	case "m":
		return "minute"
	case "h":
		return "hour"
	case "d":
		return "day"
	case "w":
		return "week"
	case "mo":
		return "month"
	case "y":
		return "year"
	}
	return u
}

// promName is the Prometheus name of an instrument (the OpenTelemetry
// specification's translation, with suffixes): the name's words split at every
// character Prometheus does not allow, then the unit's word unless the name has
// it, "per" and the word of a rate's unit, then "total" for a counter, "ratio" for a gauge of unit "1", joined by
// underscores. Annotations in braces ("{call}") are not units.
func promName(name, unit, typ string) string {
	tokens := strings.FieldsFunc(name, func(r rune) bool { return !promNameRune(r) })
	main, per, _ := strings.Cut(unit, "/")
	if main = strings.TrimSpace(main); main != "" && !strings.ContainsAny(main, "{}") {
		main = cleanUnit(promUnit(main))
		if main != "" && !slices.Contains(tokens, main) {
			tokens = append(tokens, main)
		}
	}
	if per = strings.TrimSpace(per); per != "" && !strings.ContainsAny(per, "{}") {
		if per = cleanUnit(promPerUnit(per)); per != "" {
			tokens = append(tokens, "per", per)
		}
	}
	if typ == "counter" {
		tokens = append(slices.DeleteFunc(tokens, func(t string) bool { return t == "total" }), "total")
	}
	if unit == "1" && typ == "gauge" {
		tokens = append(slices.DeleteFunc(tokens, func(t string) bool { return t == "ratio" }), "ratio")
	}
	out := strings.Join(tokens, "_")
	if out != "" && out[0] >= '0' && out[0] <= '9' {
		out = "_" + out
	}
	return out
}

// cleanUnit is a unit word with the characters Prometheus does not allow
// replaced by single underscores.
func cleanUnit(u string) string {
	return strings.Join(strings.FieldsFunc(u, func(r rune) bool { return !promNameRune(r) }), "_")
}

// promNameRune reports whether r may be in a Prometheus metric name (other than
// the underscore, which separates words).
func promNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == ':'
}

// promLabelName is an attribute key as a Prometheus label name: every character
// other than an ASCII letter, digit or underscore replaced by an underscore, and
// "key_" before a leading digit.
func promLabelName(key string) string {
	out := make([]byte, 0, len(key))
	for _, r := range key {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			out = append(out, byte(r))
		} else {
			out = append(out, '_')
		}
	}
	switch {
	case len(out) == 0:
		return "_"
	case out[0] >= '0' && out[0] <= '9':
		return "key_" + string(out)
	}
	return string(out)
}

// escapeLabelValue escapes a label value for the text format: backslash, double
// quote and newline; invalid UTF-8 becomes U+FFFD.
func escapeLabelValue(v string) string { return escapeText(v, true) }

// escapeHelp escapes a HELP text: backslash and newline.
func escapeHelp(s string) string { return escapeText(s, false) }

func escapeText(s string, quote bool) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '"' && quote:
			b.WriteString(`\"`)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func formatValue[N int64 | float64](v N) string {
	if i, ok := any(v).(int64); ok {
		return strconv.FormatInt(i, 10)
	}
	return formatFloat(float64(v))
}

// formatFloat formats v as Prometheus does: shortest representation, +Inf, -Inf,
// NaN.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

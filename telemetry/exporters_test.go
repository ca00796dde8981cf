package telemetry_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolhost/toolhost/telemetry"
)

// envOf returns a Getenv reading vars.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// TestExporterChoiceRefusesWhatItCannotDo starts telemetry with exporter and
// protocol names toolhost does not have: Start fails naming the variable and the
// values it takes.
func TestExporterChoiceRefusesWhatItCannotDo(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"UnknownTraceExporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			[]string{`OTEL_TRACES_EXPORTER="zipkin"`, "otlp, console or none"}},
		{"UnknownMetricExporter", map[string]string{"OTEL_METRICS_EXPORTER": "statsd"},
			[]string{`OTEL_METRICS_EXPORTER="statsd"`, "otlp, prometheus, console or none"}},
		{"UnknownProtocol", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			[]string{`OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`, "grpc or http/protobuf"}},
		{"UnknownSignalProtocol", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "thrift"},
			[]string{`OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="thrift"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: envOf(c.env)})
			if err == nil {
				tel.Shutdown(context.Background())
				t.Fatal("Start accepted it")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestOTLPDefaultsToHTTPProtobuf exports a span with only an OTLP endpoint set:
// it arrives as an OTLP/HTTP protobuf POST to /v1/traces, the specification's
// default protocol.
func TestOTLPDefaultsToHTTPProtobuf(t *testing.T) {
	var mu sync.Mutex
	var got []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer hs.Close()
	env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": hs.URL + "/v1/traces"}
	for k, v := range env { // the exporter reads its endpoint from the process
		t.Setenv(k, v)
	}
	tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: envOf(env)})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.Tracer().Start(t.Context(), "probe-span")
	span.End()
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "POST /v1/traces application/x-protobuf ") || !strings.Contains(got[0], "probe-span") {
		t.Errorf("the receiver got %q, want one protobuf POST to /v1/traces with the span", got)
	}
}

// TestPrometheusExporterEndpoint starts telemetry with OTEL_METRICS_EXPORTER=prometheus:
// Prometheus text is served at /metrics on OTEL_EXPORTER_PROMETHEUS_HOST:PORT
// until Shutdown, which closes the port.
func TestPrometheusExporterEndpoint(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	host, port, _ := net.SplitHostPort(addr)
	tel, err := telemetry.Start(t.Context(), telemetry.Options{ServiceName: "metrics-probe", Getenv: envOf(map[string]string{
		"OTEL_METRICS_EXPORTER":         "prometheus",
		"OTEL_EXPORTER_PROMETHEUS_HOST": host,
		"OTEL_EXPORTER_PROMETHEUS_PORT": port,
	})})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Observer() == nil {
		t.Error("metrics are on but nothing observes settlements")
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v\n%s", err, body)
	}
	if !strings.Contains(families["target_info"].String(), "metrics-probe") {
		t.Errorf("target_info does not carry the service name: %s", body)
	}
	checkRefusesOtherHosts(t, "http://"+addr+"/metrics")
	if err := tel.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the Prometheus endpoint still listens after Shutdown")
	}
}

// TestOTLPSettingsThatWouldMisdirectAreRefused: the OTLP exporter skips, without a
// word, an endpoint it cannot parse (and sends to localhost instead), a CA file it
// cannot read (and trusts the system's roots instead), a header entry it cannot
// parse (and sends without it). Start refuses each, naming the variable and what
// to write, and never repeats a header's value or a URL's password.
func TestOTLPSettingsThatWouldMisdirectAreRefused(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	otlp := func(kv ...string) map[string]string {
		env := map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none"}
		for i := 0; i < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return env
	}
	for _, c := range []struct {
		name    string
		env     map[string]string
		want    []string
		secrets []string
	}{
		{"EndpointWithoutScheme", otlp("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
			[]string{`OTEL_EXPORTER_OTLP_ENDPOINT="collector:4318"`, "http://localhost:4318"}, nil},
		{"GRPCEndpointNotAURL", otlp("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "::4317"),
			[]string{`OTEL_EXPORTER_OTLP_ENDPOINT="::4317"`, "http://localhost:4317"}, nil},
		{"EndpointWithoutHost", otlp("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http:///v1/traces"),
			[]string{`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http:///v1/traces"`}, nil},
		{"UnixSocketOverHTTP", otlp("OTEL_EXPORTER_OTLP_ENDPOINT", "unix:///run/otel.sock"),
			[]string{`OTEL_EXPORTER_OTLP_ENDPOINT="unix:///run/otel.sock"`}, nil},
		{"PasswordInABadEndpoint", otlp("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://user:hunter2@collector:4318"),
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "user:xxxxx@collector"}, []string{"hunter2"}},
		{"MissingCA", otlp("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318", "OTEL_EXPORTER_OTLP_CERTIFICATE", missing),
			[]string{"OTEL_EXPORTER_OTLP_CERTIFICATE=" + strconv.Quote(missing), "no such file", "the CA that signed"}, nil},
		{"CANotPEM", otlp("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", notPEM),
			[]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=" + strconv.Quote(notPEM), "holds no PEM certificate"}, nil},
		{"ClientCertificateWithoutKey", otlp("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", notPEM),
			[]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is set without OTEL_EXPORTER_OTLP_CLIENT_KEY"}, nil},
		{"ClientKeyPairNotOne", otlp("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", notPEM, "OTEL_EXPORTER_OTLP_CLIENT_KEY", notPEM),
			[]string{"are not a certificate and its key"}, nil},
		{"HeaderValueNotPercentEncoded", otlp("OTEL_EXPORTER_OTLP_HEADERS", "x-team=a,authorization=Bearer%zzs3cret"),
			[]string{"OTEL_EXPORTER_OTLP_HEADERS", "authorization (entry 2) is not percent-encoded"}, []string{"s3cret", "Bearer"}},
		{"HeaderEntryWithoutValue", otlp("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=s3cret,oops"),
			[]string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 2 is not key=value"}, []string{"s3cret"}},
		{"HeaderKeyNotAName", otlp("OTEL_EXPORTER_OTLP_HEADERS", "api key=s3cret"),
			[]string{`"api key" for a key`}, []string{"s3cret"}},
		{"MetricsToo", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "localhost:4318"},
			[]string{"telemetry: metrics:", `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT="localhost:4318"`}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: envOf(c.env)})
			if err == nil {
				tel.Shutdown(context.Background())
				t.Fatal("Start accepted it")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, s := range c.secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q repeats %q", err, s)
				}
			}
		})
	}
	// What the specification allows passes: https with a path, a unix socket over
	// gRPC, headers with percent-encoded commas.
	for _, env := range []map[string]string{
		otlp("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example:4318/otlp", "OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%2Cb, x-team = t"),
		otlp("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT", "unix:///run/otel.sock"),
	} {
		tel, err := telemetry.Start(t.Context(), telemetry.Options{Getenv: envOf(env)})
		if err != nil {
			t.Errorf("%v: %v", env, err)
			continue
		}
		tel.Shutdown(context.Background())
	}
}

// checkRefusesOtherHosts checks that a metrics endpoint on loopback at url serves a
// request naming loopback and refuses, with 403 and no metrics, one whose Host or
// Origin names another site: what a web page's request carries when the page's
// name resolves to 127.0.0.1 (DNS rebinding), or when it posts there itself.
func checkRefusesOtherHosts(t *testing.T, url string) {
	t.Helper()
	for _, c := range []struct {
		host, origin string
		want         int
	}{
		{"localhost", "", http.StatusOK},
		{"", "http://127.0.0.1:8080", http.StatusOK},
		{"rebound.example", "", http.StatusForbidden},
		{"rebound.example:9464", "", http.StatusForbidden},
		{"127.0.0.1.rebound.example", "", http.StatusForbidden},
		{"", "http://rebound.example", http.StatusForbidden},
		{"", "null", http.StatusForbidden},
	} {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.host != "" {
			req.Host = c.host
		}
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Host %q, Origin %q: status %d, want %d", c.host, c.origin, resp.StatusCode, c.want)
		}
		if c.want != http.StatusOK && strings.Contains(string(body), "toolhost") {
			t.Errorf("Host %q, Origin %q: refused, but the body holds metrics: %s", c.host, c.origin, body)
		}
	}
}

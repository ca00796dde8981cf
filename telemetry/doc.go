// Package telemetry makes what toolhost does visible: OpenTelemetry traces and
// metrics, a Prometheus text endpoint, and an append-only audit trail.
//
// [Start] reads the standard OTEL_* environment variables: traces are exported when
// OTEL_TRACES_EXPORTER names an exporter (otlp, console) or, unset, when an OTLP
// endpoint is configured; metrics likewise with OTEL_METRICS_EXPORTER (also
// prometheus: an endpoint of its own at OTEL_EXPORTER_PROMETHEUS_HOST:PORT). The
// OTLP protocol is OTEL_EXPORTER_OTLP_[SIGNAL_]PROTOCOL, grpc or http/protobuf (the
// default); endpoint, headers, service name, resource attributes and sampler are
// the SDK's own variables. With none of them set, no
// audit directory and no Prometheus endpoint, [Telemetry.Observer] is nil and the
// host runs exactly as without this package.
//
// The host is instrumented through narrow seams, so that registry, location and
// permission link no telemetry library: [Telemetry.Observer] is the
// registry.Observer of every settlement (a span per settlement with a child span
// per step; call counts and latencies; an audit line), [Telemetry.ObservePermission]
// receives permission decisions (spans for the decision and for a person's ask;
// counts by effect; the decision in its settlement's audit line), and
// [Telemetry.Watch] follows a Location's sources through
// location.Location.SourcesChanged (state, restart and containment metrics; an
// audit line per lifecycle change and per config change).
//
// The audit trail is JSON lines, one per settlement, source change and config
// change, with sizes and hashes, never contents, appended (O_APPEND, one write per
// line) to audit.jsonl in a directory of mode 0700, the file mode 0600, and rotated
// by size under an exclusive lock on audit.lock, so that several toolhost processes
// of one user can share the directory.
package telemetry

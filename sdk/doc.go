// Package sdk is the public API for everyone who writes tools for toolhost: application
// developers embedding the registry, built-in tools, and third-party plugin authors.
//
// A [Tool] is a reusable value: a description, an input schema, an output schema,
// exactly one executor and an optional pure projection to model content. It has no
// name; it is named when registered. Build typed tools with [NewTool] (schemas derived
// from Go types) and dynamic tools by filling a [Tool] directly with raw JSON Schema.
//
// Executors report expected, model-visible failures as [*ToolFailure]. Everything else
// they return — context cancellation, operational errors — is passed to the runner as a
// Go error and never shown to the model as if the tool had answered.
//
// Package sdk imports none of the host's packages (registry, scope, location, ...):
// only the wire protocol (internal/pluginpb), the peer check (internal/peercred) and
// the call path's JSON codec (internal/jsoncodec) that plugin binaries share with the
// host.
package sdk

// Package sdk is the public API for plugin authors: one import to define tools and
// serve them from a plugin binary ([Serve]). The tool names (Tool, NewTool, Part,
// ToolFailure, Ask, ...) are package tool's, re-exported; an application that runs
// tools in its own process can import tool alone and link no RPC.
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
// only tool, the wire protocol (internal/pluginpb), the peer check (internal/peercred)
// and trace context (internal/tracectx) that plugin binaries share with the host.
package sdk

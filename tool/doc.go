// Package tool defines what a tool is, for every side that makes or runs one: a
// [Tool] value, its [Invocation], [Output] and content [Part]s, the model-visible
// [Failure], progress, and the questions a tool may put to the person or the model
// behind a call ([Ask], [Sample]).
//
// A [Tool] is a reusable value: a description, an input schema, an output schema,
// exactly one executor and an optional pure projection to model content. It has no
// name; it is named when registered. Build typed tools with [New] (schemas derived
// from Go types) and dynamic tools by filling a [Tool] directly with raw JSON Schema.
//
// Executors report expected, model-visible failures as [*Failure]. Everything else
// they return — context cancellation, operational errors — is passed to the runner as a
// Go error and never shown to the model as if the tool had answered.
//
// Package tool has no RPC dependencies, so a program that embeds the registry with
// in-process tools links neither gRPC nor go-plugin. Plugin authors use package sdk,
// which re-exports these names beside Serve.
package tool

package tool

import (
	"context"
	"encoding/json"
)

// Invocation identifies one call. The session runner supplies it and the registry
// passes it to the executor unchanged; it is never inferred. It carries identity only:
// no raw provider input and no services.
type Invocation struct {
	SessionID string `json:"session_id"`
	Agent     string `json:"agent"`
	// AssistantMessageID is the durable id of the assistant message containing the call.
	AssistantMessageID string `json:"assistant_message_id"`
	ToolCallID         string `json:"tool_call_id"`
}

// Executor runs one call. It receives the call's context (cancelled on interruption),
// the Invocation and the input, already validated against the tool's input schema.
//
// It returns the complete, encoded output. A deliberate, model-visible failure is
// returned as a *Failure; cancellation as the context's cause; anything else is an
// operational failure for the runner.
type Executor func(ctx context.Context, inv Invocation, input json.RawMessage) (Output, error)

// Projection maps validated input and encoded output to model content. It must be pure
// and total: no I/O, no dependence on who called, and a result for every valid output.
type Projection func(input, output json.RawMessage) []Part

// Output is what an Executor returns. The registry keeps its byte slices (and
// strings decoded from them) in the settlement without copying: do not modify them
// after returning.
type Output struct {
	// JSON is the complete encoded output; the registry validates it against the
	// output schema.
	JSON json.RawMessage
	// Content, when HasContent is set, is the projection already computed by the
	// producer in the same round trip (plugins, MCP servers). The registry uses it only
	// if JSON validates, and only when the Tool has no Projection of its own.
	Content    []Part
	HasContent bool
	// Structured, if non-nil, is a smaller structured result to publish instead of JSON;
	// the registry validates it against Tool.StructuredSchema.
	Structured json.RawMessage
}

// Tool is a reusable tool value with exactly one executor. It has no intrinsic name.
//
// The zero value is not usable: Execute and InputSchema are required. Schemas are
// self-contained JSON Schema documents (no remote $ref); the registry compiles them
// once, at registration. A Tool is safe to register many times and from many
// goroutines provided Execute and Project are.
type Tool struct {
	// Description tells the model what the tool does.
	Description string
	// Title, if set, is a short human-readable name for people (MCP's tool title);
	// models are told the registered name and the description.
	Title string
	// Annotations, if set, are hints about the tool's behaviour for clients (MCP's
	// tool annotations). They are advisory: never a basis for permission decisions.
	Annotations *Annotations
	// InputSchema is the JSON Schema the input must satisfy.
	InputSchema json.RawMessage
	// OutputSchema, if set, is the JSON Schema the encoded output must satisfy.
	OutputSchema json.RawMessage
	// StructuredSchema, if set, validates Output.Structured.
	StructuredSchema json.RawMessage
	// Execute is the tool's one executor. Dependencies are captured when the tool is
	// built (closures), never looked up during a call.
	Execute Executor
	// Project, if set, maps input and encoded output to model content. When nil, an
	// output that encodes a JSON string becomes one text part; anything else becomes
	// structured output (and its JSON text as content).
	Project Projection
	// PermissionAction, if set, is the permission action the tool's requests use when
	// it differs from the tool's name, so that related tools share rules ("edit" for
	// edit, write and apply_patch). A Request prepared with permission visibility hides
	// the tool when its name or this action is denied outright. It decides visibility
	// only; the tool still formulates its own permission requests.
	PermissionAction string
}

// Annotations are hints about a tool's behaviour, as MCP's tool annotations define
// them. A nil pointer means the MCP default: DestructiveHint and OpenWorldHint
// default to true, the others to false.
type Annotations struct {
	// ReadOnlyHint: the tool does not modify its environment.
	ReadOnlyHint bool `json:"readOnlyHint,omitempty"`
	// DestructiveHint: the tool may perform destructive updates (meaningful only
	// when ReadOnlyHint is false).
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	// IdempotentHint: calling the tool again with the same input has no further
	// effect (meaningful only when ReadOnlyHint is false).
	IdempotentHint bool `json:"idempotentHint,omitempty"`
	// OpenWorldHint: the tool interacts with an open world of external entities
	// (the web); false means a closed domain (a local workspace).
	OpenWorldHint *bool `json:"openWorldHint,omitempty"`
}

// Hint returns a pointer to b, for Annotations.DestructiveHint and OpenWorldHint.
func Hint(b bool) *bool { return &b }

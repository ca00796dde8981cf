// Package mcpserve serves Locations' tools to MCP clients: it is `toolhost mcp`.
//
// A [Server] is one MCP server (the official go-sdk's) over the Locations added to
// it. Every client session sees the same effective tool set; each settles its calls
// through the registry's pipeline (permission, validation, bounding, hooks), exactly
// as the serve API's runners do.
//
// # Names
//
// With one Location, tools keep their registered names. With several, every name is
// "<label>_<name>", where a Location's label is its workspace_id, else its
// directory's base name, with every character outside [A-Za-z0-9-] made "-" (so a
// label never holds "_" and the first "_" of a served name ends the label), and a
// leading "L" when it does not start with a letter. Labels that collide are made
// unique by suffixes "-2", "-3", … given in the order of the Locations' canonical
// directories, so the names depend on the set of Locations, never on flag order.
// No Location's tool can shadow another's. A served name over 64 characters is cut
// to 55 and given "-" and 8 hex digits of its SHA-256.
//
// # Tools
//
// tools/list captures the current registry Request of every Location, with what
// its permission rules leave visible (Location.Prepare; it returns the same Request
// while nothing changed), as the session's view; tools/call
// settles on the view the session last listed (before any listing: the current
// one), so a call runs the registration that was advertised, as the registry's
// capture rules say. A tool whose input schema is not an object cannot be offered
// over MCP and is left out (logged); a tool whose output schema is not an object is
// offered without outputSchema.
//
// A call without arguments settles with the input {}.
//
// Settlements are results: completed with isError false; tool_failure, unknown,
// invalid_input, invalid_output and unavailable with isError true and the
// registry's message as text. Interruptions, defects and operational failures are
// JSON-RPC errors (code -32603, "interrupted: …", "defect: …", "operational
// failure: …"). Text parts are text content; resource parts are embedded resources
// (text or blob, with the part's URI and MIME type); media parts are image content
// (image/*), audio content (audio/*) or an embedded blob resource (anything else,
// URI toolhost:content/N). Structured output that is a JSON object is
// structuredContent; the settlement's content already carries it as JSON text when
// the tool gave no content of its own.
//
// # Session
//
// A session has at most Options.MaxCallsPerSession calls in flight, and all
// sessions together Options.MaxCalls; the next is refused at once with JSON-RPC
// error -32000 naming the limit (data.scope "session" or "host"). Close
// interrupts every call in flight. A stdio client that reads nothing written to
// it for Options.StdioWriteTimeout is taken to be gone (see ServeStdio).
// Progress reaches the client as notifications/progress when the call carried a
// progress token; notifications/cancelled cancels the call's context (the tool's
// executor, in a plugin process too, sees it end). Host and plugin logs are sent to
// every session as notifications/message at or above the level it set with
// logging/setLevel (none before it sets one). notifications/tools/list_changed goes
// out, coalesced, whenever the served tool set changes: a reload, a runtime
// registration, a hosted MCP server's list change, a Location added or removed.
//
// A permission ask becomes elicitation/create (a form: once, always or reject,
// and an optional message for the model) on the session whose call asked, when its
// client declared the elicitation capability; otherwise it is rejected with a
// message the model may see that does not say how to widen the Location's rules.
//
// # Asking and sampling
//
// Every call's context carries an sdk.Interactor for its session: sdk.Ask is
// elicitation/create (a form with the tool's schema) and sdk.Sample is
// sampling/createMessage, sent to the client whose call it is. A client that did
// not declare the capability makes them fail with an *sdk.UnansweredError. Plugins
// reach them over the plugin protocol when trusted or granted ("grants"), hosted
// MCP servers through the mcp package's forwarding.
//
// # Roots
//
// With Options.Roots set (toolhost mcp with no --location), the Server asks each
// session's client for roots/list after initialization and after every
// notifications/roots/list_changed, and passes the file:// directories to it.
//
// # Conformance
//
// TestConformance runs the official MCP conformance suite's server scenarios
// (testdata/conformance: the pinned suite, the sdk plugin whose tools they call,
// its workspace and the expected failures with their reasons); `make conformance`
// shows its summary.
package mcpserve

// Package cli implements the toolhost command; cmd/toolhost and cmd/host are only a
// call of [Main]. [Run] takes the arguments, the standard streams and a context that
// interrupts it, and returns the exit status, so every command is testable in-process.
//
// # Commands
//
//	toolhost tools (--location DIR | --socket ADDRESS [--location DIR]) [--all] [--json]
//	              [--provider NAME] [--verbose]
//	toolhost call (--location DIR | --socket ADDRESS [--location DIR]) [--json] [--verbose]
//	              [--session ID] [--agent NAME] [--message ID] [--call-id ID] NAME [JSON|-]
//	toolhost serve [--location DIR]... [--socket PATH | --tcp 127.0.0.1:PORT [--token-file PATH]]
//	              [--metrics 127.0.0.1:PORT] [--verbose]
//	toolhost dev [--location DIR]... [--debounce DURATION] [serve flags]
//	toolhost mcp [--location DIR]... [--http 127.0.0.1:PORT [--token-file PATH]]
//	              [--dev [--debounce DURATION]] [--verbose]
//	toolhost mcp-login NAME --location DIR [--client-id ID [--client-secret-env VAR]] [--listen ADDR]
//	toolhost status --socket ADDRESS [--location DIR] [--json]
//	toolhost restart --socket ADDRESS [--location DIR] NAME
//	toolhost plugins lock|upgrade [NAME...]|verify|list [--location DIR] [--json]
//	toolhost version
//	toolhost help [COMMAND]
//
// tools and call activate the Location at DIR for their own duration and deactivate
// it before exiting (within 10s); on a terminal, call prompts for permission asks.
// With --socket they work against a running serve or dev instead. serve and dev run
// until SIGINT, SIGTERM or SIGHUP (see the server and devwatch packages). mcp serves the
// Locations' tools as an MCP server on stdio, or with --http as streamable HTTP on
// loopback (see mcpserve); with no --location, the client's roots choose the
// Locations. status prints the sources of a running serve or dev, and restart
// starts one of them again (kind:name or a bare name). plugins manages the plugins
// a Location takes from Go modules and their lock file (see location.LockModules);
// verify exits 1 when a module differs from its lock. Logs go to stderr: warnings
// and errors only, everything with --verbose.
//
// # Exit status
//
//	0   success; for call, the call completed
//	1   the call settled with a model-visible error (tool_failure, unknown,
//	    invalid_input, invalid_output, unavailable); for tools --provider, a tool
//	    is not compatible with the provider; for plugins verify, a module differs
//	    from its lock
//	2   operational failure: activation failed, defect, plugin crash, storage failure;
//	    for call, a tool no running source serves while a source that could hold it
//	    is starting, restarting or failed (printed as unavailable, with the source's
//	    state and error)
//	3   interrupted (SIGINT, SIGTERM or SIGHUP); "interrupted" is printed to stderr
//	4   tools and status: the Location is active, but some of its sources do not
//	    serve (starting, restarting or failed); they are reported after the tools
//	64  usage error
//
// # JSON output (stable)
//
// tools --json prints one object: the Location id (its canonical directory) and the
// advertised definitions, sorted by name, exactly as registry.Definition encodes them
// (schemas canonical: sorted keys; output_schema omitted when the tool has none):
//
//	{"location": "/abs/dir", "tools": [{"name": "echo", "description": "...",
//	  "input_schema": {...}, "output_schema": {...}}]}
//
// call --json prints the registry.Settlement; fields that are empty are omitted:
//
//	{
//	  "name": "echo",                  // the tool name called
//	  "tool_call_id": "call_...",      // --call-id or the generated id
//	  "outcome": "completed",          // completed | tool_failure | unknown |
//	                                   // invalid_input | invalid_output | unavailable
//	  "content": [                     // model-facing content; for every outcome but
//	    {"type": "text", "text": "..."},          // completed, one text part with the error
//	    {"type": "media", "mime_type": "image/png", "data": "<base64>"}
//	  ],
//	  "structured": {...},             // structured output, when there is one
//	  "problems": [{"pointer": "/text", "message": "..."}],  // invalid_input/output
//	  "managed_paths": ["/.../tool-output-..."]  // complete output replaced by a preview
//	}
//
// Interruptions and operational failures print no settlement; they go to stderr with
// exit status 3 or 2.
package cli

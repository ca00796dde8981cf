// Package mcp runs stdio Model Context Protocol servers as a tool source: it launches
// a server's process (own process group, explicit environment), opens an MCP session
// with the go-sdk client, discovers the server's tools and registers them in the
// registry under the names "<server>_<tool>", forwards calls (arguments, progress,
// cancellation, per-call timeout, permission hook), maps MCP results to sdk output,
// keeps the tool set in step with notifications/tools/list_changed, and supervises the
// process: a server that dies loses its tools, its in-flight calls fail operationally,
// and it restarts with backoff under a crash budget.
//
// One [Instance] is one generation of one server in one Location: one process, one
// session, one scope owning its registrations. A [Supervisor] (package supervise)
// owns the generations of one server in one Location: it restarts it after crashes
// under a budget and reloads it, draining the old generation's calls.
//
// # Environment
//
// A server's environment is exactly Config.Env: the host's environment is not
// inherited. A bare command name (such as "node" or "npx") is looked up on the PATH
// that Config.Env gives, so a config that runs "node" must set env.PATH; an absolute
// command path needs no PATH, but the server's own child processes may.
//
// # Tool set
//
// Tools are listed with tools/list, page by page up to 100 pages, stopping (with a
// warning, keeping the pages read) at the cap or at a cursor seen before. The
// listing is cut (with one warning) at max_tools, max_schema_bytes, and
// registry.MaxBatchSchemaNodes subschemas in all, written out or unfolded through
// "$ref", before any of it is compiled. Each tool
// is registered in a batch of its own, with source {Kind: "mcp", Name: the server,
// Generation}, owned by the generation's scope, so a tool whose schema does not
// compile, or whose name clashes with an earlier one after normalization, is
// skipped with a warning (Instance.Warnings) and the others register. On
// notifications/tools/list_changed the set is re-listed and replaced in place: an
// unchanged tool keeps its registration; a changed tool takes its registration's
// slot (registry.Registration.Replace), so its precedence against other sources'
// registrations of the same name, made before or after, is unchanged — an override
// another source registered later keeps winning — and its name is never briefly
// missing; a new tool is registered; a vanished tool is released. Config.Overrides
// and Config.Limits are passed with every batch: a tool whose name another source
// of the Location holds, or past the server's limits, is skipped with a warning.
//
// # Messages
//
// The go-sdk's CommandTransport caps one inbound message at 16 MiB and, past the cap,
// ends the whole session. This package speaks the stdio transport itself instead (the
// go-sdk client on a connection of ours): the cap is Config.MaxMessageBytes (64 MiB
// by default); a message over it is read to its end and discarded, and when it is the
// response to a call, that call fails with a *MessageTooLargeError stating the cap
// while the session carries on. Non-JSON lines on a server's stdout are logged
// (within the server's log budget) and skipped.
//
// Every message of a server passes one counting point, its gate (budget.go),
// so the bytes of its messages the host holds at once stay within
// Config.MaxHeldBytes whatever it sends: a response is held until its request's
// context ends, and past the budget its request fails with a *BudgetError; the
// notifications the host acts on are handled as they are read, never queued; the
// server's own requests are held until their answers are written, at most 16 at
// once. The connection's reader never writes (conn.go): the gate's refusals go to
// a bounded queue a writer empties, so a server that stops reading cannot stall
// the reading of the responses to the host's calls, and one that reads none of
// them for a while is disconnected with a *NotReadingError. A remote server's
// messages are gated below the go-sdk, in the HTTP link (remotegate.go): the
// go-sdk's connection cannot be wrapped.
//
// # Results
//
// A tool's title (its own, else its annotations') and annotations are passed
// through to the registered sdk.Tool.
//
// A CallToolResult becomes sdk.Output as follows. Content parts: text → a text part;
// image and audio → a media part (decoded bytes, MIME type); a resource link → a
// text part naming its URI, name, MIME type, size and description; an embedded text
// resource → a text part headed by its URI; an embedded blob resource → a media part.
// When the result has structuredContent, it is Output.JSON (validated against the
// tool's outputSchema, which becomes the registered OutputSchema) and the parts are
// the content. Without structuredContent, a result of exactly one text part is
// published like a Go tool returning a string (Output.JSON is that string; the
// registry makes the text part and there is no structured output); any other result
// has Output.JSON null and the parts as its content, so the content is never
// duplicated into the settlement's structured output (which bounding does not
// measure). structuredContent passes through the go-sdk's decoding, so integers
// beyond 2^53 lose precision. isError results become *sdk.ToolFailure with the text
// parts joined. JSON-RPC errors, a lost connection and oversized messages are
// operational errors; a per-call timeout (Config.Timeout) is a tool failure saying
// so; cancellation of the call's context sends notifications/cancelled and returns
// the context's cause.
//
// During a call, the server's progress notifications reach the call's
// sdk.ReportProgress; its sampling/createMessage and elicitation/create requests
// go to sdk.Sample and sdk.Ask on the call's context (whoever runs the call answers;
// with nobody to answer, the server gets an error), within the server's
// Config.Asks: how many wait at once and how often they come (asks.go); an ask
// past them is refused with a JSON-RPC error and reaches no one. MCP does not tie a server's
// request to a call, so with several calls in flight it goes to the one that
// started last. Its notifications/message go to the host log at their level.
//
// # Remote servers
//
// A Config with Remote.URL set names a remote server: no process; the go-sdk's
// streamable HTTP client transport, or its HTTP+SSE one (Remote.Transport; by
// default streamable HTTP, falling back to HTTP+SSE when the initialize POST gets a
// 4xx other than 401/403, as the specification's backwards-compatibility section
// says). Remote.Headers go with every request; their values never reach logs or
// errors, and URLs in errors have their query values and password redacted. The SDK
// resumes a dropped stream itself (the server's SSE retry field, Last-Event-ID);
// when the session is lost for good (404 for the session, reconnection attempts
// spent) the generation is dead and the Supervisor starts the next one under the
// crash budget, as for an exited stdio server. Failures to connect say what the
// server did: *AuthRequiredError (401/403: no token, token refused, refresh
// failed, with the login command to run), *RemoteError (an HTML page, another
// content type, an error status), or the network error; each inside a *StartError
// naming the server and URL.
//
// A remote server is held to a stdio server's limits (remotegate.go): each
// message, in a JSON reply or an SSE event, to Config.MaxMessageBytes (a JSON
// reply past it, gzipped or not, is read no further; an event past it is read
// past without being kept; either way only the call it answers fails); what the
// host holds of its messages, the message being read included, to
// Config.MaxHeldBytes; its requests to 16 being answered at once, the gate's
// refusals POSTed back by one goroutine (64 waiting at most, then dropped). A
// stream ends once it has answered its call; a reply that is not a success is
// read to 64 KiB at most; an SSE retry field cannot ask for a reconnection
// sooner than a second; a reply's headers are bounded (on the host's own
// transport); and nothing is sent outside the origin of the server's URL (a
// redirect, an HTTP+SSE message endpoint elsewhere): *OriginError.
//
// # Authorization
//
// [Login] runs the MCP authorization flow through the go-sdk's auth package:
// protected-resource and authorization-server metadata discovery, dynamic client
// registration (or a client registered beforehand), PKCE, the resource indicator,
// and the authorization code delivered by the person's browser to a loopback
// redirect. The grant is kept in a [TokenStore] (one file per server URL, mode 0600,
// written atomically, in DefaultTokenDir: outside any workspace). A remote
// server's sessions send the stored token and refresh it when it has expired,
// storing the new one; a session never starts the interactive flow itself. The
// refresh happens under the grant file's lock after re-reading it
// ([TokenStore.Fresh]), so the toolhost processes holding one grant refresh it once
// between them and take the newest (refresh tokens that rotate are never
// presented twice); a stored grant is never replaced by an older one, and a
// failed refresh leaves it as it was.
package mcp

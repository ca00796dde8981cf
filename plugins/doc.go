// Package plugins is the host side of toolhost plugins: launching plugin binaries
// through hashicorp/go-plugin (gRPC only; the protocol version negotiated, see
// internal/pluginpb), activating them, serving each plugin scope its narrow Tools
// capability (and, when trusted or granted, the Location services and the
// Interaction capability) over the go-plugin broker, proxying executions (results
// streamed in chunks, progress events, cancellation crossing the boundary), and
// stopping processes gracefully, then by killing their process tree.
//
// One [Instance] is one generation of one plugin in one Location: one process, one
// scope. A [Supervisor] (package supervise) owns the generations of one plugin in
// one Location: it restarts it after crashes under a budget and reloads it.
package plugins

// Package plugins is the host side of toolhost plugins: launching plugin binaries
// through hashicorp/go-plugin (gRPC only, fixed handshake), serving each plugin scope
// its narrow Tools capability over the go-plugin broker, proxying executions (results
// streamed in chunks, progress events, cancellation crossing the boundary), stopping
// processes gracefully then by killing their process group, and supervising crashes
// with restarts under a budget.
//
// One [Instance] is one generation of one plugin in one Location: one process, one
// scope. A [Supervisor] owns the generations of one plugin in one Location.
package plugins

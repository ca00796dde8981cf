// Package scope owns the lifetime of resources: registrations, plugin processes, MCP
// sessions, in-flight executions and child scopes.
//
// A [Scope] releases what was deferred on it in reverse order when it closes. Closing
// first cancels the scope's context with [ErrClosed] as the cause, waits for tracked
// work to return within the caller's deadline, then runs the release functions under a
// context that keeps the caller's deadline but ignores its cancellation, so a release
// that must force-stop a process still gets to run. Errors are joined, never dropped.
//
// Package scope imports nothing else of toolhost.
package scope

// Package manifest runs command tools: a manifest (from the Location config's "tools"
// or a file under <Location>/.toolhost/tools/) gives a tool's name, description,
// schemas and a command, and every call runs that command once.
//
// # A call
//
// The command runs as an argv (no shell) in the tool's Dir with exactly the tool's
// Env (the host's environment is never inherited; a bare program name is looked up
// on that Env's PATH), in its own process group, with the validated input JSON and a
// newline on stdin. Its stdout is the output:
//
//   - With an output schema, stdout is JSON: Output.JSON is stdout (surrounding space
//     trimmed), validated by the registry against the schema; stdout that is not
//     valid JSON settles as invalid output.
//   - Without one, stdout is text: the settlement has one text part holding it
//     (invalid UTF-8 is replaced by U+FFFD) and no structured output.
//
// A non-zero exit is a *sdk.ToolFailure giving the exit status and the last 4 KiB of
// stderr. When the call's context is cancelled the process group gets SIGTERM, then
// SIGKILL after KillGrace, and the call returns the context's cause (an
// interruption). When the tool's Timeout (DefaultTimeout if unset) runs out the same
// happens and the call is a *sdk.ToolFailure saying it timed out after that long.
// When the command exits, whatever is left of its process group (background
// children) is killed: a call leaves no process behind.
//
// # Producer cap
//
// Stdout is captured up to MaxOutputBytes (DefaultMaxOutputBytes if unset); past it,
// stdout is read on and discarded so the command never blocks on a full pipe, and
// the call says exactly how much was dropped — it is never presented as complete:
//
//   - text output: the captured bytes (cut back to a UTF-8 boundary) followed by a
//     final line "[toolhost: output truncated by the producer cap: N of M bytes
//     dropped]", where M is all stdout and N what the text does not hold;
//   - JSON output (an output schema): a *sdk.ToolFailure stating N and M, since a
//     truncated JSON document cannot be used.
package manifest

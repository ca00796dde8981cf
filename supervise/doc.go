// Package supervise keeps one program serving, whatever kind it is: a [Supervisor]
// starts its first generation, watches the generation that serves, restarts it after
// a crash with backoff under a [Budget], keeps its tools advertised while it restarts
// (a registry.Hold), gives up when the budget is spent ([Failed]), and replaces the
// serving generation on [Supervisor.Reload] (a restart by hand is a reload with the
// same config).
//
// A kind of program supplies a [Program]: how to start one generation from its
// config. Package plugins supervises plugin processes with it, package mcp MCP
// servers; each names its instantiation Supervisor (plugins.Supervisor,
// mcp.Supervisor).
//
// The rules, the same for every kind:
//
//   - Generations are numbered from 1 without gaps: a start that fails does not use
//     up its number.
//   - A crash (the generation's Done closes while its scope is open) closes the
//     generation's scope with the crash as the cause, within the program's stop
//     grace, so its calls in flight fail with the crash, not as interruptions.
//   - A reload starts generation N+1 and lets it register before it retires N: N's
//     tools are released, N's calls in flight are drained within N's stop grace,
//     then N's scope closes (interrupting what is left) and its process stops. A
//     failed reload leaves N serving; its error is the last error.
//   - [Supervisor.Replace] is a reload whose config is made first; the caller's
//     record of the serving config is committed only once N+1 has registered, and
//     never after a failure.
//   - Crash restarts and reloads are serialized; a reload resets the crash budget.
package supervise

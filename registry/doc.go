// Package registry owns placements and registrations, Requests (per-model-request
// snapshots of tool definitions), and the settlement pipeline: resolve, validate
// input, execute, validate output, project, bound into managed storage, run after
// hooks.
//
// There are no globals. [Registry.Register] returns the release of its batch; the
// caller defers it on the scope that owns the batch, so registry never imports scope.
// An owner that is closing is seen through the small [Owner] interface, which
// *scope.Scope satisfies.
//
// In a Location placement a tool name belongs to the source that holds it: another
// source may take it over only when its Batch lists the name in Overrides (an
// allowed override wins whatever the order), and each source generation is held to
// its SourceLimits; both are checked atomically with the insertion. A source
// replaces its own tools in place with [Registration.Replace]. Managed storage
// keeps a quota per placement (Limits.MaxRetainedBytes).
//
// Outcomes stay distinct: every model-visible result is a [Settlement]; interruption
// is an error satisfying errors.Is(err, context.Canceled); defects are [*DefectError];
// operational failures are [*OperationalError].
//
// # Locks
//
// Registry.mu guards every placement and what it holds: the placements map, each
// placement's names, hooks, holds, usage, version and cached Request, the
// registration sequence, the Changed channel, and Registration.released. Every
// read of them, even of the application placement, happens under it (RLock for
// reading); nothing else is held while it is taken, and it is never held across a
// call into a tool, a hook or an Owner. An entry's closed flag is atomic, so a
// settlement checks it without the lock. Requests are immutable once prepared.
// Managed storage holds no lock in memory: the quota's accounting is shared by
// every process through the directory, under its lock file (see [Storage]), which
// is never taken while mu is held.
package registry

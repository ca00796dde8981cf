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
// Outcomes stay distinct: every model-visible result is a [Settlement]; interruption
// is an error satisfying errors.Is(err, context.Canceled); defects are [*DefectError];
// operational failures are [*OperationalError].
package registry

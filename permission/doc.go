// Package permission evaluates a Location's permission policy and manages the
// approvals a person gives.
//
// A [Service] holds the Location's configured rules (an ordered list of
// {action, resource, effect}), the approvals saved by "always" answers (persisted in
// a JSON state file) and the asks waiting for an answer. Tools that hold the
// service — built-ins and trusted plugins — formulate their own [Request] and call
// [Service.Assert] before they touch anything; the host asserts on behalf of
// untrusted plugins.
//
// Outcomes of Assert map onto toolhost's outcomes:
//   - allowed: nil;
//   - denied by a rule, nobody to ask, or rejected with a message: a *sdk.ToolFailure
//     the model sees (errors.Is(err, ErrDenied) or errors.Is(err, ErrRejected));
//   - rejected without a message, the session ended, the Location closed: a
//     [*DeclinedError], which satisfies errors.Is(err, context.Canceled) and
//     errors.Is(err, ErrDeclined) — an interruption, never shown to the model;
//   - the call's context ended or the Asker failed: that error, not a tool failure.
//
// Several host processes may serve one Location and share its state file. A save
// merges with the file's latest contents under a file lock (internal/filestore), so
// no host loses another's approval, and an evaluation that would ask first checks
// whether the file changed (one stat) and re-reads it if so, so an approval another
// host saved is honoured without asking again. The Service's own locks: saveMu
// serializes its saves; mu guards the approvals in memory, the pending asks and
// closed, and is never held while asking.
//
// Package permission imports only sdk and internal/filestore of toolhost.
package permission

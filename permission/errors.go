package permission

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrDenied is the cause inside the *sdk.ToolFailure returned when a rule denies a
	// request or there is nobody to ask.
	ErrDenied = errors.New("permission: denied")
	// ErrRejected is the cause inside the *sdk.ToolFailure returned when a person
	// rejects a request with a message.
	ErrRejected = errors.New("permission: rejected")
	// ErrDeclined is matched by every [*DeclinedError]: a request rejected without a
	// message, or abandoned because its session ended or its Location closed.
	ErrDeclined = errors.New("permission: declined")
	// ErrNoOneToAsk is for Askers that can find nobody to ask this time (a server
	// with no client watching asks): an Asker error wrapping it makes Assert answer
	// as it does with no Asker at all, a deny that says how to allow the request.
	ErrNoOneToAsk = errors.New("permission: no one to ask")
	// ErrCannotAsk is for Askers whose person cannot be reached at all (an MCP
	// client without elicitation): an Asker error wrapping it makes Assert deny the
	// request with a model-visible message that says approval was needed and could
	// not be asked for, and, unlike ErrNoOneToAsk, gives no advice on widening the
	// Location's rules: the model should not learn to ask for more authority.
	ErrCannotAsk = errors.New("permission: cannot ask")
	// ErrUnknownAsk is returned by Reply for an id that is not pending (never
	// registered, or already answered).
	ErrUnknownAsk = errors.New("permission: unknown ask")
)

// DeclinedError ends a call the way an interruption does: it satisfies
// errors.Is(err, context.Canceled) and errors.Is(err, ErrDeclined), and is never
// shown to the model.
type DeclinedError struct {
	// ID is the ask's id, or "" when Assert declined without registering an ask.
	ID string
	// Action is the request's action.
	Action string
	// Reason says why, lowercase: "rejected", "the session ended", ...
	Reason string
}

func (e *DeclinedError) Error() string {
	return fmt.Sprintf("permission: %q declined: %s", e.Action, e.Reason)
}

// Unwrap returns ErrDeclined and context.Canceled.
func (e *DeclinedError) Unwrap() []error { return []error{ErrDeclined, context.Canceled} }

// StateError reports a saved-approvals file that cannot be read, is corrupt, or
// cannot be written. A Service is never created over a corrupt file, so a damaged
// file never grants anything and is never silently overwritten.
type StateError struct {
	// File is the state file's path.
	File string
	// Op is "load" or "save".
	Op  string
	Err error
}

func (e *StateError) Error() string {
	if e.Op == "load" {
		return fmt.Sprintf("permission: saved approvals %s: %v (fix or remove the file; nothing in it was applied)", e.File, e.Err)
	}
	return fmt.Sprintf("permission: save approvals to %s: %v", e.File, e.Err)
}

func (e *StateError) Unwrap() error { return e.Err }

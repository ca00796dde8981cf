package permission

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolhost/toolhost/internal/filestore"
	"github.com/toolhost/toolhost/tool"
)

var (
	// ErrDenied is matched by the cause inside the *tool.Failure returned when a
	// rule denies a request or there is nobody to ask (a [*DeniedError]).
	ErrDenied = errors.New("permission: denied")
	// ErrRejected is the cause inside the *tool.Failure returned when a person
	// rejects a request with a message.
	ErrRejected = errors.New("permission: rejected")
	// ErrDeclined is matched by every [*DeclinedError]: a request rejected without a
	// message, or abandoned because its session ended or its Location closed.
	ErrDeclined = errors.New("permission: declined")
	// ErrNoOneToAsk is for Askers that can find nobody to ask this time (a server
	// with no client watching asks): an Asker error wrapping it makes Assert answer
	// as it does with no Asker at all: a deny (whose hint says how to allow the
	// request).
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

// DeniedError is the cause (the Err) inside the *tool.Failure of a request that a
// rule denies or that nobody could be asked about. The failure's Message, which the
// model sees, says only that permission was denied for the action and which
// resources; how to allow the request is the Hint, for the runner and the person
// (registry.Settlement.Hint carries it; `toolhost call` prints it to stderr), never
// for the model, which could act on it. It matches ErrDenied.
type DeniedError struct {
	// Action is the request's action.
	Action string
	// Resources are the request's resources that were denied (NoOneToAsk false) or
	// that needed approval (NoOneToAsk true).
	Resources []string
	// NoOneToAsk is true when the policy said ask and there was nobody to ask.
	NoOneToAsk bool
	hint       string
}

func (e *DeniedError) Error() string {
	if e.NoOneToAsk {
		return fmt.Sprintf("permission denied: %s on %s needs approval, and there is no one to ask", quote(e.Action), describe(e.Resources))
	}
	return fmt.Sprintf("permission denied: %s is not allowed on %s", quote(e.Action), describe(e.Resources))
}

// Hint says how to allow the request in the Location config, for a person.
func (e *DeniedError) Hint() string { return e.hint }

// Unwrap returns ErrDenied.
func (e *DeniedError) Unwrap() error { return ErrDenied }

// DeclinedError ends a call the way an interruption does: it satisfies
// errors.Is(err, context.Canceled), errors.Is(err, ErrDeclined) and errors.Is(err,
// tool.ErrDeclined) (as sdk.Permission promises), and is never shown to the model.
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

// Unwrap returns ErrDeclined, tool.ErrDeclined and context.Canceled.
func (e *DeclinedError) Unwrap() []error {
	return []error{ErrDeclined, tool.ErrDeclined, context.Canceled}
}

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
	// These errors name the file (or its directory) and what to do themselves.
	var fe *filestore.FileError
	var we *filestore.WriteError
	named := errors.As(e.Err, &fe) || errors.As(e.Err, &we)
	switch {
	case e.Op == "load" && named:
		return fmt.Sprintf("permission: saved approvals: %v (nothing in it was applied)", e.Err)
	case e.Op == "load":
		return fmt.Sprintf("permission: saved approvals %s: %v (fix or remove the file; nothing in it was applied)", e.File, e.Err)
	case named:
		return fmt.Sprintf("permission: save approvals: %v", e.Err)
	}
	return fmt.Sprintf("permission: save approvals to %s: %v", e.File, e.Err)
}

func (e *StateError) Unwrap() error { return e.Err }

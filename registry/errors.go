package registry

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrLocationNotOpen is returned for a Location placement that was never opened
	// or has been released.
	ErrLocationNotOpen = errors.New("registry: location not open")
	// ErrLocationOpen is returned by OpenLocation for an id that is already open.
	ErrLocationOpen = errors.New("registry: location already open")
	// ErrOwnerClosed is returned by Register when the batch's owner is already closing.
	ErrOwnerClosed = errors.New("registry: owner closed")
)

// RegistrationError reports the entry that made a Register call fail. Nothing of that
// batch was registered.
type RegistrationError struct {
	// Tool is the authored name of the offending entry; empty when the batch as a
	// whole was refused (Err is a *LimitError).
	Tool string
	// Source names where the batch came from (for example "plugin text").
	Source string
	// Owner, when Err is ErrNameTaken, names the source that holds the name (for
	// example "builtin").
	Owner string
	// Held, when the owner holds the name spelled otherwise ("read" for "Read"), is
	// the name as the owner holds it: names differing only by letter case are one.
	Held string
	Err  error
}

func (e *RegistrationError) Error() string {
	from := ""
	if e.Source != "" {
		from = " from " + e.Source
	}
	switch {
	case e.Tool == "":
		return fmt.Sprintf("registry: register%s: %v", from, e.Err)
	case e.Owner != "" && e.Held != "":
		return fmt.Sprintf("registry: register tool %q%s: the name differs only by letter case from %q, which belongs to %s; the Location config must list %q in this source's \"overrides\" to take it over",
			e.Tool, from, e.Held, e.Owner, e.Tool)
	case e.Owner != "":
		return fmt.Sprintf("registry: register tool %q%s: the name belongs to %s; the Location config must list %q in this source's \"overrides\" to take it over",
			e.Tool, from, e.Owner, e.Tool)
	}
	return fmt.Sprintf("registry: register tool %q%s: %v", e.Tool, from, e.Err)
}

func (e *RegistrationError) Unwrap() error { return e.Err }

// DefectError reports a bug: an executor, projection or hook panicked. The call has
// no settlement; the runner decides what to tell the model.
type DefectError struct {
	Tool  string
	Value any    // the value passed to panic
	Stack []byte // the panicking goroutine's stack
}

func (e *DefectError) Error() string {
	return fmt.Sprintf("registry: tool %q: defect: panic: %v", e.Tool, e.Value)
}

// OperationalError reports that a call could not be settled for a reason outside the
// tool's contract: the executor failed without classifying the error as a
// ToolFailure (a plugin crash, a protocol error), retention of oversized output
// failed, or a hook failed. It is never shown to the model as the tool's answer.
type OperationalError struct {
	Tool string
	// Op is the pipeline step that failed: "execute", "project", "bound" or "hook".
	Op  string
	Err error
}

func (e *OperationalError) Error() string {
	return fmt.Sprintf("registry: tool %q: %s: %v", e.Tool, e.Op, e.Err)
}

func (e *OperationalError) Unwrap() error { return e.Err }

// interruption returns the error for a call whose context ended: its cause, made to
// satisfy errors.Is(err, context.Canceled) even when the cause was a deadline or a
// custom error.
func interruption(ctx context.Context) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, context.Canceled) {
		return cause
	}
	return fmt.Errorf("%w: %w", context.Canceled, cause)
}

package sandbox

import (
	"errors"
	"fmt"
	"syscall"
)

// ErrUnavailable is wrapped by the error of a start that Spec.Require refused
// because the kernel cannot confine the program.
var ErrUnavailable = errors.New("sandbox: confinement unavailable")

// ExitError is how a contained program ended. Its message reads like os/exec's
// ("exit status 2", "signal: killed"); for a failure it names the limits in force,
// since an over-limit program usually dies of one.
type ExitError struct {
	Code   int            // the exit status; -1 when killed by a signal
	Signal syscall.Signal // the signal that killed it, or 0
	Limits Limits
}

func (e *ExitError) Error() string {
	if e.Signal != 0 {
		return "signal: " + e.Signal.String()
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Detail adds the limits in force to the status, for crash reports.
func (e *ExitError) Detail() string {
	return e.Error() + " (sandbox limits: " + e.Limits.String() + ")"
}

// ExitCode is the exit status, -1 when killed by a signal.
func (e *ExitError) ExitCode() int { return e.Code }

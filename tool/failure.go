package tool

import (
	"context"
	"fmt"
)

// Failure is an expected failure that the tool chooses to show the model, such as
// "file not found". Find it with errors.As. Return it only for errors you deliberately
// classify; never wrap cancellation or defects in it.
type Failure struct {
	// Message is what the model sees.
	Message string
	// Err is the underlying cause, if any; it is not shown to the model.
	Err error
}

// Failf returns a *Failure with a formatted message. A %w verb also sets Err.
func Failf(format string, args ...any) *Failure {
	err := fmt.Errorf(format, args...)
	return &Failure{Message: err.Error(), Err: unwrapOne(err)}
}

func unwrapOne(err error) error {
	if u, ok := err.(interface{ Unwrap() error }); ok {
		return u.Unwrap()
	}
	return nil
}

func (f *Failure) Error() string { return f.Message }

// Unwrap returns the underlying cause.
func (f *Failure) Unwrap() error { return f.Err }

// OutputEncodingError reports that an executor's result could not be encoded as JSON.
// The registry settles it as invalid output.
type OutputEncodingError struct{ Err error }

func (e *OutputEncodingError) Error() string { return "tool: encode output: " + e.Err.Error() }

// Unwrap returns the encoding error.
func (e *OutputEncodingError) Unwrap() error { return e.Err }

// InputDecodingError reports that validated input could not be decoded into the
// executor's Go type (for example a number too large for an int). The registry
// settles it as invalid input.
type InputDecodingError struct{ Err error }

func (e *InputDecodingError) Error() string { return "tool: decode input: " + e.Err.Error() }

// Unwrap returns the decoding error.
func (e *InputDecodingError) Unwrap() error { return e.Err }

// ErrDeclined is matched by the error of a permission request declined without a
// message (package permission's DeclinedError, and a plugin's Permission service). It
// wraps context.Canceled: a declined request ends the call as an interruption does.
var ErrDeclined = fmt.Errorf("permission declined: %w", context.Canceled)

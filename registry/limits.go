package registry

import (
	"errors"
	"fmt"
)

// Default provider-facing limits.
const (
	defaultMaxLines      = 2000
	defaultMaxBytes      = 51200
	defaultMaxMediaBytes = 5 << 20

	// DefaultMaxRetainedBytes is the default managed-storage quota of a placement.
	DefaultMaxRetainedBytes = 1 << 30
)

// The smallest limits Validate accepts. A preview needs room for its truncation marker
// (3 lines, and at most 658 bytes since OpenStorage caps the directory path at 512
// bytes) and still shows at least 5 lines and 366 bytes of output.
const (
	MinMaxLines = 8
	MinMaxBytes = 1024
)

// ErrInvalidLimits is wrapped by every error Limits.Validate returns.
var ErrInvalidLimits = errors.New("registry: invalid output limits")

// Limits bound the provider-facing channel of one settlement. Zero fields mean the
// default. A Limits is a plain value, safe to copy and share.
type Limits struct {
	MaxLines      int // lines of text; default 2000, at least 8
	MaxBytes      int // UTF-8 bytes of text; default 51200, at least 1024
	MaxMediaBytes int // bytes of each media part; default 5 MiB
	// MaxRetainedBytes is the placement's managed-storage quota (see Storage); default
	// 1 GiB. A settlement whose retention would exceed it fails operationally with a
	// *StorageError wrapping a *QuotaError.
	MaxRetainedBytes int64
}

// DefaultLimits returns the default limits: 2000 lines, 51200 bytes, 5 MiB per
// media part and a 1 GiB managed-storage quota.
func DefaultLimits() Limits {
	return Limits{MaxLines: defaultMaxLines, MaxBytes: defaultMaxBytes, MaxMediaBytes: defaultMaxMediaBytes,
		MaxRetainedBytes: DefaultMaxRetainedBytes}
}

// WithDefaults returns l with its zero fields replaced by the defaults.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxLines == 0 {
		l.MaxLines = d.MaxLines
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = d.MaxBytes
	}
	if l.MaxMediaBytes == 0 {
		l.MaxMediaBytes = d.MaxMediaBytes
	}
	if l.MaxRetainedBytes == 0 {
		l.MaxRetainedBytes = d.MaxRetainedBytes
	}
	return l
}

// Validate checks l as given: zero fields are valid (they mean the default); negative
// fields are not, nor are MaxLines below 8 or MaxBytes below 1024, the smallest limits
// that still hold the truncation marker and some output. The error names every bad field
// and wraps ErrInvalidLimits.
func (l Limits) Validate() error {
	return errors.Join(
		checkLimit("MaxLines", l.MaxLines, MinMaxLines),
		checkLimit("MaxBytes", l.MaxBytes, MinMaxBytes),
		checkLimit("MaxMediaBytes", l.MaxMediaBytes, 1),
		checkLimit("MaxRetainedBytes", int(min(l.MaxRetainedBytes, 1<<62)), 1),
	)
}

func checkLimit(field string, v, floor int) error {
	switch {
	case v < 0:
		return fmt.Errorf("%w: %s is %d, must not be negative", ErrInvalidLimits, field, v)
	case v > 0 && v < floor:
		return fmt.Errorf("%w: %s is %d, below the minimum %d", ErrInvalidLimits, field, v, floor)
	}
	return nil
}

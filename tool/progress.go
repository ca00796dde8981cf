package tool

import "context"

// Progress is one progress event of a long-running call.
type Progress struct {
	// Progress is the amount done so far; it should increase with every event.
	Progress float64 `json:"progress"`
	// Total is the amount expected in all, or 0 when unknown.
	Total float64 `json:"total,omitempty"`
	// Message is an optional human-readable status.
	Message string `json:"message,omitempty"`
}

type progressKey struct{}

// WithProgress returns a context whose calls to ReportProgress reach report. Hosts
// install it around an execution; report must be safe for concurrent use.
func WithProgress(ctx context.Context, report func(Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// ReportProgress reports progress for the call that ctx belongs to. It never blocks
// on the consumer for long and does nothing when nobody listens.
func ReportProgress(ctx context.Context, p Progress) {
	if report, ok := ctx.Value(progressKey{}).(func(Progress)); ok && report != nil {
		report(p)
	}
}

// ProgressWanted reports whether anyone listens to ReportProgress on ctx. Hosts use
// it to choose a cheaper protocol for calls nobody watches.
func ProgressWanted(ctx context.Context) bool {
	report, ok := ctx.Value(progressKey{}).(func(Progress))
	return ok && report != nil
}

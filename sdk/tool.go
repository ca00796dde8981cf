package sdk

import (
	"context"
	"encoding/json"

	"github.com/toolhost/toolhost/tool"
)

// The names below are package tool's, re-exported so that a plugin defines and serves
// its tools with one import. Each is identical to its tool counterpart (the types are
// aliases), so values pass freely between code that imports sdk and code that imports
// tool; see package tool for their contracts.

type (
	// Tool is [tool.Tool].
	Tool = tool.Tool
	// Invocation is [tool.Invocation].
	Invocation = tool.Invocation
	// Executor is [tool.Executor].
	Executor = tool.Executor
	// Projection is [tool.Projection].
	Projection = tool.Projection
	// Output is [tool.Output].
	Output = tool.Output
	// Annotations is [tool.Annotations].
	Annotations = tool.Annotations
	// PartType is [tool.PartType].
	PartType = tool.PartType
	// Part is [tool.Part].
	Part = tool.Part
	// ToolFailure is [tool.Failure].
	ToolFailure = tool.Failure
	// OutputEncodingError is [tool.OutputEncodingError].
	OutputEncodingError = tool.OutputEncodingError
	// InputDecodingError is [tool.InputDecodingError].
	InputDecodingError = tool.InputDecodingError
	// Progress is [tool.Progress].
	Progress = tool.Progress
	// Question is [tool.Question].
	Question = tool.Question
	// AnswerAction is [tool.AnswerAction].
	AnswerAction = tool.AnswerAction
	// Answer is [tool.Answer].
	Answer = tool.Answer
	// SampleRequest is [tool.SampleRequest].
	SampleRequest = tool.SampleRequest
	// SampleMessage is [tool.SampleMessage].
	SampleMessage = tool.SampleMessage
	// SampleResult is [tool.SampleResult].
	SampleResult = tool.SampleResult
	// Interactor is [tool.Interactor].
	Interactor = tool.Interactor
	// UnansweredError is [tool.UnansweredError].
	UnansweredError = tool.UnansweredError
)

const (
	// PartText is [tool.PartText].
	PartText = tool.PartText
	// PartMedia is [tool.PartMedia].
	PartMedia = tool.PartMedia
	// PartResource is [tool.PartResource].
	PartResource = tool.PartResource

	// Accepted is [tool.Accepted].
	Accepted = tool.Accepted
	// Declined is [tool.Declined].
	Declined = tool.Declined
	// Cancelled is [tool.Cancelled].
	Cancelled = tool.Cancelled
)

// ErrUnanswered is [tool.ErrUnanswered].
var ErrUnanswered = tool.ErrUnanswered

// NewTool is [tool.New].
func NewTool[In, Out any](description string, execute func(ctx context.Context, inv Invocation, in In) (Out, error)) Tool {
	return tool.New(description, execute)
}

// SchemaFor is [tool.SchemaFor].
func SchemaFor[T any]() json.RawMessage { return tool.SchemaFor[T]() }

// ProjectTyped is [tool.ProjectTyped].
func ProjectTyped[In, Out any](project func(in In, out Out) []Part) Projection {
	return tool.ProjectTyped(project)
}

// Hint is [tool.Hint].
func Hint(b bool) *bool { return tool.Hint(b) }

// Text is [tool.Text].
func Text(s string) Part { return tool.Text(s) }

// Media is [tool.Media].
func Media(mimeType string, data []byte) Part { return tool.Media(mimeType, data) }

// TextResource is [tool.TextResource].
func TextResource(uri, mimeType, text string) Part { return tool.TextResource(uri, mimeType, text) }

// BlobResource is [tool.BlobResource].
func BlobResource(uri, mimeType string, data []byte) Part {
	return tool.BlobResource(uri, mimeType, data)
}

// Failf is [tool.Failf].
func Failf(format string, args ...any) *ToolFailure { return tool.Failf(format, args...) }

// WithProgress is [tool.WithProgress].
func WithProgress(ctx context.Context, report func(Progress)) context.Context {
	return tool.WithProgress(ctx, report)
}

// ReportProgress is [tool.ReportProgress].
func ReportProgress(ctx context.Context, p Progress) { tool.ReportProgress(ctx, p) }

// ProgressWanted is [tool.ProgressWanted].
func ProgressWanted(ctx context.Context) bool { return tool.ProgressWanted(ctx) }

// WithInteractor is [tool.WithInteractor].
func WithInteractor(ctx context.Context, in Interactor) context.Context {
	return tool.WithInteractor(ctx, in)
}

// InteractorFrom is [tool.InteractorFrom].
func InteractorFrom(ctx context.Context) Interactor { return tool.InteractorFrom(ctx) }

// Ask is [tool.Ask].
func Ask(ctx context.Context, q Question) (Answer, error) { return tool.Ask(ctx, q) }

// CheckAnswer is [tool.CheckAnswer].
func CheckAnswer(q Question, content json.RawMessage) error { return tool.CheckAnswer(q, content) }

// Sample is [tool.Sample].
func Sample(ctx context.Context, req SampleRequest) (SampleResult, error) {
	return tool.Sample(ctx, req)
}

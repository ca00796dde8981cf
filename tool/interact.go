package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolhost/toolhost/internal/askschema"
)

// Question is a structured question to the person behind the call (MCP's
// elicitation). Schema is a JSON Schema of "type": "object" whose properties are
// primitives (string, number, integer, boolean, enums of strings, arrays of enum
// strings), as MCP allows; the answer's content must satisfy it.
type Question struct {
	// Message tells the person what is asked and why.
	Message string `json:"message"`
	// Schema is the form of the answer.
	Schema json.RawMessage `json:"schema"`
}

// AnswerAction says how the person answered a Question.
type AnswerAction string

const (
	// Accepted: the person answered; Answer.Content holds it.
	Accepted AnswerAction = "accept"
	// Declined: the person refused to answer.
	Declined AnswerAction = "decline"
	// Cancelled: the person dismissed the question without choosing.
	Cancelled AnswerAction = "cancel"
)

// Answer is the person's answer to a Question.
type Answer struct {
	Action AnswerAction `json:"action"`
	// Content, when Action is Accepted, is a JSON object valid against the
	// Question's Schema.
	Content json.RawMessage `json:"content,omitempty"`
}

// SampleRequest asks the runner's model for one completion (MCP's sampling).
type SampleRequest struct {
	// Messages are the conversation so far; each has the role "user" or "assistant"
	// and one text, image or audio part (a media part with an image/* or audio/*
	// MIME type).
	Messages []SampleMessage `json:"messages"`
	// SystemPrompt is an optional system prompt; the runner may ignore it.
	SystemPrompt string `json:"system_prompt,omitempty"`
	// MaxTokens is the most tokens the completion may have. Required.
	MaxTokens int `json:"max_tokens"`
	// Temperature, when not nil, is the sampling temperature.
	Temperature *float64 `json:"temperature,omitempty"`
	// StopSequences end the completion when generated.
	StopSequences []string `json:"stop_sequences,omitempty"`
	// ModelHints name models the tool would prefer, best first (advisory).
	ModelHints []string `json:"model_hints,omitempty"`
}

// SampleMessage is one message of a SampleRequest or the completion.
type SampleMessage struct {
	Role    string `json:"role"`
	Content Part   `json:"content"`
}

// SampleResult is the model's completion.
type SampleResult struct {
	// Message is the completion, with the role "assistant".
	Message SampleMessage `json:"message"`
	// Model names the model that answered.
	Model string `json:"model"`
	// StopReason says why the completion ended ("endTurn", "maxTokens", …), if known.
	StopReason string `json:"stop_reason,omitempty"`
}

// Interactor reaches the person and the model behind a call. Runners install one
// on the call's context with WithInteractor; tools use Ask and Sample. Its methods
// must be safe for concurrent use, block until answered or ctx ends, and return a
// *UnansweredError when nobody can answer.
type Interactor interface {
	Ask(ctx context.Context, q Question) (Answer, error)
	Sample(ctx context.Context, req SampleRequest) (SampleResult, error)
}

// ErrUnanswered is what errors.Is finds in every *UnansweredError.
var ErrUnanswered = errors.New("tool: no one to answer")

// UnansweredError says a question or sample request could not be put to anyone:
// the runner has no person or model to ask, the client lacks the capability, or
// the Location does not grant it to the plugin. A tool handles it as it sees fit
// (a default, a Failure); errors.Is(err, ErrUnanswered) holds.
type UnansweredError struct {
	// Op is "ask" or "sample".
	Op string
	// Reason says why, for the tool's author and the model.
	Reason string
}

func (e *UnansweredError) Error() string {
	return fmt.Sprintf("tool: %s: no one to answer: %s", e.Op, e.Reason)
}

// Is makes errors.Is(err, ErrUnanswered) hold.
func (e *UnansweredError) Is(target error) bool { return target == ErrUnanswered }

type interactorKey struct{}

// WithInteractor returns a context whose Ask and Sample reach in. Hosts and runners
// install it around an execution.
func WithInteractor(ctx context.Context, in Interactor) context.Context {
	return context.WithValue(ctx, interactorKey{}, in)
}

// InteractorFrom returns the Interactor installed on ctx, or nil.
func InteractorFrom(ctx context.Context) Interactor {
	in, _ := ctx.Value(interactorKey{}).(Interactor)
	return in
}

// Ask puts q to the person behind the call that ctx belongs to and blocks until
// they answer or ctx ends (then it returns context.Cause(ctx)). An accepted answer's
// content has been validated against q.Schema: in a plugin, by the host, which puts
// the question for it; in a host's own process, here, with the validator the
// registry package provides (a process that links neither, such as a unit test with
// a fake Interactor and no registry, gets the answer unvalidated). With nobody to
// ask it returns a *UnansweredError. Declining or cancelling is an Answer, not an
// error.
func Ask(ctx context.Context, q Question) (Answer, error) {
	validate, err := compileQuestion(q.Schema)
	if err != nil {
		return Answer{}, err
	}
	in := InteractorFrom(ctx)
	if in == nil {
		return Answer{}, &UnansweredError{Op: "ask", Reason: "the runner of this call has no one to ask"}
	}
	a, err := in.Ask(ctx, q)
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, context.Cause(ctx)
		}
		return Answer{}, err
	}
	if a.Action != Accepted {
		return Answer{Action: a.Action}, nil
	}
	if err := checkContent(validate, a.Content); err != nil {
		return Answer{}, err
	}
	return a, nil
}

// CheckAnswer reports whether content is an acceptable answer to q: JSON valid
// against q.Schema (which must itself be a valid object schema; the schema is checked
// where the validator is linked, as in every host). Ask checks every accepted answer
// so; a runner that collects answers uses it to refuse a bad one before it reaches the
// tool. Safe for concurrent use.
func CheckAnswer(q Question, content json.RawMessage) error {
	validate, err := compileQuestion(q.Schema)
	if err != nil {
		return err
	}
	return checkContent(validate, content)
}

func checkContent(validate func(json.RawMessage) error, content json.RawMessage) error {
	if !json.Valid(content) {
		return errors.New("tool: ask: the answer is not JSON")
	}
	if validate == nil {
		return nil
	}
	if err := validate(content); err != nil {
		return fmt.Errorf("tool: ask: the answer does not match the question's schema: %w", err)
	}
	return nil
}

// compileQuestion checks that schema is an object schema and, where the validator
// is linked (askschema), compiles it; nil without it.
func compileQuestion(schema json.RawMessage) (func(json.RawMessage) error, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(schema, &head); err != nil || head.Type != "object" {
		return nil, errors.New(`tool: ask: Question.Schema must be a JSON Schema of "type": "object"`)
	}
	if askschema.Compile == nil {
		return nil, nil
	}
	validate, err := askschema.Compile(schema)
	if err != nil {
		return nil, fmt.Errorf("tool: ask: Question.Schema: %w", err)
	}
	return validate, nil
}

// Sample asks the model behind the call that ctx belongs to for one completion and
// blocks until it comes or ctx ends (then it returns context.Cause(ctx)). With no
// model to ask it returns a *UnansweredError.
func Sample(ctx context.Context, req SampleRequest) (SampleResult, error) {
	if len(req.Messages) == 0 || req.MaxTokens <= 0 {
		return SampleResult{}, errors.New("tool: sample: a SampleRequest needs Messages and MaxTokens > 0")
	}
	in := InteractorFrom(ctx)
	if in == nil {
		return SampleResult{}, &UnansweredError{Op: "sample", Reason: "the runner of this call has no model to ask"}
	}
	res, err := in.Sample(ctx, req)
	if err != nil && ctx.Err() != nil {
		return SampleResult{}, context.Cause(ctx)
	}
	return res, err
}

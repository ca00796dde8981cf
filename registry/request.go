package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolhost/toolhost/tool"
)

// Request is the snapshot made once per model request: the advertised definitions
// and the registration captured for each advertised name. It is immutable and safe
// for concurrent use; settle any number of calls on it.
type Request struct {
	reg      *Registry
	location string
	limits   Limits
	entries  map[string]*entry
	defs     []Definition
	// store is where bound retains the Location's oversized output: made once here,
	// because a quota made per call escapes into bound's interface (an allocation
	// of every call).
	store *quota
	// narrowed is the last narrowing of this Request (see narrow).
	narrowed atomic.Pointer[narrowing]
}

// Definitions returns the advertised definitions sorted by name. The slice is shared;
// do not modify it.
func (q *Request) Definitions() []Definition { return q.defs }

// Location returns the placement the Request was prepared for.
func (q *Request) Location() string { return q.location }

// Call is one tool call to settle.
type Call struct {
	// Name is the advertised (normalized) tool name the model used.
	Name string
	// Input is the raw JSON input; empty means {}.
	Input json.RawMessage
	// Invocation is the call's identity, passed to the executor unchanged.
	Invocation tool.Invocation
	// Progress, if set, receives the executor's progress events. It must be safe for
	// concurrent use and must not block for long.
	Progress func(tool.Progress)

	obs observation // the Observer's view of this settlement; empty without one
}

// Outcome classifies a settlement. Its value is the stable string runners persist and
// the serve API and `toolhost call --json` print.
type Outcome string

// The outcomes a Settlement can carry. Every one but Completed is shown to the model as
// an error (Settlement.IsError). Interruption, defects and operational failures are Go
// errors, never settlements.
const (
	// Completed ("completed"): the tool ran and its output validated.
	Completed Outcome = "completed"
	// ToolFailed ("tool_failure"): the tool returned an *tool.Failure, or a before
	// hook refused the call; the message is the content.
	ToolFailed Outcome = "tool_failure"
	// Unknown ("unknown"): the name was not advertised by the Request. No hook ran.
	Unknown Outcome = "unknown"
	// InvalidInput ("invalid_input"): the input is not JSON, is too large or does not
	// match the input schema; the executor was not invoked. Problems says where.
	InvalidInput Outcome = "invalid_input"
	// InvalidOutput ("invalid_output"): the tool ran but its output does not match its
	// output schema, so no success is published. Problems says where.
	InvalidOutput Outcome = "invalid_output"
	// Unavailable ("unavailable"): the captured registration was closed and no later
	// generation of its source with the same contract has taken its place. No hook ran.
	Unavailable Outcome = "unavailable"
)

// Settlement is the result of one call, for the runner to persist and show the model.
type Settlement struct {
	Name       string  `json:"name"`
	ToolCallID string  `json:"tool_call_id"`
	Outcome    Outcome `json:"outcome"`
	// Content is the model-facing content. For every outcome but Completed it is one
	// text part with the error the model should see, bounded by the placement's
	// Limits as output is (see ManagedPaths).
	Content []tool.Part `json:"content,omitempty"`
	// Structured is the structured output (nil when there is none, or when it was
	// oversized and replaced by a preview in Content).
	Structured json.RawMessage `json:"structured,omitempty"`
	// Problems lists validation problems for InvalidInput and InvalidOutput: all of
	// them, or, when the message was over the limits, those its preview shows.
	Problems []Problem `json:"problems,omitempty"`
	// ManagedPaths are files in managed storage holding complete output, or the
	// complete message of a refusal, that was replaced by a preview. Never derived
	// from runner-supplied ids.
	ManagedPaths []string `json:"managed_paths,omitempty"`
	// Hint is for the runner and the person, never for the model: for ToolFailed,
	// the Hint() of the first error in the tool failure's Err chain that has one
	// (a permission denial says there how to allow the request). It is not part of
	// the JSON encoding, which is what the model's side persists.
	Hint string `json:"-"`
}

// hinter is an error with a note for the runner and the person (see
// Settlement.Hint), such as *permission.DeniedError.
type hinter interface{ Hint() string }

// IsError reports whether the model should see this settlement as an error.
func (s *Settlement) IsError() bool { return s.Outcome != Completed }

// Text returns the concatenated text parts of the content.
func (s *Settlement) Text() string {
	var b strings.Builder
	for _, p := range s.Content {
		if p.Type == tool.PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Settle runs one call through the pipeline: resolve the captured registration, run
// the before hooks, validate input, execute, validate output, project, bound, run the
// after hooks. Whatever the outcome, the text the model sees is bounded (a refusal's
// too: see boundMessage). Hooks run only when the tool resolved (not for Unknown or
// Unavailable).
//
// It returns a Settlement for every model-visible result (see Outcome). It returns an
// error, and no Settlement, when the call was interrupted (errors.Is(err,
// context.Canceled)), hit a defect (*DefectError) or failed operationally
// (*OperationalError).
func (q *Request) Settle(ctx context.Context, call Call) (*Settlement, error) {
	if o := q.reg.observer; o != nil {
		return q.observed(ctx, o, call)
	}
	call.obs = observation{} // a Call a hook passed on from another Registry's settlement
	return q.settleCall(ctx, call)
}

// settleCall is Settle, its observer (if any) set in call.
func (q *Request) settleCall(ctx context.Context, call Call) (*Settlement, error) {
	e, ok := q.entries[call.Name]
	if !ok {
		return q.refuse(call, Unknown, refusalText{head: fmt.Sprintf("unknown tool %q: it is not among the tools offered for this request", call.Name)})
	}
	call.obs.resolved(e.source)
	e, done, reason, err := q.resolve(ctx, e)
	if err != nil {
		return nil, err
	}
	if e == nil {
		msg := fmt.Sprintf("tool %q is no longer available: its provider was closed or changed its contract since the request was prepared", call.Name)
		if reason != "" {
			msg = fmt.Sprintf("tool %q is no longer available: %s", call.Name, reason)
		}
		return q.refuse(call, Unavailable, refusalText{head: msg})
	}
	defer done()

	hooks := q.reg.hooksFor(q.location)
	if len(hooks) > 0 {
		ctx = call.obs.step(ctx, StepBeforeHooks)
	}
	call, refused, err := runBefore(ctx, hooks, call)
	if err != nil {
		return nil, err
	}
	var s *Settlement
	if refused != nil {
		s, err = q.refuse(call, ToolFailed, refusalText{head: refused.Message})
	} else {
		s, err = q.settle(ctx, e, call)
	}
	if err != nil {
		return nil, err
	}
	if len(hooks) > 0 {
		ctx = call.obs.step(ctx, StepAfterHooks)
	}
	return runAfter(ctx, hooks, call, s)
}

// settle validates the input, executes the resolved entry and publishes its output.
func (q *Request) settle(ctx context.Context, e *entry, call Call) (*Settlement, error) {
	call.obs.step(ctx, StepValidateInput)
	input := bytes.TrimSpace(call.Input)
	if len(input) == 0 {
		input = []byte("{}")
	}
	if len(input) > q.reg.maxInputBytes {
		return q.refuse(call, InvalidInput, refusalText{head: fmt.Sprintf("invalid input for %q: %d bytes exceeds the %d byte limit", call.Name, len(input), q.reg.maxInputBytes)})
	}
	// The input's decoded value is needed only to explain a refusal: an input the
	// text check accepts is not decoded at all.
	if !e.input.validText(input) {
		v, problems, err := e.input.validateWithin(ctx, e, input)
		if err != nil {
			return nil, err // interruption
		}
		if problems != nil {
			return q.refuse(call, InvalidInput, invalidInputMessage(call.Name, e.input, v, problems))
		}
	}

	out, err := q.execute(call.obs.step(ctx, StepExecute), e, call, input)
	if err != nil {
		var failure *tool.Failure
		var decodeErr *tool.InputDecodingError
		var encodeErr *tool.OutputEncodingError
		switch {
		case errors.As(err, &failure):
			s, err := q.refuse(call, ToolFailed, refusalText{head: failure.Message})
			if h := hinter(nil); err == nil && errors.As(failure.Err, &h) {
				s.Hint = h.Hint()
			}
			return s, err
		case errors.As(err, &decodeErr):
			p := []Problem{{Message: decodeErr.Err.Error()}}
			return q.refuse(call, InvalidInput, invalidInputMessage(call.Name, e.input, nil, p))
		case errors.As(err, &encodeErr):
			p := []Problem{{Message: encodeErr.Err.Error()}}
			return q.refuse(call, InvalidOutput, invalidOutputMessage(call.Name, p))
		}
		return nil, err // interruption, defect or operational failure
	}

	call.obs.step(ctx, StepValidateOutput)
	decoded, problems, err := e.output.validateWithin(ctx, e, out.JSON)
	if err != nil {
		return nil, err // interruption
	}
	if problems != nil {
		return q.refuse(call, InvalidOutput, invalidOutputMessage(call.Name, problems))
	}
	structured := out.JSON
	if out.Structured != nil {
		_, problems, err := e.structured.validateWithin(ctx, e, out.Structured)
		if err != nil {
			return nil, err // interruption
		}
		if problems != nil {
			return q.refuse(call, InvalidOutput, invalidOutputMessage(call.Name, problems))
		}
		structured = out.Structured
	}

	call.obs.step(ctx, StepProject)
	content, err := project(e, input, out)
	if err != nil {
		return nil, err
	}
	if text, ok := decoded.(string); ok && e.tool.Project == nil && !out.HasContent {
		// An encoded string is published as one text part only.
		content = []tool.Part{tool.Text(text)}
		if out.Structured == nil {
			structured = nil
		}
	}

	call.obs.step(ctx, StepBound)
	content, structured, managed, err := bound(q.store, q.limits, content, structured)
	if err != nil {
		return nil, &OperationalError{Tool: call.Name, Op: "bound", Err: err}
	}
	if len(content) == 0 && structured != nil {
		// A settlement always has model content: structured output alone becomes its
		// JSON text (within the limits, or bound would have replaced it by a preview).
		content = []tool.Part{tool.Text(string(structured))}
	}
	return &Settlement{
		Name:         call.Name,
		ToolCallID:   call.Invocation.ToolCallID,
		Outcome:      Completed,
		Content:      content,
		Structured:   structured,
		ManagedPaths: managed,
	}, nil
}

// resolve applies the capture rule. A captured entry that is still active runs. A
// closed one is replaced by the name's current effective entry only when that is a
// later registration of the same source with an identical fingerprint; otherwise the
// call is unavailable (nil, with why when its source said). While the entry's source
// is held down (see Hold) the call first waits for its next generation, within the
// hold's wait; an interrupted wait is returned as the error. done ends the owner's
// tracking of the execution.
func (q *Request) resolve(ctx context.Context, e *entry) (_ *entry, done func(), reason string, err error) {
	var deadline <-chan time.Time
	for range 64 { // each round follows one registration change
		closing := false
		if !e.closed.Load() {
			if e.owner == nil {
				return e, func() {}, "", nil
			}
			if done, err := e.owner.Track(); err == nil {
				return e, done, "", nil
			}
			// The owner is closing; its entries are about to be removed.
			closing = true
		}
		q.reg.mu.RLock()
		cur := q.reg.effective(q.location, e.name)
		var (
			changed <-chan struct{}
			wait    time.Duration
			why     error
			held    bool
		)
		if p := q.reg.placements[q.location]; p != nil && e.location == q.location {
			changed, wait, why, held = p.waitFor(e)
			if closing && !held && !e.closed.Load() {
				// The owner ended (a crash) but has not released its entries yet:
				// if the source is held, they are about to be retained, so wait for
				// the release rather than settle Unavailable in between.
				if h := p.holdOf(e.source); h != nil && h.reason == nil && h.ctx.Err() == nil {
					changed, wait, held = q.reg.changed, h.wait, true
				}
			}
		}
		q.reg.mu.RUnlock()
		if cur != nil && cur != e && cur.seq >= e.seq && cur.location == e.location &&
			cur.source.Kind == e.source.Kind && cur.source.Name == e.source.Name &&
			cur.source.Generation >= e.source.Generation && cur.fingerprint == e.fingerprint {
			e = cur
			continue
		}
		switch {
		case why != nil:
			return nil, nil, why.Error(), nil
		case !held || changed == nil:
			return nil, nil, "", nil
		}
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-changed:
		case <-deadline:
			return nil, nil, fmt.Sprintf("its source %s is restarting and did not come back within %s", e.source, wait), nil
		case <-ctx.Done():
			return nil, nil, "", interruption(ctx)
		}
	}
	return nil, nil, "", nil
}

// execute runs the executor under the call's context joined with the owner's, with
// progress reporting installed, recovering a panic as a defect.
func (q *Request) execute(ctx context.Context, e *entry, call Call, input json.RawMessage) (out tool.Output, err error) {
	callCtx := ctx
	var ownerCtx context.Context
	if e.owner != nil {
		ownerCtx = e.owner.Context()
		if !e.ownerJoined {
			var cancel context.CancelCauseFunc
			ctx, cancel = context.WithCancelCause(ctx)
			defer cancel(nil)
			stop := context.AfterFunc(ownerCtx, func() { cancel(context.Cause(ownerCtx)) })
			defer stop()
		}
	}
	if call.Progress != nil {
		ctx = tool.WithProgress(ctx, call.Progress)
	}
	defer func() {
		if v := recover(); v != nil {
			err = &DefectError{Tool: call.Name, Value: v, Stack: debug.Stack()}
		}
	}()
	out, err = e.tool.Execute(ctx, call.Invocation, input)
	switch {
	case callCtx.Err() != nil:
		// Whatever the executor returned, the runner interrupted the call.
		return out, interruption(callCtx)
	case ownerCtx != nil && ownerCtx.Err() != nil:
		// The owner closed: an interruption when it was closed on purpose, an
		// operational failure when it ended because its producer failed (a crash).
		if cause := context.Cause(ownerCtx); !errors.Is(cause, context.Canceled) {
			return out, &OperationalError{Tool: call.Name, Op: "execute", Err: cause}
		}
		return out, interruption(ownerCtx)
	case err == nil:
		return out, nil
	}
	return out, executeError(call.Name, err)
}

// executeError classifies an executor's error for execute. It is a function of its
// own so that errors.As's targets, which escape, are allocated only for an error:
// declared in execute they cost every call four allocations.
func executeError(name string, err error) error {
	var failure *tool.Failure
	var decodeErr *tool.InputDecodingError
	var encodeErr *tool.OutputEncodingError
	var defect *DefectError
	switch {
	case errors.As(err, &failure), errors.As(err, &decodeErr), errors.As(err, &encodeErr):
		return err
	case errors.As(err, &defect):
		// A producer's defect (a plugin's panic, with its stack) is reported as one.
		return defect
	case errors.Is(err, context.Canceled):
		// A deliberate interruption-like end, such as a permission ask declined
		// without a message: passed through, never model-visible.
		return err
	}
	return &OperationalError{Tool: name, Op: "execute", Err: err}
}

// project computes the model content: the tool's projection, else the producer's
// precomputed content. (An encoded string's text part is made by the caller from the
// value it already decoded.)
func project(e *entry, input json.RawMessage, out tool.Output) (content []tool.Part, err error) {
	switch {
	case e.tool.Project != nil:
		defer func() {
			if v := recover(); v != nil {
				content, err = nil, &DefectError{Tool: e.name, Value: v, Stack: debug.Stack()}
			}
		}()
		return e.tool.Project(input, out.JSON), nil
	case out.HasContent:
		return out.Content, nil
	}
	return nil, nil
}

// refuse returns the settlement of a call that did not complete: m's text, bounded
// (see boundMessage) with what is cut retained in the placement's managed storage. A
// failed retention is an *OperationalError, never a lossy refusal.
func (q *Request) refuse(call Call, o Outcome, m refusalText) (*Settlement, error) {
	text, problems, path, err := boundMessage(q.store, q.limits, m)
	if err != nil {
		return nil, &OperationalError{Tool: call.Name, Op: "bound", Err: err}
	}
	s := &Settlement{
		Name:       call.Name,
		ToolCallID: call.Invocation.ToolCallID,
		Outcome:    o,
		Content:    []tool.Part{tool.Text(text)},
		Problems:   problems,
	}
	if path != "" {
		s.ManagedPaths = []string{path}
	}
	return s, nil
}

// refusalText is the text a refusal shows the model: its first line, one line per
// problem ("- " and the problem), then the trailing lines.
type refusalText struct {
	head     string
	problems []Problem
	tail     []string
}

// segments returns the message's text as the segments boundMessage measures.
func (m refusalText) segments() joinedText[string] {
	t := make(joinedText[string], 0, 1+2*len(m.problems)+2*len(m.tail))
	t = append(t, m.head)
	for _, p := range m.problems {
		t = append(t, "\n- ", p.String())
	}
	for _, line := range m.tail {
		t = append(t, "\n", line)
	}
	return t
}

func invalidInputMessage(name string, s *compiledSchema, v any, problems []Problem) refusalText {
	m := refusalText{head: fmt.Sprintf("invalid input for %q:", name), problems: problems}
	if obj, ok := v.(map[string]any); ok && s != nil && len(s.keys) > 0 {
		received := make([]string, 0, len(obj))
		for k := range obj {
			received = append(received, k)
		}
		slices.Sort(received)
		m.tail = []string{"expected keys: " + strings.Join(s.keys, ", "), "received keys: " + strings.Join(received, ", ")}
	}
	return m
}

func invalidOutputMessage(name string, problems []Problem) refusalText {
	return refusalText{
		head:     fmt.Sprintf("tool %q produced output that does not match its declared output schema, so its result cannot be used:", name),
		problems: problems,
	}
}

// PrepareOption narrows what one Prepare offers.
type PrepareOption func(*prepareConfig)

type prepareConfig struct {
	offered []func(source, action string) bool
	all     bool
}

// Offer makes Prepare offer only the tools whose permission actions all satisfy
// offered, asked with the tool's source (Source.ID: "builtin", "plugin:NAME",
// "mcp:NAME", "manifest:NAME") and each action: the tool's name and, when it
// declares one, its tool.Tool.PermissionAction. permission.Visibility builds offered
// from the rules that apply to a request, so a tool those rules deny outright is not
// shown to the model. Several Offer options narrow together: a tool is offered when
// every one accepts it. Offering decides visibility only, never authorization: a
// call still goes through permission when it runs, whatever Request it came through.
func Offer(offered func(source, action string) bool) PrepareOption {
	return func(c *prepareConfig) { c.offered = append(c.offered, offered) }
}

// OfferAll makes Prepare offer every tool of the placement, whatever Offer options
// come with it (such as the visibility location.Location.Prepare applies by
// default): for a runner that wants the unfiltered list on purpose.
func OfferAll() PrepareOption {
	return func(c *prepareConfig) { c.all = true }
}

// narrow returns q narrowed by cfg's Offer options: q itself when they hide
// nothing, else a Request with the entries they accept. The last narrowing of q is
// kept, so preparing again with the same outcome returns the same Request (callers
// compare Requests to see whether the tool set changed).
func (q *Request) narrow(cfg prepareConfig) *Request {
	if cfg.all || len(cfg.offered) == 0 {
		return q
	}
	offered := func(source, action string) bool {
		for _, f := range cfg.offered {
			if !f(source, action) {
				return false
			}
		}
		return true
	}
	var hidden []bool // by index in q.defs; nil while nothing is hidden
	for i, d := range q.defs {
		e := q.entries[d.Name]
		source := e.source.ID()
		if offered(source, d.Name) && (e.tool.PermissionAction == "" || offered(source, e.tool.PermissionAction)) {
			continue
		}
		if hidden == nil {
			hidden = make([]bool, len(q.defs))
		}
		hidden[i] = true
	}
	if hidden == nil {
		return q
	}
	if n := q.narrowed.Load(); n != nil && slices.Equal(n.hidden, hidden) {
		return n.q
	}
	out := &Request{reg: q.reg, location: q.location, limits: q.limits, entries: make(map[string]*entry, len(q.entries)), store: q.store}
	for i, d := range q.defs {
		if !hidden[i] {
			out.entries[d.Name] = q.entries[d.Name]
			out.defs = append(out.defs, d)
		}
	}
	q.narrowed.Store(&narrowing{hidden: hidden, q: out})
	return out
}

// narrowing is a Request's last narrowing: which of its definitions were hidden,
// and the Request that resulted.
type narrowing struct {
	hidden []bool
	q      *Request
}

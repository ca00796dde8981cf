package registry

import "context"

// Step names a stage of the settlement pipeline as an [Observer] sees it.
type Step string

// The steps of a settlement, in pipeline order. A settlement that is refused early
// (an unknown or unavailable tool, a before hook's refusal, invalid input) ends
// without the later ones.
const (
	StepBeforeHooks    Step = "before_hooks"
	StepValidateInput  Step = "validate_input"
	StepExecute        Step = "execute"
	StepValidateOutput Step = "validate_output"
	StepProject        Step = "project"
	StepBound          Step = "bound"
	StepAfterHooks     Step = "after_hooks"
)

// Observer watches every settlement of a Registry, for traces, metrics and an audit
// trail (package telemetry implements it with OpenTelemetry, so registry itself
// links none of it). Set it with Options.Observer; nil, the default, costs a
// settlement one nil check. It is called for many settlements at once, from their
// settling goroutines, and must not block.
type Observer interface {
	// StartSettle is called as Request.Settle begins, before the name resolves, with
	// the Request's Location and a copy of the call (whose Input it must not modify
	// or keep). It returns the context the settlement runs under from then on
	// (carrying, say, its span) and the Settling that follows this settlement.
	StartSettle(ctx context.Context, location string, call Call) (context.Context, Settling)
}

// Settling follows one settlement. Its methods are called from the settling
// goroutine, in order: Resolved at most once, Step as each step begins (a step ends
// where the next one begins, or at End; the hook steps only when the placement has
// hooks), End exactly once.
type Settling interface {
	// Resolved names the source of the tool the call's name was captured for.
	Resolved(source Source)
	// Step says step begins; ctx is the settlement's context at that point. It
	// returns the context the step runs under: the registry runs the code of
	// others (the tool in StepExecute, hooks in StepBeforeHooks and
	// StepAfterHooks) under it, and does not use it for the steps that run only
	// its own code.
	Step(ctx context.Context, step Step) context.Context
	// End ends the settlement with what Settle returns: a Settlement, or an error.
	End(s *Settlement, err error)
}

// observation holds a call's Settling, or none when the Registry has no Observer: its
// methods are then a nil check.
type observation struct{ s Settling }

func (o observation) resolved(src Source) {
	if o.s != nil {
		o.s.Resolved(src)
	}
}

func (o observation) step(ctx context.Context, st Step) context.Context {
	if o.s == nil {
		return ctx
	}
	return o.s.Step(ctx, st)
}

// observed is Settle with the Registry's Observer watching.
func (q *Request) observed(ctx context.Context, o Observer, call Call) (*Settlement, error) {
	ctx, s := o.StartSettle(ctx, q.location, call)
	if s == nil {
		return q.settleCall(ctx, call)
	}
	call.obs = observation{s}
	st, err := q.settleCall(ctx, call)
	s.End(st, err)
	return st, err
}

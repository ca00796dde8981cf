package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/toolhost/toolhost/tool"
)

// BeforeHook runs once a call's tool has resolved and before its input is validated.
// It sees the call (with the input of the hooks before it) and returns the input to
// use: call.Input unchanged, or a replacement, which is then validated as usual and is
// what the executor and the after hooks see. To refuse the call with a message the
// model sees, return a *tool.Failure: the call settles as ToolFailed and the
// executor is not invoked. Any other error fails the call operationally.
type BeforeHook func(ctx context.Context, call Call) (json.RawMessage, error)

// Hook (an after hook) runs after a call's settlement has been bounded. It receives the
// settlement (including its ManagedPaths) and returns the settlement to publish, which
// may be the same value modified or a new one. The registry does not bound again
// afterwards. An error fails the call operationally.
//
// Before and after hooks run only for calls whose tool resolved (every outcome but
// Unknown and Unavailable), in registration order, application hooks first.
type Hook func(ctx context.Context, call Call, s *Settlement) (*Settlement, error)

// hookEntry is one registered hook: exactly one of before and after is set.
type hookEntry struct {
	before BeforeHook
	after  Hook
}

// AddBeforeHook registers a before hook in a placement. The returned release removes
// it; it is idempotent. Calls that already passed the before hooks are unaffected.
func (r *Registry) AddBeforeHook(location string, h BeforeHook) (release func(), err error) {
	if h == nil {
		return nil, fmt.Errorf("registry: nil before hook")
	}
	return r.addHook(location, &hookEntry{before: h})
}

// AddHook registers an after hook in a placement. The returned release removes it; it
// is idempotent. Settlements that already started may still run it.
func (r *Registry) AddHook(location string, h Hook) (release func(), err error) {
	if h == nil {
		return nil, fmt.Errorf("registry: nil hook")
	}
	return r.addHook(location, &hookEntry{after: h})
}

func (r *Registry) addHook(location string, he *hookEntry) (release func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.placements[location]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrLocationNotOpen, location)
	}
	p.hooks = append(p.hooks, he)
	return sync.OnceFunc(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		p.hooks = slices.DeleteFunc(p.hooks, func(x *hookEntry) bool { return x == he })
	}), nil
}

// hooksFor returns the hooks that run for a call in location: application hooks, then
// the Location's, each in registration order.
func (r *Registry) hooksFor(location string) []*hookEntry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	hooks := slices.Clone(r.placements[Application].hooks)
	if location != Application {
		if p, ok := r.placements[location]; ok {
			hooks = append(hooks, p.hooks...)
		}
	}
	return hooks
}

// runBefore runs the before hooks in order. It returns the call with its final input,
// or the tool failure a hook refused it with, or an error (operational, or a defect
// for a panic).
func runBefore(ctx context.Context, hooks []*hookEntry, call Call) (_ Call, refused *tool.Failure, err error) {
	for _, he := range hooks {
		if he.before == nil {
			continue
		}
		input, err := callBefore(ctx, he.before, call)
		var failure *tool.Failure
		switch {
		case errors.As(err, &failure):
			return call, failure, nil
		case err != nil:
			return call, nil, err
		}
		call.Input = input
	}
	return call, nil, nil
}

func callBefore(ctx context.Context, h BeforeHook, call Call) (input json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			input, err = nil, &DefectError{Tool: call.Name, Value: v, Stack: debug.Stack()}
		}
	}()
	input, err = h(ctx, call)
	var failure *tool.Failure
	if err != nil && !errors.As(err, &failure) {
		return nil, &OperationalError{Tool: call.Name, Op: "before hook", Err: err}
	}
	return input, err
}

// runAfter runs the after hooks in order on a settlement.
func runAfter(ctx context.Context, hooks []*hookEntry, call Call, s *Settlement) (*Settlement, error) {
	for _, he := range hooks {
		if he.after == nil {
			continue
		}
		var err error
		if s, err = callAfter(ctx, he.after, call, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func callAfter(ctx context.Context, h Hook, call Call, s *Settlement) (out *Settlement, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, &DefectError{Tool: call.Name, Value: v, Stack: debug.Stack()}
		}
	}()
	out, err = h(ctx, call, s)
	if err == nil && out == nil {
		err = errors.New("hook returned no settlement")
	}
	if err != nil {
		return nil, &OperationalError{Tool: call.Name, Op: "hook", Err: err}
	}
	return out, nil
}

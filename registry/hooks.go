package registry

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// Hook runs after a call's settlement has been bounded. It receives the settlement
// (including its ManagedPaths) and returns the settlement to publish, which may be
// the same value modified or a new one. The registry does not bound again afterwards.
// An error fails the call operationally. Hooks run on every settlement of their
// placement, in registration order, application hooks first.
type Hook func(ctx context.Context, call Call, s *Settlement) (*Settlement, error)

type hookEntry struct {
	seq  uint64
	hook Hook
}

// AddHook registers an after hook in a placement. The returned release removes it; it
// is idempotent. Settlements that already started may still run it.
func (r *Registry) AddHook(location string, h Hook) (release func(), err error) {
	if h == nil {
		return nil, fmt.Errorf("registry: nil hook")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.placements[location]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrLocationNotOpen, location)
	}
	r.seq++
	he := &hookEntry{seq: r.seq, hook: h}
	p.hooks = append(p.hooks, he)
	return sync.OnceFunc(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		p.hooks = slices.DeleteFunc(p.hooks, func(x *hookEntry) bool { return x == he })
	}), nil
}

// hooksFor returns the hooks that run for a settlement in location: application hooks,
// then the Location's, each in registration order.
func (r *Registry) hooksFor(location string) []Hook {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var hooks []Hook
	for _, he := range r.placements[Application].hooks {
		hooks = append(hooks, he.hook)
	}
	if location != Application {
		if p, ok := r.placements[location]; ok {
			for _, he := range p.hooks {
				hooks = append(hooks, he.hook)
			}
		}
	}
	return hooks
}

package registry

import (
	"context"
	"fmt"
	"time"
)

// Hold keeps one supervised source's tools advertised while the source restarts, so
// that a crash between two generations neither hides its tools from the Requests
// prepared meanwhile nor fails the calls that captured them at once. Make one with
// [Registry.Hold]. Its methods are safe for concurrent use.
//
// While a Hold is armed, releasing a registration of its source (Release, not
// Withdraw) when no later generation of the source holds anything in the placement
// (the source went down, rather than being replaced by a reload) keeps the released
// entries advertised:
// Requests prepared meanwhile still offer them, and a call that resolves to one
// waits, up to the Hold's wait, for a later generation of the source to register.
// Then the capture rule applies as usual: the successor runs the call when its
// definition fingerprint is unchanged, otherwise the call settles Unavailable. A
// wait that runs out settles Unavailable saying so.
type Hold struct {
	r      *Registry
	p      *placement
	source Source
	ctx    context.Context
	wait   time.Duration

	// guarded by r.mu
	retained map[string]*entry // name → the entry kept advertised
	reason   error             // set by Fail until the source registers again
	ended    bool
	changed  chan struct{} // closed and replaced when the source registers, fails or the hold ends
}

// Hold arms a hold for src (its Kind and Name; Generation is ignored) in the Location
// placement location. wait bounds how long a call waits for the source's next
// generation (for a supervisor: its start timeout plus the longest backoff). The hold
// retains nothing once ctx has ended (the supervisor is stopping on purpose) and ends
// with Release. One source holds at most one Hold at a time: a second one replaces
// the first.
func (r *Registry) Hold(ctx context.Context, location string, src Source, wait time.Duration) (*Hold, error) {
	src.Generation = 0
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.placements[location]
	if !ok || location == Application {
		return nil, fmt.Errorf("%w: %q", ErrLocationNotOpen, location)
	}
	h := &Hold{r: r, p: p, source: src, ctx: ctx, wait: wait, retained: map[string]*entry{}, changed: make(chan struct{})}
	if p.holds == nil {
		p.holds = map[Source]*Hold{}
	}
	if old := p.holds[src]; old != nil {
		old.endLocked(nil)
	}
	p.holds[src] = h
	return h, nil
}

// Fail says the source is down for good (its restart budget is spent): its retained
// tools stop being advertised, and every call waiting for it, and every later call on
// a Request that captured one of its closed registrations, settles Unavailable with
// reason in its message, until the source registers again.
func (h *Hold) Fail(reason error) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.ended {
		return
	}
	h.reason = reason
	h.clearLocked()
}

// Up says the source's new generation has registered what it registers as it
// starts: the tools of its earlier generations that it did not register again stop
// being advertised, and calls waiting for them settle Unavailable. A supervisor calls
// it after every start that succeeded.
func (h *Hold) Up() {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.ended {
		return
	}
	h.reason = nil
	h.clearLocked()
}

// Release ends the hold: retained tools stop being advertised and waiting calls
// settle Unavailable. Idempotent.
func (h *Hold) Release() {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	if h.p.holds[h.source] == h {
		delete(h.p.holds, h.source)
	}
	h.endLocked(nil)
}

func (h *Hold) endLocked(reason error) {
	if h.ended {
		return
	}
	h.ended = true
	if reason != nil {
		h.reason = reason
	}
	h.clearLocked()
}

// clearLocked drops the retained entries and wakes the waiters. r.mu is held.
func (h *Hold) clearLocked() {
	if len(h.retained) > 0 {
		h.retained = map[string]*entry{}
		h.p.version++
		h.r.changedLocked()
	}
	h.wakeLocked()
}

// wakeLocked wakes the calls waiting for the source. r.mu is held.
func (h *Hold) wakeLocked() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// holdOf returns the armed hold of src in p, or nil. r.mu is held.
func (p *placement) holdOf(src Source) *Hold {
	src.Generation = 0
	h := p.holds[src]
	if h == nil || h.ended {
		return nil
	}
	return h
}

// retainLocked keeps g's entries advertised if g's source is held and no later
// generation of it holds anything in the placement. r.mu is held.
func (p *placement) retainLocked(g *Registration) {
	h := p.holdOf(g.source)
	if h == nil || h.ctx.Err() != nil {
		return
	}

	for src := range p.usage {
		if src.same(g.source) && src.Generation > g.source.Generation {
			return // replaced by a reload, not down
		}
	}
	for _, e := range g.entries {
		h.retained[e.name] = e
	}
}

// registeredLocked notes that src registered entries: what its earlier generations
// left retained under their names is superseded, and waiters look again. A source
// may register its tools in several batches (an MCP server, one per tool): the other
// retained names stay until it is up (Hold.Up). r.mu is held.
func (p *placement) registeredLocked(src Source, entries []*entry) {
	h := p.holdOf(src)
	if h == nil {
		return
	}
	h.reason = nil
	for _, e := range entries {
		if _, ok := h.retained[e.name]; ok {
			delete(h.retained, e.name)
			p.version++
		}
	}
	h.wakeLocked()
}

// retainedFor returns the entries p keeps advertised for names it has no active entry
// for. r.mu is held (read).
func (p *placement) retainedFor(visit func(name string, e *entry)) {
	for _, h := range p.holds {
		for name, e := range h.retained {
			if len(p.names[name]) == 0 {
				visit(name, e)
			}
		}
	}
}

// waitFor reports how a call that captured the closed entry e should proceed: wait
// on the returned channel (then resolve again) until deadline, or give up with a
// reason ("" when the source is not held). r.mu is held (read).
func (p *placement) waitFor(e *entry) (ch <-chan struct{}, wait time.Duration, reason error, held bool) {
	h := p.holdOf(e.source)
	if h == nil {
		return nil, 0, nil, false
	}
	if h.reason != nil {
		return nil, 0, h.reason, true
	}
	if _, down := h.retained[e.name]; !down {
		return nil, 0, nil, false
	}
	return h.changed, h.wait, nil, true
}

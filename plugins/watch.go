package plugins

import (
	"context"
	"sync"
	"time"
)

// callWatch ends an instance's calls in flight when they run out of the call
// timeout or when the instance's scope ends, for all of them at once: one goroutine
// and one registration on the scope's context, where a timer and a registration per
// call cost each call allocations and the contention of 64 callers on the scope
// context's lock and the timer heaps. A call runs out of its timeout within a
// twentieth of it (at most a second) after the timeout has passed.
type callWatch struct {
	timeout, tick time.Duration

	mu    sync.Mutex
	calls map[*watchedCall]struct{}
	ended bool
	cause error // the scope's cause once ended
}

type watchedCall struct {
	cancel   context.CancelCauseFunc
	deadline time.Time // zero until armed
}

// newCallWatch watches the calls of the scope whose context is scopeCtx, until it
// ends.
func newCallWatch(scopeCtx context.Context, timeout time.Duration) *callWatch {
	w := &callWatch{timeout: timeout, tick: min(max(timeout/20, 10*time.Millisecond), time.Second), calls: map[*watchedCall]struct{}{}}
	context.AfterFunc(scopeCtx, func() { w.end(context.Cause(scopeCtx)) })
	go w.run(scopeCtx.Done())
	return w
}

// add watches a call whose context cancel ends; a call added after the scope
// ended is cancelled at once. Call remove when the call returns.
func (w *callWatch) add(cancel context.CancelCauseFunc) *watchedCall {
	c := &watchedCall{cancel: cancel}
	w.mu.Lock()
	ended, cause := w.ended, w.cause
	if !ended {
		w.calls[c] = struct{}{}
	}
	w.mu.Unlock()
	if ended {
		cancel(cause)
	}
	return c
}

// arm starts the call's timeout.
func (w *callWatch) arm(c *watchedCall) {
	w.mu.Lock()
	c.deadline = time.Now().Add(w.timeout)
	w.mu.Unlock()
}

func (w *callWatch) remove(c *watchedCall) {
	w.mu.Lock()
	delete(w.calls, c)
	w.mu.Unlock()
}

// end cancels every call with the scope's cause.
func (w *callWatch) end(cause error) {
	w.mu.Lock()
	w.ended, w.cause = true, cause
	calls := w.calls
	w.calls = map[*watchedCall]struct{}{}
	w.mu.Unlock()
	for c := range calls {
		c.cancel(cause)
	}
}

func (w *callWatch) run(done <-chan struct{}) {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			var late []*watchedCall
			w.mu.Lock()
			for c := range w.calls {
				if !c.deadline.IsZero() && !now.Before(c.deadline) {
					late = append(late, c)
					delete(w.calls, c)
				}
			}
			w.mu.Unlock()
			for _, c := range late {
				c.cancel(errCallTimeout)
			}
		}
	}
}

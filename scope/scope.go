package scope

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrClosed is the cancellation cause of a closed scope's context, and the error for
// work offered to a scope that is closing or closed. It wraps context.Canceled, so
// executions ended by a scope's close satisfy errors.Is(err, context.Canceled).
var ErrClosed = fmt.Errorf("scope: closed: %w", context.Canceled)

type release struct {
	id uint64
	fn func(context.Context) error
}

type state int

const (
	open state = iota
	draining
	closing
	closed
)

// Scope owns resources and releases them in reverse order on Close. Scopes nest: a
// child is released, like any other resource, when its parent closes. A Scope must not
// be copied. All methods are safe for concurrent use.
type Scope struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	state    state
	releases []release
	nextID   uint64
	work     sync.WaitGroup
	parent   *Scope // set for children, to forget them once closed
	parentID uint64
	done     chan struct{} // closed when Close has finished
	err      error         // Close's result, set before done is closed
}

// New returns an open scope whose context derives from ctx: cancelling ctx cancels the
// scope's context (and so its tracked work) but does not release its resources; only
// Close does.
func New(ctx context.Context) *Scope {
	sctx, cancel := context.WithCancelCause(ctx)
	return &Scope{ctx: sctx, cancel: cancel, done: make(chan struct{})}
}

// Context returns the scope's context. It is cancelled with cause ErrClosed when Close
// begins.
func (s *Scope) Context() context.Context { return s.ctx }

// Defer registers release to run when the scope closes, after every release deferred
// later. If the scope is already closing or closed, release runs at once, under ctx,
// and Defer returns ErrClosed joined with release's error, so the caller learns its
// resource did not stay alive.
func (s *Scope) Defer(ctx context.Context, fn func(context.Context) error) error {
	_, err := s.deferRelease(ctx, fn)
	return err
}

func (s *Scope) deferRelease(ctx context.Context, fn func(context.Context) error) (uint64, error) {
	s.mu.Lock()
	if s.state == open || s.state == draining {
		s.nextID++
		id := s.nextID
		s.releases = append(s.releases, release{id: id, fn: fn})
		s.mu.Unlock()
		return id, nil
	}
	s.mu.Unlock()
	return 0, errors.Join(ErrClosed, fn(ctx))
}

// forget drops a release that is no longer needed (a child that closed early).
func (s *Scope) forget(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == open || s.state == draining {
		s.releases = slices.DeleteFunc(s.releases, func(r release) bool { return r.id == id })
	}
}

// Go runs fn in a new goroutine as tracked work: Close cancels fn's context and waits
// for it to return. If the scope is closing or closed, fn is not started and Go
// returns ErrClosed.
func (s *Scope) Go(fn func(ctx context.Context)) error {
	done, err := s.Track()
	if err != nil {
		return err
	}
	go func() {
		defer done()
		fn(s.ctx)
	}()
	return nil
}

// Track marks the start of work that runs in the caller's goroutine, such as one tool
// execution, and returns the function that marks its end. Close waits for every
// tracked piece of work (within its deadline) before it releases resources. Track
// fails with ErrClosed once the scope is closing. done must be called exactly once.
func (s *Scope) Track() (done func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != open {
		return nil, ErrClosed
	}
	s.work.Add(1)
	return sync.OnceFunc(s.work.Done), nil
}

// Drain stops the scope from taking new tracked work (Track and Go fail with
// ErrClosed from now on) and waits, without cancelling anything, until the work in
// progress has returned or ctx ends; then it returns ctx's error. It releases nothing:
// Close still does that, and may follow at once. Hot reload drains an old generation
// so its calls finish while new ones go to its successor.
func (s *Scope) Drain(ctx context.Context) error {
	s.mu.Lock()
	if s.state == open {
		s.state = draining
	}
	s.mu.Unlock()
	return s.waitWork(ctx)
}

// Child returns a new scope nested in s: its context derives from s's, and s closes it
// (before releasing anything deferred on s earlier). Closing the child early is fine;
// s then has nothing left to do for it. Child fails with ErrClosed if s is closing or
// closed.
func (s *Scope) Child() (*Scope, error) {
	c := New(s.ctx)
	id, err := s.deferRelease(context.Background(), c.Close)
	if err != nil {
		return nil, err
	}
	c.parent, c.parentID = s, id
	return c, nil
}

// Close ends the scope. It cancels the scope's context with cause ErrClosed, waits for
// tracked work until ctx is done, then runs every deferred release in reverse order,
// each under a context that carries ctx's values and deadline but not its
// cancellation — releases decide themselves how to finish quickly (a process is
// force-killed once the deadline passes). It keeps going on error and returns all
// errors joined, including ctx's error when tracked work outlived the deadline.
//
// Close is idempotent: later and concurrent calls wait for the first to finish and
// return its result.
func (s *Scope) Close(ctx context.Context) error {
	return s.CloseWithCause(ctx, ErrClosed)
}

// CloseWithCause is Close with another cancellation cause for the scope's context,
// for a scope that ends because something failed (a plugin crashed): work tracked by
// the scope then sees cause instead of ErrClosed. If the scope is already closing, the
// first cause stays.
func (s *Scope) CloseWithCause(ctx context.Context, cause error) error {
	s.mu.Lock()
	if s.state == closing || s.state == closed {
		s.mu.Unlock()
		<-s.done
		return s.err
	}
	s.state = closing
	s.mu.Unlock()

	s.cancel(cause)
	var errs []error
	if err := s.waitWork(ctx); err != nil {
		errs = append(errs, err)
	}

	// No Defer can append once the state is closing, so releases is ours alone now.
	rctx := context.WithoutCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		rctx, cancel = context.WithDeadline(rctx, deadline)
		defer cancel()
	}
	for i := len(s.releases) - 1; i >= 0; i-- {
		if err := s.releases[i].fn(rctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.releases = nil

	s.mu.Lock()
	s.state = closed
	s.err = errors.Join(errs...)
	s.mu.Unlock()
	close(s.done)
	if s.parent != nil {
		s.parent.forget(s.parentID)
	}
	return s.err
}

// Done returns a channel closed once Close has finished.
func (s *Scope) Done() <-chan struct{} { return s.done }

func (s *Scope) waitWork(ctx context.Context) error {
	finished := make(chan struct{})
	go func() {
		s.work.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		select {
		case <-finished: // both were ready; the work did finish
			return nil
		default:
			return fmt.Errorf("scope: tracked work still running: %w", context.Cause(ctx))
		}
	}
}

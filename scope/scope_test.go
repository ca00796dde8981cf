package scope_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/scope"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScope(t *testing.T) {
	t.Run("ReleasesInReverseOrder", func(t *testing.T) {
		s := scope.New(context.Background())
		var order []int
		for i := range 3 {
			if err := s.Defer(t.Context(), func(context.Context) error { order = append(order, i); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(order, []int{2, 1, 0}) {
			t.Fatalf("release order = %v, want [2 1 0]", order)
		}
	})

	t.Run("CloseKeepsGoingAndJoinsErrors", func(t *testing.T) {
		s := scope.New(context.Background())
		errA, errB := errors.New("a"), errors.New("b")
		ran := 0
		s.Defer(t.Context(), func(context.Context) error { ran++; return errA })
		s.Defer(t.Context(), func(context.Context) error { ran++; return nil })
		s.Defer(t.Context(), func(context.Context) error { ran++; return errB })
		err := s.Close(t.Context())
		if ran != 3 || !errors.Is(err, errA) || !errors.Is(err, errB) {
			t.Fatalf("ran %d releases, err = %v; want 3 and both errors", ran, err)
		}
	})

	t.Run("CloseIsIdempotentAndConcurrent", func(t *testing.T) {
		s := scope.New(context.Background())
		calls := 0
		want := errors.New("once")
		s.Defer(t.Context(), func(context.Context) error { calls++; return want })
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { errs[i] = s.Close(t.Context()) })
		}
		wg.Wait()
		if calls != 1 {
			t.Fatalf("release ran %d times, want 1", calls)
		}
		for _, err := range errs {
			if !errors.Is(err, want) {
				t.Fatalf("Close = %v, want the first close's error", err)
			}
		}
	})

	t.Run("CloseCancelsTrackedWorkWithCause", func(t *testing.T) {
		s := scope.New(context.Background())
		var cause error
		s.Go(func(ctx context.Context) {
			<-ctx.Done()
			cause = context.Cause(ctx)
		})
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(cause, scope.ErrClosed) || !errors.Is(cause, context.Canceled) {
			t.Fatalf("cause = %v, want ErrClosed wrapping context.Canceled", cause)
		}
	})

	t.Run("ReleasesRunAfterTrackedWorkReturns", func(t *testing.T) {
		s := scope.New(context.Background())
		var events []string
		var mu sync.Mutex
		log := func(e string) { mu.Lock(); events = append(events, e); mu.Unlock() }
		s.Defer(t.Context(), func(context.Context) error { log("release"); return nil })
		done, err := s.Track()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			<-s.Context().Done()
			log("work ended")
			done()
		}()
		s.Close(t.Context())
		if !slices.Equal(events, []string{"work ended", "release"}) {
			t.Fatalf("events = %v", events)
		}
	})

	t.Run("CloseWaitsOnlyUntilDeadlineThenStillReleases", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := scope.New(context.Background())
			stuck := make(chan struct{})
			s.Go(func(context.Context) { <-stuck }) // ignores cancellation
			released := false
			var releaseCtxErr error
			s.Defer(t.Context(), func(ctx context.Context) error {
				released = true
				releaseCtxErr = ctx.Err()
				return nil
			})
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()
			err := s.Close(ctx)
			close(stuck)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Close = %v, want it to report the deadline", err)
			}
			if !released {
				t.Fatal("release did not run after the deadline")
			}
			if !errors.Is(releaseCtxErr, context.DeadlineExceeded) {
				t.Fatalf("release ctx err = %v, want the caller's deadline to carry over", releaseCtxErr)
			}
		})
	})

	t.Run("WorkAndDeferAfterCloseAreRefused", func(t *testing.T) {
		s := scope.New(context.Background())
		s.Close(t.Context())
		if err := s.Go(func(context.Context) { t.Error("started on closed scope") }); !errors.Is(err, scope.ErrClosed) {
			t.Fatalf("Go = %v, want ErrClosed", err)
		}
		if _, err := s.Track(); !errors.Is(err, scope.ErrClosed) {
			t.Fatalf("Track = %v, want ErrClosed", err)
		}
		released := false
		err := s.Defer(t.Context(), func(context.Context) error { released = true; return nil })
		if !errors.Is(err, scope.ErrClosed) || !released {
			t.Fatalf("Defer = %v, released = %v; want ErrClosed and an immediate release", err, released)
		}
		if _, err := s.Child(); !errors.Is(err, scope.ErrClosed) {
			t.Fatalf("Child = %v, want ErrClosed", err)
		}
	})

	t.Run("ParentClosesChildrenInOrder", func(t *testing.T) {
		parent := scope.New(context.Background())
		var order []string
		parent.Defer(t.Context(), func(context.Context) error { order = append(order, "parent first"); return nil })
		child, err := parent.Child()
		if err != nil {
			t.Fatal(err)
		}
		child.Defer(t.Context(), func(context.Context) error { order = append(order, "child"); return nil })
		grandchild, _ := child.Child()
		grandchild.Defer(t.Context(), func(context.Context) error { order = append(order, "grandchild"); return nil })
		parent.Defer(t.Context(), func(context.Context) error { order = append(order, "parent last"); return nil })
		parent.Close(t.Context())
		want := []string{"parent last", "grandchild", "child", "parent first"}
		if !slices.Equal(order, want) {
			t.Fatalf("order = %v, want %v", order, want)
		}
		if child.Context().Err() == nil {
			t.Fatal("child context still alive after parent close")
		}
	})

	t.Run("ChildClosedEarlyIsNotClosedAgain", func(t *testing.T) {
		parent := scope.New(context.Background())
		child, _ := parent.Child()
		n := 0
		child.Defer(t.Context(), func(context.Context) error { n++; return nil })
		child.Close(t.Context())
		parent.Close(t.Context())
		if n != 1 {
			t.Fatalf("child release ran %d times", n)
		}
	})
}

func TestConcurrentChildrenCloseIndependently(t *testing.T) {
	parent := scope.New(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	closedBy := map[int]int{}
	for i := range 16 {
		wg.Go(func() {
			child, err := parent.Child()
			if err != nil {
				t.Error(err)
				return
			}
			child.Defer(t.Context(), func(context.Context) error {
				mu.Lock()
				closedBy[i]++
				mu.Unlock()
				return nil
			})
			if i%2 == 0 {
				child.Close(t.Context())
			}
		})
	}
	wg.Wait()
	parent.Close(t.Context())
	for i := range 16 {
		if closedBy[i] != 1 {
			t.Fatalf("child %d released %d times, want once", i, closedBy[i])
		}
	}
}

func TestDrain(t *testing.T) {
	t.Run("WaitsWithoutCancellingAndRefusesNewWork", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := scope.New(context.Background())
			done, _ := s.Track()
			finished := make(chan struct{})
			go func() {
				<-finished
				done()
			}()
			drained := make(chan error, 1)
			go func() { drained <- s.Drain(t.Context()) }()
			synctest.Wait() // the drain began and waits for the work in progress
			// New work is refused while draining; the work in progress is not cancelled.
			if _, err := s.Track(); !errors.Is(err, scope.ErrClosed) {
				t.Fatalf("Track while draining = %v, want ErrClosed", err)
			}
			if s.Context().Err() != nil {
				t.Fatal("draining cancelled the scope's context")
			}
			select {
			case err := <-drained:
				t.Fatalf("Drain returned %v before the work in progress ended", err)
			default:
			}
			close(finished)
			if err := <-drained; err != nil {
				t.Fatalf("Drain = %v", err)
			}
			released := false
			s.Defer(t.Context(), func(context.Context) error { released = true; return nil })
			if err := s.Close(t.Context()); err != nil || !released {
				t.Fatalf("Close after Drain = %v, released %v", err, released)
			}
		})
	})
	t.Run("GivesUpAtTheDeadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := scope.New(context.Background())
			done, _ := s.Track()
			defer done()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()
			if err := s.Drain(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Drain = %v, want the deadline", err)
			}
			done()
			s.Close(t.Context())
		})
	})
}

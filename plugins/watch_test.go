//go:build unix

package plugins

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCallWatch: a call armed with its timeout is cancelled with errCallTimeout
// once the timeout has passed (not before); the scope's end cancels the calls in
// flight, and any added later, with the scope's cause; a call removed is left alone.
func TestCallWatch(t *testing.T) {
	scopeCtx, endScope := context.WithCancelCause(context.Background())
	w := newCallWatch(scopeCtx, 200*time.Millisecond)

	call := func() (context.Context, *watchedCall) {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		return ctx, w.add(cancel)
	}
	slow, slowC := call()
	start := time.Now()
	w.arm(slowC)
	unarmed, _ := call() // authorizing still: no timeout yet
	done, doneC := call()
	w.arm(doneC)
	w.remove(doneC)

	<-slow.Done()
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("the call was cancelled after %v, before its timeout", waited)
	}
	if !errors.Is(context.Cause(slow), errCallTimeout) {
		t.Errorf("cause %v, want the call timeout", context.Cause(slow))
	}
	if unarmed.Err() != nil || done.Err() != nil {
		t.Fatalf("an unarmed call (%v) or a removed one (%v) was cancelled", unarmed.Err(), done.Err())
	}

	closed := errors.New("scope closed")
	endScope(closed)
	<-unarmed.Done()
	if !errors.Is(context.Cause(unarmed), closed) {
		t.Errorf("cause %v, want the scope's", context.Cause(unarmed))
	}
	late, _ := call()
	if !errors.Is(context.Cause(late), closed) {
		t.Errorf("a call added after the scope ended: cause %v, want the scope's", context.Cause(late))
	}
	if done.Err() != nil {
		t.Error("a removed call was cancelled by the scope's end")
	}
}

package cli

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestShutdownStepsShareOneDeadline: the steps of a shutdown get one deadline,
// closeTimeout after the interruption, however late each step begins; a command
// that ends by itself starts the clock at its first step.
func TestShutdownStepsShareOneDeadline(t *testing.T) {
	t.Run("Interrupted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := &app{}
			ctx, interrupt := context.WithCancel(t.Context())
			defer context.AfterFunc(ctx, a.beginClose)()
			interrupt()
			synctest.Wait()
			want := time.Now().Add(closeTimeout)
			for _, after := range []time.Duration{4 * time.Second, 5 * time.Second} {
				time.Sleep(after) // the step before took this long
				step, cancel := a.closeContext(ctx)
				if d, _ := step.Deadline(); !d.Equal(want) {
					t.Errorf("a step's deadline is %v after the interruption, want %v", d.Sub(want.Add(-closeTimeout)), closeTimeout)
				}
				if step.Err() != nil {
					t.Errorf("a step's context ended with the command's: %v", step.Err())
				}
				cancel()
			}
		})
	})
	t.Run("EndedByItself", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := &app{}
			time.Sleep(time.Minute) // the command ran
			want := time.Now().Add(closeTimeout)
			step, cancel := a.closeContext(t.Context())
			defer cancel()
			time.Sleep(3 * time.Second)
			next, cancel2 := a.closeContext(t.Context())
			defer cancel2()
			for _, c := range []context.Context{step, next} {
				if d, _ := c.Deadline(); !d.Equal(want) {
					t.Errorf("deadline %v, want %v", d, want)
				}
			}
		})
	})
}

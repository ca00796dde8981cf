//go:build unix

package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// stressDuration runs TestStress for that long instead of a few rounds (make stress).
var stressDuration = flag.Duration("stress.duration", 0, "run TestStress this long (0: a few rounds, as make test does)")

// TestStress runs many Locations at once in one server, each used by several
// clients that activate and deactivate it, prepare and settle calls (with
// progress, and with a permission ask their own watcher answers), restart its
// plugin and watch its sources, all concurrently. Every settlement returned must be
// the right answer; the only failures allowed are those a concurrent deactivation
// or restart explains. Under -race it checks the lock discipline of the server,
// location and registry packages.
func TestStress(t *testing.T) {
	f := start(t, nil)
	const locations, clientsPerLocation = 4, 2
	rounds, deadline := 6, time.Time{}
	if *stressDuration > 0 {
		rounds, deadline = 1<<30, time.Now().Add(*stressDuration)
	}
	dirs := make([]string, locations)
	for i := range dirs {
		dirs[i] = workspace(t)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		settled  int
		excused  = map[string]int{}
		failures []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	// excuse counts a failure a concurrent deactivation or restart explains.
	excuse := func(err error) bool {
		var ce *client.CallError
		kind := ""
		switch {
		case errors.Is(err, client.ErrNotFound):
			kind = "not found (deactivated meanwhile)"
		case errors.As(err, &ce) && ce.Kind == client.Interrupted:
			kind = "interrupted (deactivated or restarted meanwhile)"
		case errors.Is(err, client.ErrActivation) && strings.Contains(err.Error(), "the supervisor is stopped"):
			kind = "restart failed (deactivated meanwhile)"
		case err == errUnavailable:
			kind = "unavailable (deactivated or restarted since prepared)"
		default:
			return false
		}
		mu.Lock()
		excused[kind]++
		mu.Unlock()
		return true
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for li, dir := range dirs {
		for k := range clientsPerLocation {
			c := f.dial(t)
			asks, err := c.WatchAsks(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { // answers this client's asks, once each
				for {
					ev, err := asks.Next()
					if err != nil {
						return
					}
					if ev.Asked != nil {
						if err := c.AnswerAsk(ctx, ev.Asked.ID, permission.Answer{Reply: permission.Once}); err != nil && !errors.Is(err, client.ErrNotFound) && ctx.Err() == nil {
							fail("answer ask: %v", err)
						}
					}
				}
			})
			wg.Go(func() {
				defer asks.Close()
				for r := 0; r < rounds && (deadline.IsZero() || time.Now().Before(deadline)); r++ {
					stressRound(ctx, c, dir, fmt.Sprintf("l%d-c%d-r%d", li, k, r), r, k, fail, excuse, func() {
						mu.Lock()
						settled++
						mu.Unlock()
					})
				}
			})
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d settlements checked; failures excused by a concurrent deactivation or restart: %v", settled, excused)
	for _, msg := range failures[:min(len(failures), 10)] {
		t.Error(msg)
	}
	if len(failures) > 10 {
		t.Errorf("and %d more failures", len(failures)-10)
	}
	if settled == 0 {
		t.Error("no call settled")
	}
}

// errUnavailable stands for a settlement saying its tool is no longer available.
var errUnavailable = errors.New("unavailable")

// stressRound is one round of one client on one Location.
func stressRound(ctx context.Context, c *client.Client, dir, id string, r, k int, fail func(string, ...any), excuse func(error) bool, ok func()) {
	if ctx.Err() != nil {
		return
	}
	loc, _, err := c.ActivateLocation(ctx, dir)
	if err != nil {
		fail("%s: activate: %v", id, err)
		return
	}
	if w, err := c.WatchSources(ctx, loc.ID); err == nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				if _, err := w.Next(); err != nil {
					return
				}
			}
		}()
		defer func() { w.Close(); <-done }()
	} else if !excuse(err) {
		fail("%s: watch sources: %v", id, err)
	}
	req, err := c.PrepareRequest(ctx, loc.ID, "")
	if err != nil {
		if !excuse(err) {
			fail("%s: prepare: %v", id, err)
		}
		return
	}
	calls := []struct {
		name, input, want string
		progress          bool
	}{
		{"echo", fmt.Sprintf(`{"text": %q}`, id), id, false},
		{"progress", `{"n": 3}`, "done", true},
		{"guarded", `{}`, "granted", false},
	}
	for i, call := range calls {
		var events int
		var progress func(sdk.Progress)
		if call.progress {
			progress = func(sdk.Progress) { events++ }
		}
		s, err := c.Settle(ctx, req.ID, client.Call{Name: call.name, Input: json.RawMessage(call.input), Invocation: sdk.Invocation{SessionID: id, Agent: "stress", AssistantMessageID: "m", ToolCallID: fmt.Sprint(id, "-", i)}}, progress)
		switch {
		case err != nil:
			if !excuse(err) {
				fail("%s: %s: %v", id, call.name, err)
			}
		case s.Outcome == registry.Unavailable:
			excuse(errUnavailable)
		case s.Outcome != registry.Completed || s.Text() != call.want:
			fail("%s: %s settled %s %q, want completed %q", id, call.name, s.Outcome, s.Text(), call.want)
		case call.progress && events == 0:
			fail("%s: %s reported no progress", id, call.name)
		default:
			ok()
		}
	}
	if r%3 == 1 && k == 0 {
		if _, err := c.RestartSource(ctx, loc.ID, "test"); err != nil && !excuse(err) {
			fail("%s: restart: %v", id, err)
		}
	}
	if r%2 == 1 {
		if err := c.DeactivateLocation(ctx, loc.ID); err != nil && !excuse(err) {
			fail("%s: deactivate: %v", id, err)
		}
	}
}

package supervise

import (
	"testing"
	"time"
)

func TestTrackerSpendsTheBudgetWithinItsWindow(t *testing.T) {
	b := Budget{Crashes: 2, Window: time.Minute, MinBackoff: 100 * time.Millisecond, MaxBackoff: 150 * time.Millisecond}
	var tr tracker
	now := time.Unix(0, 0)
	if d, n, ok := tr.crash(b, now); !ok || n != 1 || d != 100*time.Millisecond {
		t.Fatalf("first crash: %v %d %v", d, n, ok)
	}
	if d, _, ok := tr.crash(b, now.Add(time.Second)); !ok || d != 150*time.Millisecond {
		t.Fatalf("second crash: backoff %v (want doubled, capped), ok %v", d, ok)
	}
	if _, n, ok := tr.crash(b, now.Add(2*time.Second)); ok || n != 3 {
		t.Fatalf("third crash within the window: n %d ok %v, want the budget spent", n, ok)
	}
	// Crashes older than the window no longer count.
	var later tracker
	later.crash(b, now)
	later.crash(b, now.Add(time.Second))
	if _, n, ok := later.crash(b, now.Add(2*time.Minute)); !ok || n != 1 {
		t.Fatalf("after the window: n %d ok %v", n, ok)
	}
	later.reset()
	if _, n, _ := later.crash(b, now.Add(2*time.Minute)); n != 1 {
		t.Fatalf("after reset: n %d", n)
	}
}

func TestBudgetDefaults(t *testing.T) {
	if got := (Budget{}).WithDefaults(); got != (Budget{Crashes: 5, Window: time.Minute, MinBackoff: 100 * time.Millisecond, MaxBackoff: 5 * time.Second}) {
		t.Fatalf("defaults %+v", got)
	}
}

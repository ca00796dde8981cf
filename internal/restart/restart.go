// Package restart holds what every supervised source (plugins, MCP servers) needs to
// decide about restarts: the crash budget, its backoff, and the states a supervisor
// reports.
package restart

import "time"

// Budget limits restarts after crashes: at most Crashes crashes within Window; past
// that the source stays failed. Backoff doubles from MinBackoff up to MaxBackoff.
type Budget struct {
	Crashes    int           // default 5
	Window     time.Duration // default 1m
	MinBackoff time.Duration // default 100ms
	MaxBackoff time.Duration // default 5s
}

// WithDefaults returns b with zero fields replaced by the defaults.
func (b Budget) WithDefaults() Budget {
	if b.Crashes <= 0 {
		b.Crashes = 5
	}
	if b.Window <= 0 {
		b.Window = time.Minute
	}
	if b.MinBackoff <= 0 {
		b.MinBackoff = 100 * time.Millisecond
	}
	if b.MaxBackoff <= 0 {
		b.MaxBackoff = 5 * time.Second
	}
	return b
}

// Tracker counts crashes against a Budget. It is not safe for concurrent use: its
// owner guards it with its own lock.
type Tracker struct {
	crashes []time.Time
}

// Crash records a crash at now. It returns the backoff before the next start and
// true, or false when this crash spends the budget; n is the number of crashes
// within the window, this one included.
func (t *Tracker) Crash(b Budget, now time.Time) (backoff time.Duration, n int, ok bool) {
	recent := t.crashes[:0]
	for _, c := range t.crashes {
		if now.Sub(c) < b.Window {
			recent = append(recent, c)
		}
	}
	t.crashes = append(recent, now)
	n = len(t.crashes)
	if n > b.Crashes {
		return 0, n, false
	}
	return min(b.MinBackoff<<(n-1), b.MaxBackoff), n, true
}

// Reset forgets every crash (a deliberate reload starts afresh).
func (t *Tracker) Reset() { t.crashes = nil }

// State is a supervised source's condition.
type State string

const (
	// Starting: a first generation, or one asked for by hand, is being started.
	Starting State = "starting"
	// Running: a generation is serving.
	Running State = "running"
	// Restarting: the last generation crashed; a new one is being started.
	Restarting State = "restarting"
	// Failed: the crash budget is spent; the source stays down until restarted by
	// hand (or reloaded).
	Failed State = "failed"
	// Stopped: the supervisor's scope closed.
	Stopped State = "stopped"
)

package supervise

import "time"

// Budget limits restarts after crashes: at most Crashes crashes within Window; past
// that the program stays Failed. Backoff doubles from MinBackoff up to MaxBackoff.
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

// tracker counts crashes against a Budget. It is not safe for concurrent use: the
// Supervisor guards it with its lock.
type tracker struct {
	crashes []time.Time
}

// crash records a crash at now. It returns the backoff before the next start and
// true, or false when this crash spends the budget; n is the number of crashes
// within the window, this one included.
func (t *tracker) crash(b Budget, now time.Time) (backoff time.Duration, n int, ok bool) {
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

// reset forgets every crash (a deliberate reload starts afresh).
func (t *tracker) reset() { t.crashes = nil }

// State is a supervised program's condition.
type State string

const (
	// Starting: a first generation is being started.
	Starting State = "starting"
	// Running: a generation is serving. The last error may still be set: a reload
	// that failed while the serving generation went on.
	Running State = "running"
	// Restarting: the last generation crashed, or the first did not start; the next
	// is being started under the crash budget. Its tools stay advertised (held).
	Restarting State = "restarting"
	// Failed: the crash budget is spent; the program stays down, its tools no longer
	// advertised, until reloaded (or restarted) by hand.
	Failed State = "failed"
	// Stopped: the supervisor's scope closed, or the serving generation was stopped
	// on purpose.
	Stopped State = "stopped"
)

package location

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestReloadTimer: one change is read once the files are quiet for the debounce;
// changes that never go quiet are read every reloadMaxDelay all the same.
func TestReloadTimer(t *testing.T) {
	// fires returns when t fires after a change every gap (never, when gap is 0),
	// measured from the first change, giving up after limit.
	fires := func(gap, limit time.Duration) (time.Duration, bool) {
		var rt reloadTimer
		start := time.Now()
		rt.changed()
		for time.Since(start) < limit {
			var next <-chan time.Time
			if gap > 0 {
				next = time.After(gap)
			}
			select {
			case <-rt.quiet:
				return time.Since(start), true
			case <-rt.due:
				return time.Since(start), true
			case <-next:
				rt.changed()
			}
		}
		return 0, false
	}
	synctest.Test(t, func(t *testing.T) {
		if at, ok := fires(0, time.Minute); !ok || at != reloadDebounce {
			t.Errorf("one change read after %s (fired: %v), want after the debounce %s", at, ok, reloadDebounce)
		}
		if at, ok := fires(reloadDebounce/2, time.Minute); !ok || at > reloadMaxDelay {
			t.Errorf("changes every %s read after %s (fired: %v), want within %s", reloadDebounce/2, at, ok, reloadMaxDelay)
		}
	})
}

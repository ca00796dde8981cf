package mcp

import "testing"

// TestACallHasATimeLimitByDefault: a server configured without a timeout still
// cannot hold a call for ever (a hostile one that never answers did, until the
// caller gave up): its calls get DefaultCallTimeout, as a plugin's do.
func TestACallHasATimeLimitByDefault(t *testing.T) {
	if got := (Config{}).withDefaults().Timeout; got != DefaultCallTimeout {
		t.Errorf("a call's timeout without one configured = %v, want %v", got, DefaultCallTimeout)
	}
	if got := (Config{Timeout: 5}).withDefaults().Timeout; got != 5 {
		t.Errorf("a configured timeout became %v", got)
	}
}

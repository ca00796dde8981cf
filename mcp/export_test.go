package mcp

import (
	"net/http"
	"time"

	"golang.org/x/oauth2"
)

// StoredTokenSource is the token source a remote session of cfg uses, for the
// token store's tests.
func StoredTokenSource(cfg Config, hc *http.Client) (oauth2.TokenSource, error) {
	return storedTokenSource(cfg.withDefaults(), hc)
}

// WithNotReadingGrace returns cfg with the grace a server that does not read is
// given (notReadingGrace) set to d, so that tests need not wait for it.
func WithNotReadingGrace(cfg Config, d time.Duration) Config {
	cfg.notReadingGrace = d
	return cfg
}

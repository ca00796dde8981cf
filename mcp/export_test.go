package mcp

import (
	"net/http"

	"golang.org/x/oauth2"
)

// StoredTokenSource is the token source a remote session of cfg uses, for the
// token store's tests.
func StoredTokenSource(cfg Config, hc *http.Client) (oauth2.TokenSource, error) {
	return storedTokenSource(cfg.withDefaults(), hc)
}

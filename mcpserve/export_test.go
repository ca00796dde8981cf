package mcpserve

import (
	"context"
	"net/http"
)

// WaitSessions waits until h, a Handler of a Server, has n live sessions, or ctx
// ends (its error).
func WaitSessions(ctx context.Context, h http.Handler, n int) error {
	l := h.(*httpHandler).limit
	for {
		live, changed := l.sessions()
		if live == n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SDKSessions counts the go-sdk's sessions of s, stdio and HTTP.
func SDKSessions(s *Server) int {
	n := 0
	for range s.mcp.Sessions() {
		n++
	}
	return n
}

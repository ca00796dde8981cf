package mcpserve

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/loopback"
)

// DefaultSessionIdleTimeout is how long an HTTP session may go without a request
// before the Server closes it (HTTPOptions.SessionIdleTimeout).
const DefaultSessionIdleTimeout = 10 * time.Minute

// DefaultWriteTimeout bounds how long one write to an HTTP client may wait for it
// to read (HTTPOptions.WriteTimeout).
const DefaultWriteTimeout = 10 * time.Second

// DefaultMaxSessions bounds the live HTTP sessions of one Handler
// (HTTPOptions.MaxSessions).
const DefaultMaxSessions = 64

// DefaultMaxPosts bounds the POSTs one Handler serves at once
// (HTTPOptions.MaxPosts): the host's calls (DefaultMaxCalls) and 64 more.
const DefaultMaxPosts = DefaultMaxCalls + 64

// HTTPOptions configure Handler.
type HTTPOptions struct {
	// Token, if set, must come with every request as "Authorization: Bearer
	// <Token>" (compared in constant time); other requests get 401.
	Token string
	// MaxRequestBytes bounds a request body (default Options.MaxMessageBytes);
	// larger ones get 413.
	MaxRequestBytes int64
	// TokenFile names where the token is, for the 401's explanation, or "".
	TokenFile string
	// SessionIdleTimeout closes a session that has had no POST in flight for this
	// long (default DefaultSessionIdleTimeout): its calls are over, its streams
	// end, and its id then gets 404, on which a client starts a new session. An
	// open GET stream does not keep a session alive; a client that only listens
	// sends a ping now and then.
	SessionIdleTimeout time.Duration
	// MaxSessions bounds the sessions live at once (default DefaultMaxSessions).
	// An initialize past it is refused, not served by closing another session: a
	// session ends only by its client (DELETE) or by idling, so no client can end
	// another's. The refusal is 503 with a Retry-After header and a JSON-RPC error
	// (code -32000, data {"limit": MaxSessions}) naming the limit.
	MaxSessions int
	// WriteTimeout bounds how long one write of a response or stream (an SSE
	// event, its flush) may wait for the client to read (default
	// DefaultWriteTimeout). Past it the connection is closed, the request or
	// stream ends and what is sent to it later is dropped: the go-sdk writes a
	// session's messages in the sender's goroutine, so without it a client that
	// stops reading its GET stream holds up the log and list_changed messages of
	// every session.
	WriteTimeout time.Duration
	// MaxPosts bounds the POSTs served at once, every session's together, from
	// before the body is read to the end of the response (a call's POST lasts as
	// long as the call); default DefaultMaxPosts. A POST past it is refused
	// unread: 503 with Retry-After 1 and a JSON-RPC error (code -32000, data
	// {"limit": MaxPosts, "scope": "posts"}) naming the limit.
	MaxPosts int
}

// Handler returns the streamable HTTP transport of the Server (every path), for a
// listener on loopback. Its sessions end when their client DELETEs them, when they
// idle (HTTPOptions.SessionIdleTimeout) or when the Server closes; at most
// HTTPOptions.MaxSessions are live at once, and the POST that makes one may carry
// 64 KiB; at most HTTPOptions.MaxPosts POSTs are served at once. Against DNS rebinding and cross-site requests it refuses (403) a Host
// header that is not a loopback name or address, and an Origin header that is not
// http(s) on a loopback name or address; then it checks the token. A refused
// request (403, 401, 404) closes its connection.
//
// The token is static: there is no OAuth authorization server to discover. A
// request without it gets 401 whose WWW-Authenticate header (error="invalid_token")
// and body say so and where the token is, and every /.well-known/ path (where
// OAuth clients look for metadata before registering) is 404, so a client does not
// start a registration that cannot succeed.
func (s *Server) Handler(o HTTPOptions) http.Handler {
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = int64(s.opts.MaxMessageBytes)
	}
	if o.SessionIdleTimeout <= 0 {
		o.SessionIdleTimeout = DefaultSessionIdleTimeout
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxPosts <= 0 {
		o.MaxPosts = DefaultMaxPosts
	}
	posts := make(chan struct{}, o.MaxPosts)
	h := newSessionLimit(s, o.MaxSessions, o.SessionIdleTimeout,
		gomcp.NewStreamableHTTPHandler(func(*http.Request) *gomcp.Server { return s.mcp },
			&gomcp.StreamableHTTPOptions{MaxRequestBodyBytes: o.MaxRequestBytes, SessionTimeout: o.SessionIdleTimeout}))
	want := []byte("Bearer " + o.Token)
	tokenHint := "send Authorization: Bearer TOKEN with the static token from toolhost mcp's token file"
	if o.TokenFile != "" {
		tokenHint += " " + o.TokenFile
	}
	tokenHint = strings.ReplaceAll(tokenHint, `"`, "'") // it goes into a quoted header parameter
	return &httpHandler{limit: h, serve: func(w http.ResponseWriter, r *http.Request) {
		// A refused request closes its connection: a client without the token, or
		// a page elsewhere, holds no idle connection (and its goroutine) open.
		refuse := func(code int, msg string) {
			w.Header().Set("Connection", "close")
			http.Error(w, msg, code)
		}
		if !loopback.Host(r.Host) {
			refuse(http.StatusForbidden, "forbidden: Host must be a loopback address (DNS rebinding protection)")
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !loopback.Origin(origin) {
			refuse(http.StatusForbidden, "forbidden: Origin must be a loopback address")
			return
		}
		if strings.HasPrefix(r.URL.Path, "/.well-known/") {
			refuse(http.StatusNotFound, "not found: toolhost mcp has no OAuth authorization server; "+tokenHint)
			return
		}
		if o.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolhost", error="invalid_token", error_description="`+tokenHint+`"`)
			refuse(http.StatusUnauthorized, "unauthorized: "+tokenHint+"; toolhost mcp has no OAuth authorization server to register with")
			return
		}
		if id := r.Header.Get("Mcp-Session-Id"); r.Method == http.MethodDelete && id != "" {
			s.endSession(id) // the go-sdk closes a session once its calls have returned
		}
		if r.Method == http.MethodPost {
			select {
			case posts <- struct{}{}:
				defer func() { <-posts }()
			default:
				refusePost(w, o.MaxPosts)
				return
			}
		}
		dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: o.WriteTimeout}
		defer dw.rc.SetWriteDeadline(time.Time{}) // what net/http writes after the handler has its own time
		h.ServeHTTP(dw, r)
	}}
}

// refusePost answers a POST past HTTPOptions.MaxPosts, unread: 503, with a
// JSON-RPC error (id null) naming the limit. Its connection is closed, since its
// body is not read.
func refusePost(w http.ResponseWriter, limit int) {
	msg := fmt.Sprintf("toolhost mcp serves at most %d POSTs at once, every session's together, and all are in flight; retry once one has been answered", limit)
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": codeLimit, "message": msg, "data": map[string]any{"limit": limit, "scope": "posts"}},
	})
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
}

// deadlineWriter gives every write and flush of a response the write timeout.
// net/http closes the connection when a write fails, which ends the request's
// context, so the go-sdk's stream ends with it.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush, the go-sdk's flush, calls.
func (w *deadlineWriter) FlushError() error {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.rc.Flush()
}

// Flush is http.Flusher's.
func (w *deadlineWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the ResponseWriter.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// httpHandler is what Handler returns: the checks (serve), then the session limit.
type httpHandler struct {
	limit *sessionLimit
	serve http.HandlerFunc
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serve(w, r) }

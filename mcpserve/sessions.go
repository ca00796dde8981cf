package mcpserve

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionLimit admits at most max live HTTP sessions: a POST without an
// Mcp-Session-Id (the one that makes a session) takes a slot before the go-sdk
// sees it, and gives it back when no session came of it, or when the session it
// made ends. Slots are taken before the session exists, so concurrent initializes
// cannot overshoot.
type sessionLimit struct {
	s       *Server
	max     int
	idle    time.Duration
	handler http.Handler // the go-sdk's

	mu      sync.Mutex
	live    int
	changed chan struct{} // closed and replaced whenever live changes
}

func newSessionLimit(s *Server, limit int, idle time.Duration, h http.Handler) *sessionLimit {
	return &sessionLimit{s: s, max: limit, idle: idle, handler: h, changed: make(chan struct{})}
}

// maxInitializeBytes bounds the body of a POST that makes a session (its
// initialize; past it 413): the session keeps the initialize's params, client
// capabilities with their "experimental" JSON included, for its whole life, and an
// initialize is a few hundred bytes.
const maxInitializeBytes = 64 << 10

// sessionIDHeader is the streamable HTTP transport's session header.
const sessionIDHeader = "Mcp-Session-Id"

func (l *sessionLimit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.Header.Get(sessionIDHeader) != "" {
		l.handler.ServeHTTP(w, r)
		return
	}
	if !l.acquire() {
		l.refuse(w)
		return
	}
	var made *gomcp.ServerSession
	defer func() {
		if made == nil { // none made, it has ended already, or the handler panicked
			l.release()
		}
	}()
	r.Body = http.MaxBytesReader(w, r.Body, maxInitializeBytes)
	l.handler.ServeHTTP(w, r)
	// The go-sdk has set the header of the session it made (the header map is
	// still readable once the response is written).
	if id := w.Header().Get(sessionIDHeader); id != "" {
		for ss := range l.s.mcp.Sessions() {
			if ss.ID() == id {
				made = ss
				break
			}
		}
	}
	if made == nil {
		return
	}
	l.s.done.Add(1)
	go func() {
		defer l.s.done.Done()
		_ = made.Wait()
		l.release()
	}()
}

func (l *sessionLimit) acquire() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live >= l.max {
		return false
	}
	l.live++
	close(l.changed)
	l.changed = make(chan struct{})
	return true
}

func (l *sessionLimit) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live--
	close(l.changed)
	l.changed = make(chan struct{})
}

// sessions returns the live sessions and a channel closed when that changes.
func (l *sessionLimit) sessions() (int, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live, l.changed
}

// refuse answers an initialize past the limit: 503, retry once a session may have
// idled out, with a JSON-RPC error (id null: the body is not read).
func (l *sessionLimit) refuse(w http.ResponseWriter) {
	msg := fmt.Sprintf("toolhost mcp serves at most %d sessions at once and all are live; end sessions you no longer use "+
		"(DELETE with their Mcp-Session-Id), or retry once one has been idle for %s and is closed", l.max, l.idle)
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32000, "message": msg, "data": map[string]any{"limit": l.max}},
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(l.idle/time.Second))))
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
}

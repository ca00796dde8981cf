package mcpserve

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
)

// DefaultChangeDelay is how long the Server waits after a registry change before it
// recomputes the tool set, so a reload's register-then-release is one change.
const DefaultChangeDelay = 50 * time.Millisecond

// DefaultMaxMessageBytes bounds one inbound message on stdio.
const DefaultMaxMessageBytes = 8 << 20

// DefaultMaxCallsPerSession bounds the tools/call one client session has in flight
// (Options.MaxCallsPerSession).
const DefaultMaxCallsPerSession = 64

// DefaultMaxCalls bounds the tools/call all client sessions of a Server have in
// flight together (Options.MaxCalls): four sessions' worth of
// DefaultMaxCallsPerSession, where 64 HTTP sessions of 64 calls each could hold
// 4096.
const DefaultMaxCalls = 4 * DefaultMaxCallsPerSession

// DefaultStdioWriteTimeout is how long a write to a stdio client may wait for it
// to read (Options.StdioWriteTimeout).
const DefaultStdioWriteTimeout = 30 * time.Second

// Options configure a Server.
type Options struct {
	// Registry holds the Locations' placements. Required.
	Registry *registry.Registry
	// Logger receives the server's own messages. Default: discard.
	Logger hclog.Logger
	// Version is the version the server reports in initialize. Default "(devel)".
	Version string
	// ChangeDelay is the quiet period after a registry change (default
	// DefaultChangeDelay).
	ChangeDelay time.Duration
	// MaxMessageBytes bounds one inbound message on stdio (default
	// DefaultMaxMessageBytes); a longer line is discarded and answered with an
	// error, and the session carries on.
	MaxMessageBytes int
	// MaxCallsPerSession bounds the tools/call one session has in flight, waiting
	// for a Hold or a starting source included (default
	// DefaultMaxCallsPerSession). A call past it is refused at once, never queued:
	// JSON-RPC error -32000 naming the limit (data {"limit": MaxCallsPerSession}).
	MaxCallsPerSession int
	// MaxCalls bounds the tools/call all sessions have in flight together, stdio
	// and HTTP, counted as MaxCallsPerSession is (default DefaultMaxCalls). A call
	// past it is refused at once, never queued: JSON-RPC error -32000 naming the
	// limit (data {"limit": MaxCalls, "scope": "host"}). A session's own limit is
	// checked first.
	MaxCalls int
	// StdioWriteTimeout bounds how long one write to a stdio client (ServeStdio's
	// w) may wait for the client to read (default DefaultStdioWriteTimeout). Past
	// it the client is taken to be gone: the session ends with a
	// *NotReadingError, its calls interrupted.
	StdioWriteTimeout time.Duration
	// Roots, if set, is called with the client's roots that are file:// directories
	// (absolute paths, sorted), after a session initializes and whenever its client
	// sends notifications/roots/list_changed; the caller activates and adds what is
	// new and removes what is gone (toolhost mcp with no --location). It is called
	// from one goroutine at a time.
	Roots func(dirs []string)
}

// Server is an MCP server over a set of Locations. Create it with New, add
// Locations with Add, serve with ServeStdio or Handler, and end it with Close. Its
// methods are safe for concurrent use.
type Server struct {
	opts Options
	log  hclog.Logger
	mcp  *gomcp.Server

	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup
	logs   chan logEntry

	mu       sync.Mutex
	locs     map[string]*location.Location
	cur      *view
	mirrored map[string]string // served name → key of the tool the SDK holds
	sessions map[*gomcp.ServerSession]*session
	calls    map[callKey]*gomcp.ServerSession
	inFlight int // tools/call in flight, every session's (Options.MaxCalls)
	// rootsAgain holds the sessions with a roots/list in flight: true when their
	// roots changed since it was sent.
	rootsAgain map[*gomcp.ServerSession]bool
	rootsMu    sync.Mutex // one Options.Roots call at a time

	holdMu   sync.Mutex
	holds    int           // Holds not yet released
	released chan struct{} // closed when the last Hold is released; nil when none is
}

// session is what the Server keeps per client session.
type session struct {
	// ctx ends when the session ends, its client DELETEs it, or the Server closes:
	// its calls are interrupted.
	ctx    context.Context
	cancel context.CancelFunc
	id     string
	agent  string
	view   *view // the tool set the client last listed; nil before it listed
	calls  int   // tools/call in flight
}

type callKey struct{ session, call string }

// view is one served tool set: the Requests it was made of and every served tool.
type view struct {
	locs   []string // Location ids, sorted
	qs     []*registry.Request
	tools  []*gomcp.Tool // sorted by name
	byName map[string]served
}

// served is one served tool: the Request it settles on and its registered name.
type served struct {
	q    *registry.Request
	name string
}

// New returns a Server with no Locations. It watches the registry until Close.
func New(opts Options) (*Server, error) {
	if opts.Registry == nil {
		return nil, errors.New("mcpserve: Options.Registry is required")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Version == "" {
		opts.Version = "(devel)"
	}
	if opts.ChangeDelay <= 0 {
		opts.ChangeDelay = DefaultChangeDelay
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MaxCallsPerSession <= 0 {
		opts.MaxCallsPerSession = DefaultMaxCallsPerSession
	}
	if opts.StdioWriteTimeout <= 0 {
		opts.StdioWriteTimeout = DefaultStdioWriteTimeout
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = DefaultMaxCalls
	}
	s := &Server{
		opts: opts, log: opts.Logger,
		logs:     make(chan logEntry, logBuffer),
		locs:     map[string]*location.Location{},
		mirrored: map[string]string{},
		sessions: map[*gomcp.ServerSession]*session{},
		calls:    map[callKey]*gomcp.ServerSession{},

		rootsAgain: map[*gomcp.ServerSession]bool{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mcp = gomcp.NewServer(&gomcp.Implementation{Name: "toolhost", Title: "toolhost", Version: opts.Version}, &gomcp.ServerOptions{
		Capabilities: &gomcp.ServerCapabilities{
			Tools:   &gomcp.ToolCapabilities{ListChanged: true},
			Logging: &gomcp.LoggingCapabilities{},
		},
		Instructions: "Tools of the toolhost Locations (workspaces) this server was started with.",
		// Permission asks are elicitations sent while a call runs; 2026-07-28 allows
		// server requests only as multi round-trip results (SEP-2322), which a call
		// blocked in the middle of its executor cannot give.
		SupportedProtocolVersions: []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"},
		InitializedHandler: func(_ context.Context, req *gomcp.InitializedRequest) {
			s.syncRoots(req.Session)
		},
		RootsListChangedHandler: func(_ context.Context, req *gomcp.RootsListChangedRequest) {
			s.syncRoots(req.Session)
		},
	})
	s.mcp.AddReceivingMiddleware(s.middleware)
	s.done.Add(2)
	go s.watch()
	go s.sendLogs()
	s.refresh()
	return s, nil
}

// Close stops watching the registry and closes every client session (their calls
// are interrupted). It does not close the Locations. Idempotent.
func (s *Server) Close() error {
	s.cancel()
	for ss := range s.mcp.Sessions() {
		ss.Close()
	}
	s.done.Wait()
	return nil
}

// Add serves loc's tools (sessions are told the list changed). Adding a Location
// whose id is served already replaces it.
func (s *Server) Add(loc *location.Location) {
	s.mu.Lock()
	s.locs[loc.ID()] = loc
	s.mu.Unlock()
	s.refresh()
}

// Hold makes tools/list and tools/call wait until release is called (or their
// request ends). A caller serving a session before its Locations are activated holds
// the Server until it has added them: the client's initialize is answered at once,
// and its first tools/list still lists the Locations' tools. release is idempotent.
func (s *Server) Hold() (release func()) {
	s.holdMu.Lock()
	if s.holds == 0 {
		s.released = make(chan struct{})
	}
	s.holds++
	s.holdMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.holdMu.Lock()
			defer s.holdMu.Unlock()
			if s.holds--; s.holds == 0 {
				close(s.released)
				s.released = nil
			}
		})
	}
}

// awaitRelease waits until no Hold is held, or ctx ends (its error).
func (s *Server) awaitRelease(ctx context.Context) error {
	s.holdMu.Lock()
	released := s.released
	s.holdMu.Unlock()
	if released == nil {
		return nil
	}
	select {
	case <-released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Remove stops serving the Location id; the caller closes it.
func (s *Server) Remove(id string) {
	s.mu.Lock()
	delete(s.locs, id)
	s.mu.Unlock()
	s.refresh()
}

// watch recomputes the tool set after every registry change, once the change has
// been quiet for ChangeDelay.
func (s *Server) watch() {
	defer s.done.Done()
	for {
		changed := s.opts.Registry.Changed()
		s.refresh()
		select {
		case <-s.ctx.Done():
			return
		case <-changed:
		}
		for quiet := false; !quiet; {
			changed = s.opts.Registry.Changed()
			t := time.NewTimer(s.opts.ChangeDelay)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-changed:
				t.Stop()
			case <-t.C:
				quiet = true
			}
		}
	}
}

// refresh returns the current view, made anew when any Location's Request changed,
// and mirrors a changed tool set into the SDK's (which notifies the sessions).
func (s *Server) refresh() *view {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.locs))
	for id := range s.locs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	qs := make([]*registry.Request, len(ids))
	same := s.cur != nil && slices.Equal(s.cur.locs, ids)
	for i, id := range ids {
		// What the Location's permission rules leave visible (Location.Prepare).
		q, err := s.locs[id].Prepare()
		if err != nil { // closing: it has no tools
			q = nil
		}
		qs[i] = q
		if same && s.cur.qs[i] != q {
			same = false
		}
	}
	if same {
		return s.cur
	}
	v := s.buildView(ids, qs)
	s.cur = v
	s.mirrorLocked(v)
	return v
}

// buildView names every tool of the Requests (see the package doc).
func (s *Server) buildView(ids []string, qs []*registry.Request) *view {
	v := &view{locs: ids, qs: qs, byName: map[string]served{}}
	var labels []string
	if len(ids) > 1 {
		labels = s.labels(ids)
	}
	for i, q := range qs {
		if q == nil {
			continue
		}
		for _, d := range q.Definitions() {
			name := d.Name
			if labels != nil {
				name = shorten(labels[i] + "_" + d.Name)
			}
			t, err := toolOf(name, d)
			if err != nil {
				s.log.Warn("tool not served over MCP", "location", ids[i], "tool", d.Name, "error", err)
				continue
			}
			v.tools = append(v.tools, t)
			v.byName[name] = served{q: q, name: d.Name}
		}
	}
	slices.SortFunc(v.tools, func(a, b *gomcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	return v
}

// labels returns the name prefix of each Location (ids sorted).
func (s *Server) labels(ids []string) []string {
	out := make([]string, len(ids))
	seen := map[string]int{}
	for i, id := range ids {
		base := ""
		if loc := s.locs[id]; loc != nil && loc.Config() != nil {
			base = loc.Config().WorkspaceID
		}
		if base == "" {
			base = filepath.Base(id)
		}
		l := Label(base)
		seen[l]++
		if n := seen[l]; n > 1 {
			l += "-" + strconv.Itoa(n)
			for seen[l] > 0 { // "a-2" was itself a label
				n++
				l = Label(base) + "-" + strconv.Itoa(n)
			}
			seen[l]++
		}
		out[i] = l
	}
	return out
}

// Label derives a Location's name prefix from its workspace id or directory name:
// characters outside [A-Za-z0-9-] become "-", a leading "L" is added unless it
// starts with a letter, and it is cut to 24 characters.
func Label(s string) string {
	l := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '-'
	}, s)
	if l == "" || !(l[0] >= 'a' && l[0] <= 'z' || l[0] >= 'A' && l[0] <= 'Z') {
		l = "L" + l
	}
	if len(l) > 24 {
		l = l[:24]
	}
	return l
}

// shorten cuts a served name over 64 characters to 55 plus "-" and 8 hex digits
// of its SHA-256.
func shorten(name string) string {
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:55] + "-" + hex.EncodeToString(sum[:4])
}

// toolOf makes the MCP definition of one registry definition. It fails when the
// input schema is not an object schema.
func toolOf(name string, d registry.Definition) (*gomcp.Tool, error) {
	if !objectSchema(d.InputSchema) {
		return nil, errors.New(`MCP needs an input schema of "type": "object"`)
	}
	t := &gomcp.Tool{Name: name, Title: d.Title, Description: d.Description, InputSchema: d.InputSchema}
	if len(d.OutputSchema) > 0 && objectSchema(d.OutputSchema) {
		t.OutputSchema = d.OutputSchema
	}
	if a := d.Annotations; a != nil {
		t.Annotations = &gomcp.ToolAnnotations{
			ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
			IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint,
		}
	}
	return t, nil
}

// objectSchema reports whether a schema says "type": "object".
func objectSchema(schema json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return false
	}
	return s.Type == "object"
}

// mirrorLocked makes the SDK's tool set v's, which makes the SDK send
// notifications/tools/list_changed (coalesced) when it changed. The SDK's tool
// handlers are never called: the middleware answers tools/list and tools/call. s.mu
// is held.
func (s *Server) mirrorLocked(v *view) {
	var gone []string
	for name := range s.mirrored {
		if _, ok := v.byName[name]; !ok {
			gone = append(gone, name)
			delete(s.mirrored, name)
		}
	}
	if len(gone) > 0 {
		s.mcp.RemoveTools(gone...)
	}
	for _, t := range v.tools {
		key, _ := json.Marshal(t)
		if s.mirrored[t.Name] == string(key) {
			continue
		}
		s.mirrored[t.Name] = string(key)
		s.mcp.AddTool(t, unreachable)
	}
}

func unreachable(context.Context, *gomcp.CallToolRequest) (*gomcp.CallToolResult, error) {
	return nil, errors.New("mcpserve: the SDK's tool handler is not used")
}

// sessionOf returns the Server's state of ss, made on first use; it is dropped
// when ss ends.
func (s *Server) sessionOf(ss *gomcp.ServerSession) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sessions[ss]; ok {
		return st
	}
	// Not the transport's session id: over HTTP that is what addresses the
	// session (with the token), and the id goes to plugins in every invocation.
	st := &session{id: "mcp_" + rand.Text(), agent: "mcp"}
	st.ctx, st.cancel = context.WithCancel(s.ctx)
	if p := ss.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
		st.agent = p.ClientInfo.Name
	}
	s.sessions[ss] = st
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		_ = ss.Wait()
		st.cancel()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
	return st
}

// endSession interrupts the calls of the session whose transport id is id (an
// HTTP session's Mcp-Session-Id), before the go-sdk closes it.
func (s *Server) endSession(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ss, st := range s.sessions {
		if ss.ID() == id {
			st.cancel()
		}
	}
}

// Tools returns the tool set the Server serves now, sorted by name.
func (s *Server) Tools() []*gomcp.Tool { return slices.Clone(s.refresh().tools) }

// isObject reports whether data is a JSON object.
func isObject(data []byte) bool {
	data = bytes.TrimLeft(data, " \t\r\n")
	return len(data) > 0 && data[0] == '{'
}

var _ = fmt.Sprintf

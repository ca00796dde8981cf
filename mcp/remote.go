package mcp

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/toolhost/toolhost/internal/loglimit"
)

// The values of Remote.Transport.
const (
	// TransportAuto tries streamable HTTP and falls back to HTTP+SSE when the
	// initialize POST is answered with a 4xx status other than 401 and 403 (the
	// MCP specification's backwards-compatibility procedure).
	TransportAuto = ""
	// TransportStreamable is the streamable HTTP transport (MCP 2025-03-26 and later).
	TransportStreamable = "streamable-http"
	// TransportSSE is the older HTTP+SSE transport (MCP 2024-11-05).
	TransportSSE = "sse"
)

// Remote says how to reach a remote server. A Config whose URL is set names a
// remote server: no process is launched; the session runs over HTTP through the
// go-sdk's client transports. The SDK's streamable transport resumes a dropped
// stream itself (honouring the server's SSE retry field and sending
// Last-Event-ID); a session that cannot be resumed (the server forgot it, answering
// 404, or every reconnection failed) ends, and the Supervisor starts a new
// generation under the crash budget, as for a stdio server that exited.
type Remote struct {
	// URL is the server's MCP endpoint (http or https).
	URL string
	// Transport is TransportAuto, TransportStreamable or TransportSSE.
	Transport string
	// Headers are set on every request to the server, with their values final
	// (environment references already expanded). Their values never appear in
	// logs or errors.
	Headers map[string]string
	// TokenDir holds stored OAuth tokens (see TokenStore); "" means
	// DefaultTokenDir of the host environment. A token stored for URL is sent as
	// a bearer token and refreshed when it expires; the refreshed token is stored.
	TokenDir string
	// LoginHint is the command a person runs to authorize the server, quoted in
	// the error when the server needs authorization and no usable token is stored.
	// Default: "toolhost mcp-login NAME".
	LoginHint string
	// HTTPClient, if set, provides the base RoundTripper (its Transport) for the
	// server's requests; by default each generation uses a fresh clone of
	// http.DefaultTransport and closes its idle connections when it stops.
	HTTPClient *http.Client
}

// AuthRequiredError reports a remote server that refused the session for want of
// authorization (HTTP 401 or 403): no token is stored, the stored token was
// refused, or it could not be refreshed. Hint says what to run.
type AuthRequiredError struct {
	Server string
	// Status is the HTTP status (0 when the stored token could not be refreshed
	// before any request was made).
	Status int
	// Reason says what was sent and what went wrong, without any secret.
	Reason string
	Hint   string
}

func (e *AuthRequiredError) Error() string {
	msg := "the server requires authorization"
	if e.Status != 0 {
		msg += fmt.Sprintf(" (HTTP %d %s)", e.Status, http.StatusText(e.Status))
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Hint != "" {
		msg += "; to authorize, run: " + e.Hint
	}
	return msg
}

// RemoteError reports a remote server that answered the session's requests with
// something other than MCP: an error status, an HTML page, a body of another type.
type RemoteError struct {
	// Status and ContentType describe the reply.
	Status      int
	ContentType string
	Err         error
}

func (e *RemoteError) Error() string {
	status := fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	switch {
	case e.ContentType == "text/html":
		return fmt.Sprintf("the server answered with an HTML page (%s) instead of MCP; is the URL the server's MCP endpoint?", status)
	case e.Status >= 200 && e.Status < 300:
		return fmt.Sprintf("the server answered with %s (%s), which is not an MCP response", contentTypeOr(e.ContentType), status)
	}
	return fmt.Sprintf("the server answered %s (%s): %v", status, contentTypeOr(e.ContentType), e.Err)
}

func (e *RemoteError) Unwrap() error { return e.Err }

func contentTypeOr(ct string) string {
	if ct == "" {
		return "no content type"
	}
	return ct
}

// RedactURL returns u without a password and with query values replaced by
// "REDACTED", for logs and errors; an unparsable URL becomes "(invalid URL)".
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(invalid URL)"
	}
	if p.User != nil {
		p.User = url.User(p.User.Username())
		if _, has := p.User.Password(); !has {
			p.User = nil
		}
	}
	if p.RawQuery != "" {
		q := p.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		p.RawQuery = q.Encode()
	}
	p.Fragment = ""
	return p.String()
}

// ValidateURL checks a remote server's URL: absolute, http or https, with a host.
func ValidateURL(u string) error {
	p, err := url.Parse(u)
	if err != nil {
		return fmt.Errorf("invalid URL: %v", errors.Unwrap(err))
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return fmt.Errorf("URL scheme %q is not http or https", p.Scheme)
	}
	if p.Host == "" {
		return errors.New("URL has no host")
	}
	return nil
}

// reply is what the host learnt from one HTTP response: enough to explain a
// failed connection without keeping the body.
type reply struct {
	method      string
	status      int
	contentType string
}

// httpLink is a remote server's HTTP side for one generation: it keeps the
// session at the origin of the server's URL, sets the configured headers and the
// stored bearer token on each request, passes every message both ways through
// the server's gate (remotegate.go), and remembers the latest reply that was not
// a success, to explain a failed connection.
type httpLink struct {
	server  string
	origin  *url.URL
	limit   int           // Config.MaxMessageBytes
	grace   time.Duration // how long one POST of the gate's answers may take: notReadingGrace
	gate    *gate
	logs    *loglimit.Logger
	base    http.RoundTripper
	own     *http.Transport // closed with the generation when it is ours
	headers map[string]string
	tokens  oauth2.TokenSource // nil: no stored token

	mu        sync.Mutex
	bad       *reply
	tokenErr  error
	elsewhere *OriginError // the latest request refused for its origin

	// The gate's answers to refused requests (answer): where they go, those
	// queued, whether answerLoop runs, and the link's closing.
	amu       sync.Mutex
	target    *answerTarget
	answers   [][]byte
	dropped   int // answers dropped since the queue was last empty
	answering bool
	aclosed   bool
	awg       sync.WaitGroup
	actx      context.Context
	acancel   context.CancelFunc
}

// maxResponseHeaderBytes bounds the headers of a remote server's reply on a
// transport of the host's own (a session id among them is sent back on every
// request).
const maxResponseHeaderBytes = 256 << 10

func newHTTPLink(cfg Config, g *gate, logs *loglimit.Logger) (*httpLink, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, err
	}
	l := &httpLink{server: cfg.Name, origin: u, limit: cfg.MaxMessageBytes, grace: cfg.notReadingGrace, gate: g, logs: logs, headers: cfg.Headers}
	l.actx, l.acancel = context.WithCancel(context.Background())
	if cfg.HTTPClient != nil && cfg.HTTPClient.Transport != nil {
		l.base = cfg.HTTPClient.Transport
	} else {
		l.own = http.DefaultTransport.(*http.Transport).Clone()
		l.own.MaxResponseHeaderBytes = maxResponseHeaderBytes
		l.base = l.own
	}
	ts, err := storedTokenSource(cfg, &http.Client{Transport: l.base})
	if err != nil {
		return nil, err
	}
	l.tokens = ts
	return l, nil
}

func (l *httpLink) client() *http.Client { return &http.Client{Transport: l} }

// RoundTrip implements http.RoundTripper.
func (l *httpLink) RoundTrip(req *http.Request) (*http.Response, error) {
	if origin(req.URL) != origin(l.origin) {
		if req.Body != nil {
			req.Body.Close()
		}
		err := &OriginError{Server: l.server, URL: RedactURL(req.URL.String()), Origin: RedactURL(l.origin.Scheme + "://" + l.origin.Host)}
		l.mu.Lock()
		l.elsewhere = err
		l.mu.Unlock()
		return nil, err
	}
	req = req.Clone(req.Context())
	for k, v := range l.headers {
		req.Header.Set(k, v)
	}
	if l.tokens != nil && req.Header.Get("Authorization") == "" {
		tok, err := l.tokens.Token()
		if err != nil {
			l.mu.Lock()
			l.tokenErr = err
			l.mu.Unlock()
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, fmt.Errorf("stored OAuth token: %w", err)
		}
		tok.SetAuthHeader(req)
	}
	msg := noted(req)
	written := func() {}
	if msg != nil {
		written = l.gate.sent(req.Context(), msg)
		l.amu.Lock()
		l.target = &answerTarget{url: req.URL.String(), session: req.Header.Get("Mcp-Session-Id"), protocol: req.Header.Get("Mcp-Protocol-Version")}
		l.amu.Unlock()
	}
	resp, err := l.base.RoundTrip(req)
	written()
	if err != nil {
		return nil, err
	}
	if !l.fine(req, resp) {
		l.mu.Lock()
		l.bad = &reply{method: req.Method, status: resp.StatusCode, contentType: mediaType(resp.Header.Get("Content-Type"))}
		l.mu.Unlock()
	}
	resp.Body = l.gated(req, resp, msg)
	return resp, nil
}

// mediaType is a Content-Type's media type, "" when there is none.
func mediaType(ct string) string {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt
}

// fine reports whether a reply is what an MCP transport expects: a success whose
// body, if any, is JSON or an event stream.
func (l *httpLink) fine(req *http.Request, resp *http.Response) bool {
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		// 405 to the optional standalone GET is part of the protocol.
		return req.Method == http.MethodGet && resp.StatusCode == http.StatusMethodNotAllowed
	}
	ct := mediaType(resp.Header.Get("Content-Type"))
	return ct == "" || ct == "application/json" || ct == "text/event-stream" || resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent
}

func (l *httpLink) lastBad() (*reply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bad, l.tokenErr
}

func (l *httpLink) reset() {
	l.mu.Lock()
	l.bad, l.tokenErr = nil, nil
	l.mu.Unlock()
}

// close stops the link's own goroutine and closes its idle connections.
func (l *httpLink) close() {
	l.closeAnswers()
	if l.own != nil {
		l.own.CloseIdleConnections()
	}
}

// connectRemote opens the MCP session with a remote server over the configured
// transport (auto: streamable HTTP, then HTTP+SSE after a 4xx other than 401 and
// 403), explaining a failure by what the server answered.
func (inst *Instance) connectRemote(ctx context.Context, client *gomcp.Client) (*gomcp.ClientSession, error) {
	cfg := inst.cfg
	link, err := newHTTPLink(cfg, inst.gate, inst.logs)
	if err != nil {
		return nil, err
	}
	inst.link = link
	hc := link.client()
	// The link caps each message; the SDK reads an event's data with the fields
	// the link writes around it.
	streamable := &gomcp.StreamableClientTransport{Endpoint: cfg.URL, HTTPClient: hc, MaxEventSize: cfg.MaxMessageBytes + eventSlack}
	sse := &gomcp.SSEClientTransport{Endpoint: cfg.URL, HTTPClient: hc, MaxEventSize: cfg.MaxMessageBytes + eventSlack}
	switch cfg.Transport {
	case TransportStreamable:
		inst.transport = TransportStreamable
		s, err := client.Connect(ctx, streamable, nil)
		return s, inst.explain(err)
	case TransportSSE:
		inst.transport = TransportSSE
		s, err := client.Connect(ctx, inst.lasting(ctx, sse), nil)
		return s, inst.explain(err)
	}
	inst.transport = TransportStreamable
	s, err := client.Connect(ctx, streamable, nil)
	if err == nil {
		return s, nil
	}
	bad, _ := link.lastBad()
	if ctx.Err() != nil || bad == nil || bad.method != http.MethodPost || bad.status < 400 || bad.status >= 500 ||
		bad.status == http.StatusUnauthorized || bad.status == http.StatusForbidden {
		return nil, inst.explain(err)
	}
	first := inst.explain(err)
	cfg.Logger.Debug("streamable HTTP refused; trying HTTP+SSE", "server", cfg.Name, "status", bad.status)
	link.reset()
	inst.transport = TransportSSE
	s, err = client.Connect(ctx, inst.lasting(ctx, sse), nil)
	if err != nil {
		return nil, fmt.Errorf("streamable HTTP: %w; HTTP+SSE: %w", first, inst.explain(err))
	}
	return s, nil
}

// lasting connects the SSE transport under a context that lives as long as the
// generation (the SDK ties its event stream to the context Connect is given),
// yet ends with ctx until the connection is made.
func (inst *Instance) lasting(ctx context.Context, t gomcp.Transport) gomcp.Transport {
	return connectedTransport(func(context.Context) (gomcp.Connection, error) {
		lctx, cancel := context.WithCancel(inst.scope.Context())
		stop := context.AfterFunc(ctx, cancel)
		c, err := t.Connect(lctx)
		if !stop() || err != nil {
			cancel()
			if err == nil {
				c.Close()
				err = context.Cause(ctx)
			}
			return nil, err
		}
		_ = inst.scope.Defer(ctx, func(context.Context) error { cancel(); return nil })
		return c, nil
	})
}

type connectedTransport func(context.Context) (gomcp.Connection, error)

func (f connectedTransport) Connect(ctx context.Context) (gomcp.Connection, error) { return f(ctx) }

// explainRemote explains a failed step of a remote session; connection errors
// are explained already.
func (inst *Instance) explainRemote(err error) error {
	var auth *AuthRequiredError
	var rerr *RemoteError
	if inst.link == nil || errors.As(err, &auth) || errors.As(err, &rerr) {
		return err
	}
	return inst.explain(err)
}

// explain turns a failed connection into an error that says what the server did.
func (inst *Instance) explain(err error) error {
	if err == nil {
		return nil
	}
	cfg := inst.cfg
	inst.link.mu.Lock()
	refused := inst.link.elsewhere
	inst.link.mu.Unlock()
	var origin *OriginError
	if refused != nil && !errors.As(err, &origin) {
		return refused // the SDK passes the refusal on as text only
	}
	bad, tokenErr := inst.link.lastBad()
	hint := cfg.LoginHint
	if hint == "" {
		hint = "toolhost mcp-login " + cfg.Name
	}
	if tokenErr != nil {
		var re *RefreshError
		if errors.As(tokenErr, &re) && re.Code == "" && !errors.Is(re.Err, errNoRefreshToken) {
			// The token endpoint was not reached, or answered no OAuth error: the
			// grant may be good still, so logging in again is not the remedy, and
			// the next start tries the refresh again.
			return tokenErr
		}
		return &AuthRequiredError{Server: cfg.Name, Reason: "the stored OAuth token has expired and could not be refreshed: " + tokenErr.Error(), Hint: hint}
	}
	if bad == nil {
		return err
	}
	if bad.status == http.StatusUnauthorized || bad.status == http.StatusForbidden {
		var reason string
		switch {
		case inst.link.tokens != nil:
			reason = "the server refused the stored OAuth token"
		case hasHeader(cfg.Headers, "Authorization"):
			reason = "the server refused the credentials in the configured headers (" + strings.Join(headerNames(cfg.Headers), ", ") + ")"
			hint = "" // static credentials: logging in would not be used
		default:
			reason = "no OAuth token is stored for it"
		}
		return &AuthRequiredError{Server: cfg.Name, Status: bad.status, Reason: reason, Hint: hint}
	}
	return &RemoteError{Status: bad.status, ContentType: bad.contentType, Err: err}
}

func hasHeader(h map[string]string, name string) bool {
	for k := range h {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

func headerNames(h map[string]string) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, http.CanonicalHeaderKey(k))
	}
	slices.Sort(names)
	return names
}

// stopRemote closes a remote session: the streamable transport sends DELETE for
// its session (bounded by the SDK, and here by grace) and ends its streams.
func stopRemote(ctx context.Context, s *gomcp.ClientSession, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Close()
	}()
	t := time.NewTimer(max(grace, time.Second))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A remote server's messages reach the go-sdk in HTTP response bodies, each read
// by a goroutine of the SDK's, and the SDK's connection cannot be wrapped (its
// streamable connection learns the session's state through an unexported
// interface). So the server's gate (budget.go) stands one layer down, in the
// link's RoundTrip, which every request and reply of the session passes:
//   - the JSON-RPC message a POST carries is noted (gate.sent) before it goes out;
//   - a reply's body reaches the SDK as a gatedBody, which reads the messages in
//     it (an SSE event, or the one JSON message of a JSON reply) within the
//     message cap, counting the bytes it buffers against the server's budget,
//     passes each through the gate and hands the SDK only what the gate lets
//     through (notifications the host acts on are handled there, as read). A
//     JSON reply is counted as it unpacks (gzip), and read no further than the
//     cap. A body ends, whatever the server sends after, once it has answered
//     the call its POST carried (or, resuming a stream, once it has answered a
//     call): the SDK would read the rest only to discard it, and a request
//     among it, counted by the gate as being answered, would never be. An SSE
//     retry field asking for less than minRetry is raised to it;
//   - the gate's answers to the requests it refuses are POSTed to the server by
//     one goroutine, at most maxQueuedReplies waiting (past that they are
//     dropped: the server is not taking the host's POSTs);
//   - a reply that is not a success is read by the SDK no further than
//     maxErrorBody, and nothing is sent outside the origin of the server's URL
//     (a redirect, an HTTP+SSE message endpoint elsewhere): *OriginError.
//
// What the SDK holds besides: its own copy of the event being read on each
// stream, within the message cap, and the messages the gate let through
// (counted by the gate until done with).

const (
	// maxErrorBody is how much of a reply that is not a success the SDK may read:
	// it reads such a body whole, for a JSON-RPC error in it.
	maxErrorBody = 64 << 10
	// minRetry is the least delay a server's SSE retry field may set before the
	// SDK reconnects a stream: at most ten reconnections a second. It is below
	// what servers ask for (the conformance suite's 500 ms must be honoured:
	// SEP-1699's client MUST wait what the field says, not longer).
	minRetry = 100 * time.Millisecond
	// maxFieldBytes is the longest SSE field, other than data, that is passed on
	// (an event id is sent back in a header on reconnection); longer ones are
	// dropped.
	maxFieldBytes = 1 << 10
	// eventSlack is what the SDK may read of an event besides its data: the
	// fields and framing a gatedBody writes around it.
	eventSlack = 4 << 10
)

// OriginError reports a request to a remote server that would have left the
// origin (scheme, host and port) of its URL: a redirect, or an HTTP+SSE message
// endpoint, elsewhere. Nothing was sent there, neither the server's headers nor
// its token.
type OriginError struct {
	Server string
	// URL is where the request would have gone, Origin the server's; both
	// redacted (RedactURL).
	URL, Origin string
}

func (e *OriginError) Error() string {
	return fmt.Sprintf("mcp: server %q sent the host to %s, outside the origin of its URL (%s), so the host did not follow: it talks to a remote server at its URL's origin only (configure the other URL if it is the server's)", e.Server, e.URL, e.Origin)
}

// origin is u's scheme and host with its port made explicit.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// noted reads the JSON-RPC message a POST carries, as far as the gate needs it
// (its id, and whether it is a request or a response), without keeping it; nil
// when the body holds none.
func noted(req *http.Request) jsonrpc.Message {
	if req.Method != http.MethodPost || req.GetBody == nil {
		return nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer body.Close()
	var s idScanner
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		s.feed(buf[:n])
		if err != nil {
			break
		}
	}
	if s.id == nil {
		return nil
	}
	var raw any
	if json.Unmarshal(s.id, &raw) != nil {
		return nil
	}
	id, err := jsonrpc.MakeID(raw)
	if err != nil {
		return nil
	}
	switch {
	case s.method:
		return &jsonrpc.Request{ID: id, Method: "(a call)"}
	case s.response:
		return &jsonrpc.Response{ID: id}
	}
	return nil
}

// gated returns the body the SDK is to read of a reply to req, which carried msg
// (nil: no message).
func (l *httpLink) gated(req *http.Request, resp *http.Response, msg jsonrpc.Message) io.ReadCloser {
	var call *jsonrpc.ID
	if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() {
		call = &r.ID
	}
	switch ct := mediaType(resp.Header.Get("Content-Type")); {
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
	case ct == "text/event-stream":
		resumed := req.Method == http.MethodGet && req.Header.Get("Last-Event-ID") != ""
		return &gatedBody{l: l, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10), sse: true, call: call, resumed: resumed}
	case ct == "application/json" && call != nil:
		return &gatedBody{l: l, body: resp.Body, r: bufio.NewReaderSize(resp.Body, 64<<10), call: call}
	}
	return limitedBody{io.LimitReader(resp.Body, maxErrorBody), resp.Body}
}

type limitedBody struct {
	io.Reader
	io.Closer
}

// gatedBody is a reply's body as the SDK reads it: the messages in it pass the
// gate first. Read is not safe for concurrent use (the SDK reads a body from one
// goroutine); Close may be called at any time.
type gatedBody struct {
	l    *httpLink
	body io.ReadCloser
	r    *bufio.Reader
	sse  bool // an event stream; else a JSON reply holding one message
	// call is the id of the call the POST carried: the stream ends with its
	// response. resumed: a GET resuming a stream, which ends with the first
	// response.
	call    *jsonrpc.ID
	resumed bool
	legacy  bool // an HTTP+SSE stream: its first event was "endpoint"
	events  int

	out bytes.Buffer // what the SDK has yet to read
	err error        // what Read returns once out is read
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if b.out.Len() == 0 && b.out.Cap() > 1<<20 {
		b.out = bytes.Buffer{} // a large message's buffer is not kept
	}
	for b.out.Len() == 0 && b.err == nil {
		if b.sse {
			b.err = b.event()
		} else {
			b.err = b.json()
		}
		if b.err != nil && !errors.Is(b.err, io.EOF) {
			b.body.Close()
		}
	}
	if b.out.Len() > 0 {
		return b.out.Read(p)
	}
	return 0, b.err
}

func (b *gatedBody) Close() error { return b.body.Close() }

// end ends the body once the SDK has read what is written: the server has
// answered the call it was for.
func (b *gatedBody) end() error {
	b.body.Close()
	return io.EOF
}

// reading is one message being read: its bytes kept (counted against the budget)
// until it goes over the cap or the budget, then scanned for its id only.
type reading struct {
	l    *httpLink
	data []byte
	held int64
	size int64
	over error // why it is no longer kept
	scan idScanner
}

// add appends p to the message.
func (m *reading) add(p []byte) {
	m.size += int64(len(p))
	if m.over == nil {
		switch {
		case m.size > int64(m.l.limit):
			m.over = &MessageTooLargeError{Server: m.l.server, Limit: int64(m.l.limit)}
		default:
			m.over = m.l.gate.b.take(int64(len(p)), "a message being read")
		}
		if m.over == nil {
			m.data = append(m.data, p...)
			m.held += int64(len(p))
			return
		}
		m.scan.feed(m.data)
		m.release()
	}
	m.scan.feed(p)
}

// release gives back what the message held.
func (m *reading) release() {
	m.l.gate.b.give(m.held)
	m.held, m.data = 0, nil
}

// message returns what the session is to see of the message read (nil:
// nothing) and releases what it held.
func (m *reading) message() jsonrpc.Message {
	defer m.release()
	if m.over != nil {
		if tooLarge, ok := m.over.(*MessageTooLargeError); ok {
			tooLarge.Size = m.size
		}
		return discarded(m.l.logs, m.over, &m.scan)
	}
	msg, err := jsonrpc.DecodeMessage(m.data)
	if err != nil {
		m.l.skip(m.data, err)
		return nil
	}
	return msg
}

// json reads the one message of a JSON reply and ends the body. Past the cap or
// the budget the rest is not read (the reply holds this one message): the call
// is answered with the error.
func (b *gatedBody) json() error {
	m := &reading{l: b.l}
	defer m.release()
	buf := make([]byte, 32<<10)
	var err error
	for err == nil && m.over == nil {
		var n int
		n, err = b.r.Read(buf)
		m.add(buf[:n])
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var msg jsonrpc.Message
	if m.over != nil {
		if tooLarge, ok := m.over.(*MessageTooLargeError); ok {
			tooLarge.Size = m.size
		}
		b.l.logs.Log(hclog.Warn, "discarded a response", "error", m.over)
		msg = &jsonrpc.Response{ID: *b.call, Error: m.over}
	} else {
		msg = m.message()
	}
	pass := b.l.admit(msg)
	if r, ok := msg.(*jsonrpc.Response); pass == nil && (!ok || r.ID != *b.call) {
		// What came is not the call's response: the call is answered so.
		pass = b.l.admit(&jsonrpc.Response{ID: *b.call, Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError,
			Message: fmt.Sprintf("mcp: server %q answered the request with a message that is not its response", b.l.server)}})
	}
	if pass != nil {
		b.write(pass)
	}
	return b.end()
}

// write encodes msg for the session (the SDK's encoding escapes no HTML: it is
// no longer than what was read, and on one line).
func (b *gatedBody) write(msg jsonrpc.Message) bool {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		b.l.logs.Log(hclog.Error, "could not encode a message for the session", "server", b.l.server, "error", err)
		return false
	}
	b.out.Write(data)
	return true
}

// sseEvent is the event being read: its fields other than data.
type sseEvent struct {
	name, id, retry string
	hasData         bool
}

// event reads one event of the stream and writes what the session is to see of
// it; at the stream's end it returns its error (io.EOF).
func (b *gatedBody) event() error {
	var ev sseEvent
	m := &reading{l: b.l}
	defer m.release()
	for {
		blank, err := b.line(&ev, m)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		if blank || err != nil {
			if ev != (sseEvent{}) {
				if end := b.deliver(&ev, m); end {
					return b.end()
				}
			}
			return err
		}
	}
}

// line reads one line of the stream into ev and m; blank reports an empty line,
// the end of an event.
func (b *gatedBody) line(ev *sseEvent, m *reading) (blank bool, err error) {
	var field []byte // the field's name; nil until read
	var value []byte // a field's value other than data, kept to maxFieldBytes
	long := false
	for first := true; ; first = false {
		chunk, err := b.r.ReadSlice('\n')
		more := errors.Is(err, bufio.ErrBufferFull)
		if !more {
			chunk = bytes.TrimRight(chunk, "\r\n")
		}
		if first {
			if !more && len(chunk) == 0 {
				return true, err
			}
			name, rest, found := bytes.Cut(chunk, []byte(":"))
			if !found {
				name, rest = nil, nil // not a field: ignored
			}
			field, chunk = bytes.Clone(name), rest
			if string(field) == "data" {
				if ev.hasData {
					m.add([]byte("\n"))
				}
				ev.hasData = true
				chunk = bytes.TrimLeft(chunk, " ")
			}
		}
		switch string(field) {
		case "data":
			m.add(chunk)
		case "event", "id", "retry":
			if len(value)+len(chunk) > maxFieldBytes {
				long = true
			} else {
				value = append(value, chunk...)
			}
		}
		if more {
			continue
		}
		if !long {
			v := strings.TrimSpace(string(value))
			switch string(field) {
			case "event":
				ev.name = v
			case "id":
				ev.id = v
			case "retry":
				ev.retry = v
			}
		}
		return false, err
	}
}

// deliver passes the event's message through the gate and writes what the
// session is to see of it; end reports that the stream ends with it.
func (b *gatedBody) deliver(ev *sseEvent, m *reading) (end bool) {
	b.events++
	if b.events == 1 && ev.name == "endpoint" && m.over == nil {
		// The HTTP+SSE transport's first event: where to POST, for the SDK.
		b.legacy = true
		fmt.Fprintf(&b.out, "event: endpoint\ndata: %s\n\n", bytes.ReplaceAll(m.data, []byte("\n"), nil))
		return false
	}
	var msg jsonrpc.Message
	if ev.hasData && (ev.name == "" || ev.name == "message") {
		msg = m.message()
	}
	pass := b.l.admit(msg)
	if pass == nil && b.legacy {
		// HTTP+SSE has no event ids, and its SDK reads every event as a message.
		return false
	}
	if ev.id != "" {
		fmt.Fprintf(&b.out, "id: %s\n", ev.id)
	}
	if n, err := strconv.ParseInt(ev.retry, 10, 64); err == nil {
		fmt.Fprintf(&b.out, "retry: %d\n", max(n, minRetry.Milliseconds()))
	}
	if pass != nil {
		b.out.WriteString("data: ")
		if !b.write(pass) {
			b.out.Reset()
			return false
		}
		b.out.WriteByte('\n')
	}
	if b.out.Len() > 0 {
		b.out.WriteByte('\n')
	}
	r, ok := msg.(*jsonrpc.Response)
	return ok && (b.resumed || b.call != nil && r.ID == *b.call)
}

// admit passes a message read from the server through its gate, queueing the
// gate's answer to a refused request, and returns what the session is to see.
func (l *httpLink) admit(msg jsonrpc.Message) jsonrpc.Message {
	if msg == nil {
		return nil
	}
	pass, reply := l.gate.admit(msg, sizeOf(msg))
	if reply != nil {
		l.answer(reply)
	}
	return pass
}

// skip logs an event whose data is not JSON-RPC; the stream goes on.
func (l *httpLink) skip(data []byte, err error) {
	const show = 200
	if len(data) > show {
		data = append(data[:show:show], "..."...)
	}
	l.logs.Log(hclog.Warn, "skipping a message from the server that is not JSON-RPC", "server", l.server, "error", err, "data", string(data))
}

// answerTarget is where and how the SDK last POSTed a message: where the gate's
// answers go.
type answerTarget struct {
	url               string
	session, protocol string
}

// answer queues the gate's answer to a refused request for the answering
// goroutine. What an answer holds counts against the server's budget until it is
// POSTed; one past the budget, or finding maxQueuedReplies waiting, is dropped.
func (l *httpLink) answer(msg *jsonrpc.Response) {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		l.logs.Log(hclog.Error, "could not encode the answer to a refused request", "server", l.server, "error", err)
		return
	}
	n := int64(len(data))
	if err := l.gate.b.take(n, "the answer to a refused request"); err != nil {
		l.logs.Log(hclog.Warn, "dropped the answer to a refused request", "error", err)
		return
	}
	l.amu.Lock()
	defer l.amu.Unlock()
	switch {
	case l.aclosed || l.target == nil:
		l.gate.b.give(n)
		return
	case len(l.answers) >= maxQueuedReplies:
		l.gate.b.give(n)
		if l.dropped == 0 {
			l.logs.Log(hclog.Warn, "dropping the answers to refused requests: as many as the host keeps wait to be POSTed (the server is slow to take them); the count follows",
				"server", l.server, "waiting", len(l.answers))
		}
		l.dropped++
		return
	}
	l.answers = append(l.answers, data)
	if !l.answering {
		l.answering = true
		l.awg.Add(1)
		go l.answerLoop()
	}
}

// answerLoop POSTs the queued answers, one at a time, each for no longer than
// l.grace, and returns once none is left or the link is closed.
func (l *httpLink) answerLoop() {
	defer l.awg.Done()
	for {
		l.amu.Lock()
		if len(l.answers) == 0 || l.aclosed {
			for _, data := range l.answers {
				l.gate.b.give(int64(len(data)))
			}
			if l.dropped > 0 {
				l.logs.Log(hclog.Warn, "dropped answers to refused requests", "server", l.server, "dropped", l.dropped)
			}
			l.answers, l.answering, l.dropped = nil, false, 0
			l.amu.Unlock()
			return
		}
		data, target := l.answers[0], *l.target
		l.answers = l.answers[1:]
		l.amu.Unlock()
		if err := l.post(target, data); err != nil {
			l.logs.Log(hclog.Debug, "could not answer a refused request", "server", l.server, "error", err)
		}
		l.gate.b.give(int64(len(data)))
	}
}

func (l *httpLink) post(target answerTarget, data []byte) error {
	ctx, cancel := context.WithTimeout(l.actx, l.grace)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if target.session != "" {
		req.Header.Set("Mcp-Session-Id", target.session)
	}
	if target.protocol != "" {
		req.Header.Set("Mcp-Protocol-Version", target.protocol)
	}
	resp, err := l.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return fmt.Errorf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return nil
}

// closeAnswers stops the answering goroutine, waits for it and drops what is
// queued.
func (l *httpLink) closeAnswers() {
	l.amu.Lock()
	l.aclosed = true
	l.amu.Unlock()
	l.acancel()
	l.awg.Wait()
}

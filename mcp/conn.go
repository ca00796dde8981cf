package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/loglimit"
)

var (
	_ gomcp.Transport  = transport{}
	_ gomcp.Connection = (*conn)(nil)
)

// transport hands the go-sdk client a connection over a process we started
// ourselves (the go-sdk's CommandTransport would own the process and cap messages at
// a fixed 16 MiB, ending the session past it).
type transport struct{ conn *conn }

func (t transport) Connect(context.Context) (gomcp.Connection, error) { return t.conn, nil }

// conn is a newline-delimited JSON-RPC connection over a server's stdin and stdout
// with a per-message cap: an oversized message is drained and replaced, when it is a
// response, by an error response carrying a *MessageTooLargeError, so the call fails
// and the session survives. Every message passes the server's gate both ways.
//
// The reader never writes: the gate's answers to the requests it refuses go to a
// queue of at most maxQueuedReplies that a writer goroutine empties, so a server
// that stops reading its stdin cannot stop the host from reading the responses to
// its calls. With the queue full the reader waits for room (a server flooding the
// host slows its own session), but no longer than notReadingGrace: a server that
// reads none of the host's answers for that long is not reading, and the
// connection is closed with a *NotReadingError, which Read returns (the calls in
// flight fail with it, and the server ends as a crash).
type conn struct {
	server string
	limit  int
	grace  time.Duration // notReadingGrace, shorter in tests
	// finishWritten, if set (by tests), is called by finish once its write returned.
	finishWritten func()
	log           *loglimit.Logger // the server's log budget: what it prints must not flood the host's log
	gate          *gate

	w *os.File
	// wsem is held by the one writing to w: a semaphore rather than a mutex, so
	// that a call whose context ends stops waiting for it.
	wsem chan struct{}

	incoming chan readResult
	// The gate's answers to refused requests, encoded: those queued and how
	// many, how many the writer is writing; wake tells the writer there are
	// some, room tells the reader it wrote some.
	qmu       sync.Mutex
	replies   []byte
	queued    int
	writing   int
	wake      chan struct{}
	room      chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
	err       error         // why the host closed the connection, set before closed is closed; nil: Close
	ended     chan struct{} // closed when the server's stdout ended, before Read reports it
	done      chan struct{} // closed when the reader, the writer and finish have returned

	queue []jsonrpc.Message // the rest of a batch; only Read touches it
}

type readResult struct {
	msgs []jsonrpc.Message
	err  error
}

// maxQueuedReplies is how many of the gate's answers to a server's refused requests
// may wait to be written; notReadingGrace how long the reader waits for room when
// they are that many before it closes the connection. The grace is that long so
// that a busy machine does not end a session that reads.
const (
	maxQueuedReplies = 64
	notReadingGrace  = 5 * time.Second
)

func newConn(server string, limit int, log *loglimit.Logger, g *gate, w *os.File, r io.Reader) *conn {
	c := &conn{
		server: server, limit: limit, grace: notReadingGrace, log: log, gate: g, w: w,
		wsem:     make(chan struct{}, 1),
		incoming: make(chan readResult), wake: make(chan struct{}, 1), room: make(chan struct{}, 1),
		closed: make(chan struct{}), ended: make(chan struct{}), done: make(chan struct{}),
	}
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		c.writeLoop()
	}()
	go func() {
		defer close(c.done)
		c.readLoop(r)
		<-writeDone
		// The connection is closed (the writer ends only then), so no write can
		// begin any more; taking the writer's turn for good waits for the one
		// holding it, finish included (closing w ended its write).
		c.wsem <- struct{}{}
	}()
	return c
}

// readLoop reads messages until the stream ends, then reports the end to Read.
func (c *conn) readLoop(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, over, err := c.readLine(br)
		var res readResult
		switch {
		case over != nil:
			res.msgs = c.oversized(over)
		case len(bytes.TrimSpace(line)) > 0:
			res.msgs = c.decode(line)
		}
		res.msgs = c.admit(res.msgs)
		if len(res.msgs) > 0 {
			select {
			case c.incoming <- res:
			case <-c.closed:
				return
			}
		}
		if err != nil {
			close(c.ended)
			select {
			case c.incoming <- readResult{err: err}:
			case <-c.closed:
			}
			return
		}
	}
}

// oversize describes a line that went over the cap.
type oversize struct {
	size int64
	scan idScanner
}

// readLine returns the next line without its newline. A line over the cap is
// drained instead, through an id scanner, and reported as over. err is the stream's
// end (io.EOF) or failure, possibly along with a last unterminated line.
func (c *conn) readLine(br *bufio.Reader) (line []byte, over *oversize, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case over != nil:
			over.scan.feed(chunk)
			over.size += int64(len(chunk))
		case len(line)+len(chunk) > c.limit+1: // +1: the newline does not count
			over = &oversize{size: int64(len(line) + len(chunk))}
			over.scan.feed(line)
			over.scan.feed(chunk)
			line = nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over != nil && bytes.HasSuffix(chunk, []byte("\n")) {
			over.size-- // the newline is not part of the message
		}
		return bytes.TrimSuffix(line, []byte("\n")), over, err
	}
}

// decode parses one line: a message or a batch. A line that is not JSON-RPC is
// logged and skipped (a server printing to stdout must not end the session).
func (c *conn) decode(line []byte) []jsonrpc.Message {
	line = bytes.TrimSpace(line)
	if line[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(line, &raws); err == nil {
			msgs := make([]jsonrpc.Message, 0, len(raws))
			for _, raw := range raws {
				if msg, err := jsonrpc.DecodeMessage(raw); err == nil {
					msgs = append(msgs, msg)
				} else {
					c.skip(raw, err)
				}
			}
			return msgs
		}
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		c.skip(line, err)
		return nil
	}
	return []jsonrpc.Message{msg}
}

func (c *conn) skip(line []byte, err error) {
	const show = 200
	if len(line) > show {
		line = append(line[:show:show], "..."...)
	}
	c.log.Log(hclog.Warn, "skipping a line on the server's stdout that is not JSON-RPC", "server", c.server, "error", err, "line", string(line))
}

// oversized turns a drained message into what the session should see: an error
// response for its id when it was a response, nothing otherwise.
func (c *conn) oversized(o *oversize) []jsonrpc.Message {
	msg := discarded(c.log, &MessageTooLargeError{Server: c.server, Size: o.size, Limit: int64(c.limit)}, &o.scan)
	if msg == nil {
		return nil
	}
	return []jsonrpc.Message{msg}
}

// discarded is what the session sees of a message the host read without keeping
// (s scanned it) for reason: an error response carrying reason when it was a
// response with an id, else nothing; either way it is logged.
func discarded(logs *loglimit.Logger, reason error, s *idScanner) jsonrpc.Message {
	if s.method || !s.response || s.id == nil {
		logs.Log(hclog.Error, "discarded a message that is not a response", "error", reason, "method", s.method, "id", string(s.id))
		return nil
	}
	var raw any
	if err := json.Unmarshal(s.id, &raw); err != nil {
		logs.Log(hclog.Error, "discarded a response with an unreadable id", "error", reason, "id", string(s.id))
		return nil
	}
	id, err := jsonrpc.MakeID(raw)
	if err != nil {
		logs.Log(hclog.Error, "discarded a response with an unreadable id", "error", reason, "id", string(s.id))
		return nil
	}
	logs.Log(hclog.Warn, "discarded a response", "error", reason)
	return &jsonrpc.Response{ID: id, Error: reason}
}

// admit passes msgs through the gate, queueing its replies, and returns what is
// left for the session.
func (c *conn) admit(msgs []jsonrpc.Message) []jsonrpc.Message {
	pass := msgs[:0]
	for _, msg := range msgs {
		m, reply := c.gate.admit(msg, sizeOf(msg))
		if reply != nil {
			c.reply(reply)
		}
		if m != nil {
			pass = append(pass, m)
		}
	}
	return pass
}

// reply queues the gate's answer to a refused request for the writer. With
// maxQueuedReplies waiting to be written it waits for room, no longer than
// c.grace, then closes the connection. What an answer holds (the request's id,
// which the server chose) counts against the server's byte budget until written;
// an answer past the budget is dropped.
func (c *conn) reply(msg *jsonrpc.Response) {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		c.log.Log(hclog.Error, "could not encode the answer to a refused request", "server", c.server, "error", err)
		return
	}
	data = append(data, '\n')
	n := int64(len(data))
	if err := c.gate.b.take(n, "the answer to a refused request"); err != nil {
		c.log.Log(hclog.Warn, "dropped the answer to a refused request", "error", err)
		return
	}
	var grace *time.Timer
	for {
		c.qmu.Lock()
		if c.queued+c.writing < maxQueuedReplies {
			c.replies = append(c.replies, data...)
			c.queued++
			c.qmu.Unlock()
			select {
			case c.wake <- struct{}{}:
			default:
			}
			return
		}
		c.qmu.Unlock()
		if grace == nil {
			grace = time.NewTimer(c.grace)
			defer grace.Stop()
		}
		select {
		case <-c.room:
			continue
		case <-c.closed:
		case <-grace.C:
			c.closeWith(&NotReadingError{Server: c.server, Queued: maxQueuedReplies, Waited: c.grace})
		}
		c.gate.b.give(n)
		return
	}
}

// writeLoop writes the gate's answers until the connection is closed, all those
// queued in one write: while the server reads, the queue empties faster than the
// reader fills it.
func (c *conn) writeLoop() {
	var batch []byte
	for {
		select {
		case <-c.closed:
			c.qmu.Lock()
			c.gate.b.give(int64(len(c.replies)))
			c.replies, c.queued = nil, 0
			c.qmu.Unlock()
			return
		case <-c.wake:
		}
		c.qmu.Lock()
		batch, c.replies = c.replies, batch[:0]
		c.writing, c.queued = c.queued, 0
		c.qmu.Unlock()
		if len(batch) == 0 {
			continue
		}
		if err := c.writeData(context.Background(), batch); err != nil {
			c.log.Log(hclog.Debug, "could not answer refused requests", "server", c.server, "error", err)
		}
		c.gate.b.give(int64(len(batch)))
		c.qmu.Lock()
		c.writing = 0
		c.qmu.Unlock()
		select {
		case c.room <- struct{}{}:
		default:
		}
		if cap(batch) > 1<<20 {
			batch = nil // a flood's buffer is not kept
		}
	}
}

// Read implements gomcp.Connection.
func (c *conn) Read(ctx context.Context) (jsonrpc.Message, error) {
	if len(c.queue) > 0 {
		msg := c.queue[0]
		c.queue = c.queue[1:]
		return msg, nil
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		if c.err != nil {
			return nil, c.err
		}
		return nil, io.EOF
	case r := <-c.incoming:
		if r.err != nil {
			return nil, r.err
		}
		c.queue = r.msgs[1:]
		return r.msgs[0], nil
	}
}

// Write implements gomcp.Connection.
func (c *conn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	written := c.gate.sent(ctx, msg)
	err := c.write(ctx, msg)
	written()
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "notifications/cancelled" {
		c.log.Log(hclog.Debug, "sent notifications/cancelled", "server", c.server, "params", string(req.Params), "error", err)
	}
	return err
}

func (c *conn) write(ctx context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeData(ctx, append(data, '\n'))
}

// writeData writes encoded messages. While the server does not read, it waits for
// its turn and for the pipe, but no longer than ctx (where the pipe takes a write
// deadline: not on Windows). A message ctx ends part way must still be finished,
// or nothing could follow it: finish writes the rest without the call.
func (c *conn) writeData(ctx context.Context, data []byte) error {
	select {
	case <-c.closed:
		return gomcp.ErrConnectionClosed
	case <-ctx.Done():
		return ctx.Err()
	case c.wsem <- struct{}{}:
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		c.w.SetWriteDeadline(time.Now())
	})
	n, err := c.w.Write(data)
	if !stop() {
		<-fired
		c.w.SetWriteDeadline(time.Time{})
	}
	switch {
	case err == nil || !errors.Is(err, os.ErrDeadlineExceeded):
		<-c.wsem
		return err
	case n > 0:
		go c.finish(data[n:], len(data)) // keeps the turn
	default:
		<-c.wsem
	}
	return ctx.Err()
}

// finish writes the rest of a message whose call ended part way through it, for
// as long as a server that reads would take (the grace); a server that has not
// read it by then is not reading, and the connection is closed with a
// *StdinStalledError (the server ends as a crash). It holds the writer's turn,
// and gives it back.
func (c *conn) finish(rest []byte, size int) {
	defer func() { <-c.wsem }()
	c.w.SetWriteDeadline(time.Now().Add(c.grace))
	n, err := c.w.Write(rest)
	c.w.SetWriteDeadline(time.Time{})
	if c.finishWritten != nil {
		c.finishWritten()
	}
	if err != nil {
		c.closeWith(&StdinStalledError{Server: c.server, Written: size - len(rest) + n, Size: size, Waited: c.grace})
	}
}

// Close implements gomcp.Connection: it closes the server's stdin (the stdio
// transport's shutdown signal) and ends Read. The process itself is stopped by its
// Instance. Idempotent.
func (c *conn) Close() error {
	c.closeWith(nil)
	return nil
}

// closeWith closes the connection; a non-nil err says why, is logged, and is what
// Read returns from then on.
func (c *conn) closeWith(err error) {
	c.closeOnce.Do(func() {
		if err != nil {
			c.log.Log(hclog.Error, "closing the connection to the server", "server", c.server, "error", err)
		}
		c.err = err
		close(c.closed)
		c.w.Close() // also unblocks a Write stuck on a full pipe
	})
}

// failure is why the host closed the connection, or nil.
func (c *conn) failure() error {
	select {
	case <-c.closed:
		return c.err
	default:
		return nil
	}
}

// SessionID implements gomcp.Connection.
func (c *conn) SessionID() string { return "" }

// idScanner finds, in a stream of bytes holding one JSON object, whether it has a
// top-level "method", "result" or "error" member and the raw value of its top-level
// "id" — without keeping the object, which may be huge.
type idScanner struct {
	depth    int
	inString bool
	escape   bool
	// At depth 1: whether the next string is a key, the key being read (truncated),
	// and the key whose value comes next.
	wantKey  bool
	readKey  bool
	key      []byte
	valueFor string
	// The id's raw value while it is read, and when complete.
	readID bool
	idBuf  []byte
	id     []byte

	method, response bool
}

const maxIDLen = 256

func (s *idScanner) feed(p []byte) {
	for _, b := range p {
		s.step(b)
	}
}

func (s *idScanner) step(b byte) {
	if s.inString {
		switch {
		case s.escape:
			s.escape = false
		case b == '\\':
			s.escape = true
		case b == '"':
			s.inString = false
		}
		switch {
		case s.readKey:
			if s.inString {
				if len(s.key) < 16 {
					s.key = append(s.key, b)
				}
			} else {
				s.readKey = false
			}
		case s.readID:
			s.appendID(b)
			if !s.inString {
				s.endID()
			}
		}
		return
	}
	switch b {
	case '"':
		s.inString = true
		if s.depth == 1 && s.wantKey {
			s.readKey, s.key = true, s.key[:0]
		} else if s.depth == 1 && s.valueFor == "id" {
			s.readID = true
			s.appendID(b)
		}
	case '{', '[':
		s.depth++
		if s.depth == 1 {
			s.wantKey = b == '{'
		}
	case '}', ']':
		if s.depth == 1 && s.readID {
			s.endID()
		}
		s.depth--
	case ':':
		if s.depth == 1 {
			s.wantKey = false
			s.valueFor = string(s.key)
			switch s.valueFor {
			case "method":
				s.method = true
			case "result", "error":
				s.response = true
			}
		}
	case ',':
		if s.depth == 1 {
			if s.readID {
				s.endID()
			}
			s.wantKey, s.valueFor = true, ""
		}
	case ' ', '\t', '\r', '\n':
	default:
		if s.depth == 1 && s.valueFor == "id" {
			s.readID = true
			s.appendID(b)
		}
	}
}

func (s *idScanner) appendID(b byte) {
	if len(s.idBuf) < maxIDLen {
		s.idBuf = append(s.idBuf, b)
	}
}

func (s *idScanner) endID() {
	s.readID = false
	s.id = s.idBuf
	s.valueFor = ""
}

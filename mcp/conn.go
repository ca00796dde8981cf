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
type conn struct {
	server string
	limit  int
	log    *loglimit.Logger // the server's log budget: what it prints must not flood the host's log
	gate   *gate

	w   *os.File
	wmu sync.Mutex

	incoming  chan readResult
	closed    chan struct{}
	closeOnce sync.Once
	ended     chan struct{} // closed when the server's stdout ended, before Read reports it
	readDone  chan struct{} // closed when the reader goroutine has returned

	queue []jsonrpc.Message // the rest of a batch; only Read touches it
}

type readResult struct {
	msgs []jsonrpc.Message
	err  error
}

func newConn(server string, limit int, log *loglimit.Logger, g *gate, w *os.File, r io.Reader) *conn {
	c := &conn{
		server: server, limit: limit, log: log, gate: g, w: w,
		incoming: make(chan readResult), closed: make(chan struct{}), ended: make(chan struct{}), readDone: make(chan struct{}),
	}
	go c.readLoop(r)
	return c
}

// readLoop reads messages until the stream ends, then reports the end to Read.
func (c *conn) readLoop(r io.Reader) {
	defer close(c.readDone)
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
	tooLarge := &MessageTooLargeError{Server: c.server, Size: o.size, Limit: int64(c.limit)}
	s := &o.scan
	if s.method || !s.response || s.id == nil {
		c.log.Log(hclog.Error, "discarded an oversized message that is not a response", "error", tooLarge, "method", s.method, "id", string(s.id))
		return nil
	}
	var raw any
	if err := json.Unmarshal(s.id, &raw); err != nil {
		c.log.Log(hclog.Error, "discarded an oversized response with an unreadable id", "error", tooLarge, "id", string(s.id))
		return nil
	}
	id, err := jsonrpc.MakeID(raw)
	if err != nil {
		c.log.Log(hclog.Error, "discarded an oversized response with an unreadable id", "error", tooLarge, "id", string(s.id))
		return nil
	}
	c.log.Log(hclog.Warn, "discarded an oversized response", "error", tooLarge)
	return []jsonrpc.Message{&jsonrpc.Response{ID: id, Error: tooLarge}}
}

// admit passes msgs through the gate, writing its replies, and returns what is
// left for the session.
func (c *conn) admit(msgs []jsonrpc.Message) []jsonrpc.Message {
	pass := msgs[:0]
	for _, msg := range msgs {
		m, reply := c.gate.admit(msg, sizeOf(msg))
		if reply != nil {
			if err := c.write(reply); err != nil {
				c.log.Log(hclog.Debug, "could not answer a refused request", "server", c.server, "error", err)
			}
		}
		if m != nil {
			pass = append(pass, m)
		}
	}
	return pass
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
	c.gate.sent(ctx, msg)
	err := c.write(msg)
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "notifications/cancelled" {
		c.log.Log(hclog.Debug, "sent notifications/cancelled", "server", c.server, "params", string(req.Params), "error", err)
	}
	return err
}

func (c *conn) write(msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	select {
	case <-c.closed:
		return gomcp.ErrConnectionClosed
	default:
	}
	c.wmu.Lock()
	_, err = c.w.Write(data)
	c.wmu.Unlock()
	return err
}

// Close implements gomcp.Connection: it closes the server's stdin (the stdio
// transport's shutdown signal) and ends Read. The process itself is stopped by its
// Instance. Idempotent.
func (c *conn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		c.w.Close() // also unblocks a Write stuck on a full pipe
	})
	return nil
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

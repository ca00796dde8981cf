package mcpserve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
)

// ServeStdio serves one client session over newline-delimited JSON-RPC on r and w
// (stdin and stdout of `toolhost mcp`) until the client ends it (r reaches its end)
// or ctx ends; either way the session's calls are interrupted and have returned
// when ServeStdio returns. A line that is not JSON is answered with a parse error
// (-32700) and a line over Options.MaxMessageBytes with an invalid-request error
// (-32600), both with a null id, and the session carries on. Only protocol messages
// are written to w.
//
// A client that stops reading w holds the session to bounds: one goroutine writes
// to w, and a write that waits for the client longer than
// Options.StdioWriteTimeout ends the session with a *NotReadingError (w is closed
// then if it is an io.Closer, which ends the write; otherwise the write is left to
// end by itself). The requests read and not yet answered are at most
// 2*Options.MaxCallsPerSession+16: past that r is read no further until one is
// answered. When ctx ends, what is left to write is dropped, and w is closed if it
// is an io.Closer.
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) (err error) {
	c := newStdioConn(r, w, s.opts.MaxMessageBytes, 2*s.opts.MaxCallsPerSession+16, s.opts.StdioWriteTimeout)
	ss, err := s.mcp.Connect(ctx, stdioTransport{c}, nil)
	if err != nil {
		c.Close()
		return fmt.Errorf("mcpserve: %w", err)
	}
	c.direct.Store(&directCalls{s: s, ss: ss})
	defer func() {
		c.Close() // ends the calls answered directly, if the session has not
		c.calls.Wait()
		c.workers.Wait()
		// What the writer has taken is written, or given up on past the timeout.
		select {
		case <-c.wdone:
		case <-c.abandoned:
		}
		var stalled *NotReadingError
		if err == nil && ctx.Err() == nil && errors.As(c.failure(), &stalled) {
			err = stalled // a stall once the session had ended
		}
	}()
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case <-ctx.Done():
		c.abandon() // the writes waiting for the client fail at once, so the session's requests end
		ss.Close()
		<-ended
		return nil
	case err = <-ended:
		if cause := c.failure(); cause != nil {
			return cause
		}
		if errors.Is(err, io.EOF) || errors.Is(err, errConnClosed) {
			return nil
		}
		return err
	}
}

// NotReadingError ends a stdio session whose client read none of what was written
// to it (stdout, for toolhost mcp) for Timeout (Options.StdioWriteTimeout).
type NotReadingError struct{ Timeout time.Duration }

func (e *NotReadingError) Error() string {
	return fmt.Sprintf("mcpserve: the client read nothing of what was written to it (on toolhost mcp's stdout) for %s, so it is taken to be gone "+
		"and its session is closed, its calls interrupted; a client reads stdout for as long as its session lasts", e.Timeout)
}

type stdioTransport struct{ c *stdioConn }

func (t stdioTransport) Connect(context.Context) (gomcp.Connection, error) { return t.c, nil }

var errConnClosed = errors.New("mcpserve: connection closed")

// stdioConn is a gomcp.Connection over a byte stream, one message per line.
type stdioConn struct {
	limit int

	w       io.Writer
	timeout time.Duration // Options.StdioWriteTimeout
	// out hands a message to the writer goroutine (writeLoop), the only one that
	// writes to w; wdone is closed when it returns, abandoned when a write of it
	// has waited past timeout.
	out           chan []byte
	wdone         chan struct{}
	abandoned     chan struct{}
	abandonedOnce sync.Once
	// pending holds a token for every request read and not yet answered; the
	// reader waits for room before it passes one on.
	pending chan struct{}
	cause   atomic.Pointer[error] // why the connection was failed, if it was

	incoming  chan jsonrpc.Message
	readErr   chan error
	closeOnce sync.Once
	closed    chan struct{}
	closer    io.Closer // r, when it can be closed to stop the reader

	// direct is set once the session is connected: from then on the reader
	// answers tools/call itself (see serveDirect).
	direct atomic.Pointer[directCalls]
	// initialized: the reader has passed an initialize on; it answers any later
	// one itself. Only the reader uses it.
	initialized bool
	mu          sync.Mutex
	running     map[jsonrpc.ID]context.CancelFunc // calls answered directly, by request id
	calls       sync.WaitGroup                    // their runs (see dispatch)

	// work hands a call answered directly to an idle worker (see dispatch).
	work        chan func()
	idleWorkers atomic.Int32
	workers     sync.WaitGroup
}

// maxIdleWorkers bounds the workers kept waiting for the next direct call.
const maxIdleWorkers = 4

// dispatch runs a direct call on an idle worker goroutine, or on a new one. A call
// to a plugin runs deep enough (the pipeline, then gRPC) that a new goroutine grew
// its stack, copying it, several times per call: 5% of the process's CPU in a
// profile of plugin echo calls. A worker's stack stays grown for the next call.
func (c *stdioConn) dispatch(run func()) {
	select {
	case c.work <- run:
	default:
		c.workers.Add(1)
		go c.worker(run)
	}
}

func (c *stdioConn) worker(run func()) {
	defer c.workers.Done()
	for {
		run()
		if c.idleWorkers.Add(1) > maxIdleWorkers {
			c.idleWorkers.Add(-1)
			return
		}
		select {
		case run = <-c.work:
			c.idleWorkers.Add(-1)
		case <-c.closed:
			return
		}
	}
}

type directCalls struct {
	s  *Server
	ss *gomcp.ServerSession
}

// directParams are the tools/call params the reader answers itself: no _meta
// other than a progress token, and none of the 2026-07-28 protocol's fields.
type directParams struct {
	Meta           map[string]any  `json:"_meta,omitempty"`
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	InputResponses json.RawMessage `json:"inputResponses,omitempty"`
	RequestState   json.RawMessage `json:"requestState,omitempty"`
}

// serveDirect answers a tools/call of an initialized session without the go-sdk's
// request handling, which is the same middleware call (Server.call) behind two
// more decodings of the params, each with a 32 KiB buffer of its own (the
// collector was a quarter of the host's CPU), and another goroutine. It reports
// false, and the go-sdk handles the message, for anything else: other methods, a
// session not yet initialized, params it would refuse or that carry _meta other
// than progressToken (the 2026-07-28 protocol's fields). A notifications/cancelled
// for a call answered here cancels it (and goes on to the go-sdk too).
func (c *stdioConn) serveDirect(msg jsonrpc.Message) bool {
	req, ok := msg.(*jsonrpc.Request)
	d := c.direct.Load()
	if !ok || d == nil {
		return false
	}
	if req.Method == "notifications/cancelled" && !req.IsCall() {
		var p struct {
			RequestID any `json:"requestId"`
		}
		if _, err := segjson.Parse(req.Params, &p, segjson.DontMatchCaseInsensitiveStructFields); err == nil {
			if id, err := jsonrpc.MakeID(p.RequestID); err == nil {
				c.mu.Lock()
				cancel := c.running[id]
				c.mu.Unlock()
				if cancel != nil {
					cancel()
				}
			}
		}
		return false
	}
	if req.Method == "initialize" && req.IsCall() {
		if !c.initialized {
			c.initialized = true
			return false
		}
		_ = c.Write(context.Background(), &jsonrpc.Response{ID: req.ID, Error: &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: "invalid request: this session is already initialized, and initialize may be sent once per session; to start over, end this session (close stdin) and launch toolhost mcp again"}})
		return true
	}
	if req.Method != "tools/call" || !req.IsCall() || d.ss.InitializeParams() == nil {
		return false
	}
	var p directParams
	if _, err := segjson.Parse(req.Params, &p, segjson.DontMatchCaseInsensitiveStructFields); err != nil || p.Name == "" ||
		len(p.InputResponses) > 0 || len(p.RequestState) > 0 || bytes.Equal(bytes.TrimSpace(req.Params), []byte("null")) {
		return false
	}
	for k := range p.Meta {
		if k != "progressToken" {
			return false
		}
	}
	c.mu.Lock()
	select {
	case <-c.closed:
		c.mu.Unlock()
		return false
	default:
	}
	if _, dup := c.running[req.ID]; dup {
		c.mu.Unlock()
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	if c.running == nil {
		c.running = map[jsonrpc.ID]context.CancelFunc{}
	}
	c.running[req.ID] = cancel
	c.calls.Add(1)
	c.mu.Unlock()
	params := &gomcp.CallToolParamsRaw{Meta: p.Meta, Name: p.Name, Arguments: p.Arguments}
	c.dispatch(func() {
		defer c.calls.Done()
		defer func() {
			c.mu.Lock()
			delete(c.running, req.ID)
			c.mu.Unlock()
			cancel()
		}()
		res, err := d.s.call(ctx, &gomcp.CallToolRequest{Session: d.ss, Params: params})
		if err == nil {
			// The response line is written as is: jsonrpc.EncodeMessage would
			// encode the result a second time.
			id, _ := json.Marshal(req.ID.Raw())
			buf := bytes.NewBuffer(make([]byte, 0, 256))
			buf.WriteString(`{"jsonrpc":"2.0","id":`)
			buf.Write(id)
			buf.WriteString(`,"result":`)
			enc := json.NewEncoder(buf)
			enc.SetEscapeHTML(false) // as the go-sdk encodes results
			if err = enc.Encode(res); err == nil {
				buf.Truncate(buf.Len() - 1) // Encode's newline
				buf.WriteString("}\n")
				_ = c.writeLine(buf.Bytes())
				c.answered()
				return
			}
			err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		_ = c.Write(ctx, &jsonrpc.Response{ID: req.ID, Error: err})
	})
	return true
}

func newStdioConn(r io.Reader, w io.Writer, limit, maxPending int, timeout time.Duration) *stdioConn {
	c := &stdioConn{limit: limit, w: w, timeout: timeout, incoming: make(chan jsonrpc.Message), work: make(chan func()),
		readErr: make(chan error, 1), closed: make(chan struct{}),
		out: make(chan []byte), wdone: make(chan struct{}), abandoned: make(chan struct{}), pending: make(chan struct{}, maxPending)}
	if cl, ok := r.(io.Closer); ok {
		c.closer = cl
	}
	go c.writeLoop()
	go c.readLoop(r)
	return c
}

// writeLoop writes what writeLine hands it, in order, until the connection closes.
// A write that waits for the client past the timeout fails the connection (see
// stalled).
func (c *stdioConn) writeLoop() {
	defer close(c.wdone)
	stall := time.AfterFunc(c.timeout, c.stalled)
	stall.Stop() // armed for each write
	for {
		var data []byte
		select {
		case data = <-c.out:
		case <-c.closed:
			return
		}
		stall.Reset(c.timeout)
		_, err := c.w.Write(data)
		stall.Stop()
		if err != nil {
			c.fail(fmt.Errorf("mcpserve: writing to the client: %w", err))
			return
		}
	}
}

// stalled fails the connection whose write has waited past the timeout, and
// closes w when it can, which ends the write.
func (c *stdioConn) stalled() {
	c.fail(&NotReadingError{Timeout: c.timeout})
	c.abandon()
}

// abandon closes the connection and gives up on the write under way: w is closed
// when it can be, which ends the write; otherwise the write ends by itself.
func (c *stdioConn) abandon() {
	c.Close()
	c.abandonedOnce.Do(func() {
		if wc, ok := c.w.(io.Closer); ok {
			_ = wc.Close()
		}
		close(c.abandoned)
	})
}

// fail closes the connection with cause, unless it failed already.
func (c *stdioConn) fail(cause error) {
	c.cause.CompareAndSwap(nil, &cause)
	c.Close()
}

// failure is what the connection was failed with, or nil.
func (c *stdioConn) failure() error {
	if p := c.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// answered gives back the token of a request now answered.
func (c *stdioConn) answered() {
	select {
	case <-c.pending:
	default:
	}
}

func (c *stdioConn) readLoop(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, over, err := c.readLine(br)
		switch {
		case over:
			c.writeError(jsonrpc.CodeInvalidRequest, fmt.Sprintf("message exceeds %d bytes; it was discarded", c.limit))
		case len(bytes.TrimSpace(line)) > 0:
			msg, derr := decodeMessage(line)
			if derr != nil {
				c.writeError(jsonrpc.CodeParseError, "parse error: not a JSON-RPC 2.0 message: "+derr.Error())
				break
			}
			if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
				select { // room for its answer (see pending)
				case c.pending <- struct{}{}:
				case <-c.closed:
					return
				}
			}
			if c.serveDirect(msg) {
				break
			}
			select {
			case c.incoming <- msg:
			case <-c.closed:
				return
			}
		}
		if err != nil {
			c.readErr <- err
			return
		}
	}
}

// readLine returns the next line; a line over the limit is drained and reported
// as over.
func (c *stdioConn) readLine(br *bufio.Reader) (line []byte, over bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > c.limit+1 {
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, over, err
	}
}

// writeError answers a message that could not be read, with a null id.
func (c *stdioConn) writeError(code int64, msg string) {
	m, _ := json.Marshal(msg)
	data := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":null,"error":{"code":%d,"message":%s}}`, code, m)
	_ = c.writeLine(append(data, '\n'))
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case msg := <-c.incoming:
		return msg, nil
	case err := <-c.readErr:
		c.readErr <- err
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, err
	case <-c.closed:
		return nil, errConnClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if _, ok := msg.(*jsonrpc.Response); ok {
		defer c.answered()
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(append(data, '\n'))
}

// writeLine hands one message, data, which ends with its newline, to the writer;
// it fails once the connection is closed.
func (c *stdioConn) writeLine(data []byte) error {
	select {
	case <-c.closed:
		return errConnClosed
	default:
	}
	select {
	case c.out <- data:
		return nil
	case <-c.closed:
		return errConnClosed
	}
}

func (c *stdioConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.closed)
		for _, cancel := range c.running {
			cancel()
		}
		c.mu.Unlock()
		if c.closer != nil {
			_ = c.closer.Close()
		}
	})
	return nil
}

func (c *stdioConn) SessionID() string { return "" }

// maxDepth is the deepest nesting decodeMessage accepts: the go-sdk's own limit.
const maxDepth = 1000

// decodeMessage is jsonrpc.DecodeMessage: the same decoder (segmentio's, with keys
// matched case-sensitively), the same depth limit, the same checks and results. But
// jsonrpc.DecodeMessage decodes through a segmentio Decoder, which allocates a
// 32 KiB buffer and is used twice per message: in a profile of tools/call through
// `toolhost mcp` these two 32 KiB allocations, their clearing and the collections
// they brought on were the largest cost in the process after the call itself.
func decodeMessage(data []byte) (jsonrpc.Message, error) {
	if err := checkDepth(data); err != nil {
		return nil, err
	}
	var msg struct {
		VersionTag string          `json:"jsonrpc"`
		ID         any             `json:"id,omitempty"`
		Method     json.RawMessage `json:"method,omitempty"`
		Params     json.RawMessage `json:"params,omitempty"`
		Result     json.RawMessage `json:"result,omitempty"`
		Error      *jsonrpc.Error  `json:"error,omitempty"`
	}
	if _, err := segjson.Parse(data, &msg, segjson.DontMatchCaseInsensitiveStructFields); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
	}
	if msg.VersionTag != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %q; expected %q", msg.VersionTag, "2.0")
	}
	id, err := jsonrpc.MakeID(msg.ID)
	if err != nil {
		return nil, err
	}
	if len(msg.Method) > 0 {
		var method string
		if _, err := segjson.Parse(msg.Method, &method, segjson.DontMatchCaseInsensitiveStructFields); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: %w", err)
		}
		return &jsonrpc.Request{Method: method, ID: id, Params: msg.Params}, nil
	}
	if !id.IsValid() {
		return nil, errors.New("invalid request: a response without an id")
	}
	resp := &jsonrpc.Response{ID: id, Result: msg.Result}
	if msg.Error != nil {
		resp.Error = msg.Error
	}
	return resp, nil
}

// checkDepth refuses JSON nested deeper than maxDepth, before the decoder, which
// recurses per level, sees it.
func checkDepth(data []byte) error {
	depth, inString, escaped := 0, false, false
	for _, b := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > maxDepth {
				return fmt.Errorf("json: exceeded maximum nesting depth of %d", maxDepth)
			}
		case b == '}' || b == ']':
			depth--
		}
	}
	return nil
}

package mcpserve

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/tracectx"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// sessionKey carries a call's *gomcp.ServerSession in its context, for asks.
type sessionKey struct{}

// middleware answers tools/list and tools/call from the registry; the SDK handles
// everything else (initialize, ping, logging/setLevel, cancellation).
func (s *Server) middleware(next gomcp.MethodHandler) gomcp.MethodHandler {
	return func(ctx context.Context, method string, req gomcp.Request) (gomcp.Result, error) {
		switch method {
		case "tools/list":
			r, ok := req.(*gomcp.ListToolsRequest)
			if !ok || r.Session == nil {
				break
			}
			ctx, stop := s.closing(ctx, nil)
			defer stop()
			if err := s.awaitRelease(ctx); err != nil {
				return nil, err
			}
			v := s.refresh()
			st := s.sessionOf(r.Session)
			s.mu.Lock()
			st.view = v
			s.mu.Unlock()
			tools := v.tools
			if tools == nil {
				tools = []*gomcp.Tool{}
			}
			res := &gomcp.ListToolsResult{Tools: tools}
			res.CacheScope = "public"
			return res, nil
		case "tools/call":
			r, ok := req.(*gomcp.CallToolRequest)
			if !ok || r.Session == nil || r.Params == nil {
				break
			}
			return s.call(ctx, r)
		}
		return next(ctx, method, req)
	}
}

// closing returns ctx ended also by Close, and by the end of the session st (nil:
// none), and the function that lets it go. The go-sdk closes a session only once
// its requests have returned, so a call would keep Close (and toolhost mcp
// --http's shutdown), or an HTTP client's DELETE, waiting until it ended by itself.
func (s *Server) closing(ctx context.Context, st *session) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	ends, why := s.ctx, "toolhost mcp is shutting down (its MCP server closed)"
	if st != nil {
		ends, why = st.ctx, "the session was closed (its client ended it, or toolhost mcp is shutting down)"
	}
	stop := context.AfterFunc(ends, func() { cancel(errors.New(why)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// lookup finds the tool name in the view the session last listed (else the current
// one). A tool not in it is looked for again after each registry change until it is
// served or every served Location has made its first attempt to start each of its
// sources (location.Location.Started: each bounded by its start timeout, a plugin's
// build first): a call that comes before its source is up waits for that source,
// not for the others. It reports false when the tool is not served then, or ctx
// ended.
func (s *Server) lookup(ctx context.Context, st *session, name string) (served, bool) {
	s.mu.Lock()
	v := st.view
	s.mu.Unlock()
	if v == nil {
		v = s.refresh()
	}
	if t, ok := v.byName[name]; ok {
		return t, true
	}
	for {
		changed := s.opts.Registry.Changed()
		t, ok := s.refresh().byName[name]
		if ok {
			return t, true
		}
		s.mu.Lock()
		var starting []<-chan struct{}
		for _, loc := range s.locs {
			select {
			case <-loc.Started():
			default:
				starting = append(starting, loc.Started())
			}
		}
		s.mu.Unlock()
		if len(starting) == 0 {
			return served{}, false
		}
		select {
		case <-changed:
		case <-starting[0]: // then look again, and wait for the next one still starting
		case <-ctx.Done():
			return served{}, false
		}
	}
}

// call settles one tools/call on the view the session last listed; a tool whose
// source is still starting is waited for (see lookup).
func (s *Server) call(ctx context.Context, req *gomcp.CallToolRequest) (*gomcp.CallToolResult, error) {
	st := s.sessionOf(req.Session)
	ctx, stop := s.closing(ctx, st)
	defer stop()
	name := req.Params.Name
	s.mu.Lock()
	if st.calls >= s.opts.MaxCallsPerSession {
		s.mu.Unlock()
		return nil, &jsonrpc.Error{Code: codeLimit, Data: json.RawMessage(fmt.Sprintf(`{"limit":%d,"scope":"session"}`, s.opts.MaxCallsPerSession)),
			Message: fmt.Sprintf("tool %q: refused: this session has %d calls in flight, the most toolhost mcp runs at once for one session; call again once one has ended",
				name, s.opts.MaxCallsPerSession)}
	}
	if s.inFlight >= s.opts.MaxCalls {
		s.mu.Unlock()
		return nil, &jsonrpc.Error{Code: codeLimit, Data: json.RawMessage(fmt.Sprintf(`{"limit":%d,"scope":"host"}`, s.opts.MaxCalls)),
			Message: fmt.Sprintf("tool %q: refused: toolhost mcp has %d calls in flight across all its sessions, the most it runs at once; call again once one has ended",
				name, s.opts.MaxCalls)}
	}
	st.calls++
	s.inFlight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		st.calls--
		s.inFlight--
		s.mu.Unlock()
	}()
	if err := s.awaitRelease(ctx); err != nil {
		return nil, err
	}
	t, ok := s.lookup(ctx, st, name)
	if !ok {
		return &gomcp.CallToolResult{
			IsError: true,
			Content: []gomcp.Content{&gomcp.TextContent{Text: fmt.Sprintf("unknown tool %q: it is not one of the tools listed", name)}},
		}, nil
	}
	callID := "call_" + rand.Text()
	key := callKey{session: st.id, call: callID}
	s.mu.Lock()
	s.calls[key] = req.Session
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.calls, key)
		s.mu.Unlock()
	}()

	ctx = tracectx.FromMeta(ctx, req.Params.Meta) // the client's trace, if it sent one
	ctx = context.WithValue(ctx, sessionKey{}, req.Session)
	ctx = sdk.WithInteractor(ctx, clientInteractor{req.Session})
	input := req.Params.Arguments
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage("{}") // arguments are optional in MCP
	}
	call := registry.Call{
		Name:  t.name,
		Input: input,
		Invocation: sdk.Invocation{
			SessionID:          st.id,
			Agent:              st.agent,
			AssistantMessageID: "mcp_" + rand.Text(),
			ToolCallID:         callID,
		},
	}
	if token := req.Params.GetProgressToken(); token != nil {
		p := newProgressSender(ctx, req.Session, token)
		defer p.finish()
		call.Progress = p.push
	}
	settlement, err := t.q.Settle(ctx, call)
	if err != nil {
		return nil, callError(name, err)
	}
	return result(settlement), nil
}

// codeLimit is the JSON-RPC error code of a request refused for a limit.
const codeLimit = -32000

// callError is the JSON-RPC error of a call that did not settle.
func callError(name string, err error) error {
	var defect *registry.DefectError
	kind := "operational failure"
	switch {
	case errors.Is(err, context.Canceled):
		kind = "interrupted"
	case errors.Is(err, context.DeadlineExceeded):
		kind = "interrupted (deadline)"
	case errors.As(err, &defect):
		kind = "defect"
	}
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("tool %q: %s: %v", name, kind, err)}
}

// result maps a settlement to a CallToolResult (see the package doc).
func result(st *registry.Settlement) *gomcp.CallToolResult {
	res := &gomcp.CallToolResult{IsError: st.IsError(), Content: make([]gomcp.Content, 0, len(st.Content))}
	for i, p := range st.Content {
		switch {
		case p.Type == sdk.PartText:
			res.Content = append(res.Content, &gomcp.TextContent{Text: p.Text})
		case p.Type == sdk.PartResource:
			rc := &gomcp.ResourceContents{URI: p.URI, MIMEType: p.MIMEType, Text: p.Text}
			if p.IsBlob() {
				rc.Text, rc.Blob = "", p.Data
			}
			res.Content = append(res.Content, &gomcp.EmbeddedResource{Resource: rc})
		case strings.HasPrefix(p.MIMEType, "image/"):
			res.Content = append(res.Content, &gomcp.ImageContent{MIMEType: p.MIMEType, Data: p.Data})
		case strings.HasPrefix(p.MIMEType, "audio/"):
			res.Content = append(res.Content, &gomcp.AudioContent{MIMEType: p.MIMEType, Data: p.Data})
		default:
			res.Content = append(res.Content, &gomcp.EmbeddedResource{Resource: &gomcp.ResourceContents{
				URI: "toolhost:content/" + strconv.Itoa(i), MIMEType: p.MIMEType, Blob: p.Data,
			}})
		}
	}
	if !st.IsError() && isObject(st.Structured) {
		res.StructuredContent = json.RawMessage(st.Structured)
	}
	if len(res.Content) == 0 && len(st.Structured) > 0 {
		// For clients that read only content (the MCP specification's advice).
		res.Content = append(res.Content, &gomcp.TextContent{Text: string(st.Structured)})
	}
	if len(st.ManagedPaths) > 0 {
		res.Meta = gomcp.Meta{"toolhost/managedPaths": st.ManagedPaths}
	}
	return res
}

// progressBuffer is how many progress events a call may queue for its client;
// more are dropped (the next one says as much).
const progressBuffer = 64

// progressSender forwards a call's progress to its client in order, without
// blocking the executor.
type progressSender struct {
	ctx   context.Context
	ss    *gomcp.ServerSession
	token any

	mu     sync.Mutex
	closed bool
	ch     chan sdk.Progress
	done   chan struct{}
}

func newProgressSender(ctx context.Context, ss *gomcp.ServerSession, token any) *progressSender {
	p := &progressSender{ctx: ctx, ss: ss, token: token, ch: make(chan sdk.Progress, progressBuffer), done: make(chan struct{})}
	go p.run()
	return p
}

func (p *progressSender) push(ev sdk.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.ch <- ev:
	default:
	}
}

func (p *progressSender) run() {
	defer close(p.done)
	for ev := range p.ch {
		if p.ctx.Err() != nil {
			continue
		}
		_ = p.ss.NotifyProgress(p.ctx, &gomcp.ProgressNotificationParams{
			ProgressToken: p.token, Progress: ev.Progress, Total: ev.Total, Message: ev.Message,
		})
	}
}

// finish sends what is queued, before the call's result.
func (p *progressSender) finish() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.ch)
	}
	p.mu.Unlock()
	<-p.done
}

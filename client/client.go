// Package client is a typed Go client of the serve API (`toolhost serve` and
// `toolhost dev`; see internal/servepb/serve.proto for the protocol), for session
// runners written in Go.
//
//	c, err := client.Dial(ctx, "unix:///run/user/1000/toolhost.sock", "")
//	loc, _, err := c.ActivateLocation(ctx, "/path/to/workspace")
//	req, err := c.PrepareRequest(ctx, loc.ID, "anthropic")
//	s, err := c.Settle(ctx, req.ID, client.Call{Name: "upper", Input: in, Invocation: inv}, onProgress) // nil: unary
//	// err: errors.Is(err, context.Canceled) for an interruption, *client.CallError
//	// for a defect or an operational failure; s.Outcome otherwise.
//
// A Client is one client handle of the serve API (OpenClient), on a connection of its
// own (Dial) or on one it shares with other Clients (New): the Requests it prepares
// belong to it, and no other Client — on the same connection or not — can see,
// settle, cancel or release them. It is safe for concurrent use.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/servepb"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// maxMessageBytes matches the server's message limit.
const maxMessageBytes = 64 << 20

// Errors that calls return (match them with errors.Is). The server's message is kept
// in the error's text.
var (
	// ErrNotFound: no such Location, Request, call, ask, question or sampling
	// request — or it belongs to another connection or client handle.
	ErrNotFound = errors.New("client: not found")
	// ErrUnauthenticated: the token is missing or wrong.
	ErrUnauthenticated = errors.New("client: unauthenticated")
	// ErrUnavailable: the server is unreachable or shutting down.
	ErrUnavailable = errors.New("client: unavailable")
	// ErrInvalidArgument: the request was malformed.
	ErrInvalidArgument = errors.New("client: invalid argument")
	// ErrActivation: the Location could not be activated (the message says why:
	// config problems, compiler output, plugin stderr).
	ErrActivation = errors.New("client: activation failed")
)

// Client is a client handle of a serve API server.
type Client struct {
	conn *grpc.ClientConn // owned by the Client (Dial), or nil (New)
	rpc  servepb.ToolhostClient

	mu     sync.Mutex
	id     string // the handle, once opened
	closed bool
}

// New returns a Client on a connection that the caller owns and may share with
// other Clients (each is isolated from the others: see the package doc). It opens
// its handle with its first call that needs one. Close it when done; closing it
// leaves cc open.
func New(cc grpc.ClientConnInterface) *Client {
	return &Client{rpc: servepb.NewToolhostClient(cc)}
}

// Dial connects to target: "unix:///path/to/sock", "unix:/path" or an absolute path
// for a unix socket; "host:port" for TCP (serve listens on loopback only). token, if
// not empty, is sent with every call as "authorization: Bearer <token>" (serve over
// TCP requires it; read it from serve's token file). Dial does not wait for the
// connection; the first call does. Close the Client when done.
func Dial(ctx context.Context, target, token string) (*Client, error) {
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes), grpc.MaxCallSendMsgSize(maxMessageBytes)),
	}
	switch {
	case strings.HasPrefix(target, "/"):
		target = "unix://" + target
	case strings.HasPrefix(target, "unix:"):
	default:
		if _, _, err := net.SplitHostPort(target); err != nil {
			return nil, fmt.Errorf("client: target %q is neither a unix socket nor host:port: %w", target, err)
		}
		target = "passthrough:///" + target
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", target, err)
	}
	return &Client{conn: conn, rpc: servepb.NewToolhostClient(conn)}, nil
}

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("client: closed")

// handle returns the Client's handle, opening it on first use (a failed open is
// retried by the next call).
func (c *Client) handle(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return "", ErrClosed
	}
	if c.id != "" {
		return c.id, nil
	}
	resp, err := c.rpc.OpenClient(ctx, &servepb.OpenClientRequest{})
	if err != nil {
		return "", rpcError(ctx, "open client", err)
	}
	c.id = resp.ClientId
	return c.id, nil
}

// bearer sends the token with every call. The serve API runs on a unix socket or on
// loopback, so it does not insist on transport security.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// closeTimeout bounds CloseClient in Close.
const closeTimeout = 5 * time.Second

// Close closes the Client's handle, and its connection if Dial made it: the server
// releases the Client's Requests and interrupts its calls in flight. Idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	id, already := c.id, c.closed
	c.closed = true
	c.mu.Unlock()
	if already {
		return nil
	}
	var err error
	if id != "" {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_, err = c.rpc.CloseClient(ctx, &servepb.CloseClientRequest{ClientId: id})
		err = rpcError(ctx, "close client", err)
		cancel()
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnavailable) {
			err = nil // its connection, and with it the handle, ended already
		}
	}
	if c.conn != nil {
		// Closing the connection ends the handle anyway.
		return c.conn.Close()
	}
	return err
}

// rpcError maps a gRPC status to this package's errors, keeping the message;
// cancellation of ctx is returned as ctx's cause.
func rpcError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	st, _ := status.FromError(err)
	var kind error
	switch st.Code() {
	case codes.NotFound:
		kind = ErrNotFound
	case codes.Unauthenticated:
		kind = ErrUnauthenticated
	case codes.Unavailable:
		kind = ErrUnavailable
	case codes.InvalidArgument:
		kind = ErrInvalidArgument
	case codes.FailedPrecondition:
		kind = ErrActivation
	case codes.Canceled:
		return fmt.Errorf("client: %s: %s: %w", op, st.Message(), context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("client: %s: %s: %w", op, st.Message(), context.DeadlineExceeded)
	default:
		return fmt.Errorf("client: %s: %s (%s)", op, st.Message(), st.Code())
	}
	return fmt.Errorf("%w: %s: %s", kind, op, st.Message())
}

// Location is an active Location.
type Location struct {
	// ID is the Location's id: its canonical absolute directory.
	ID          string
	WorkspaceID string
	// Tools are the tools visible now, sorted by name.
	Tools []ToolSummary
	// Plugins are the plugins' conditions, in config order.
	Plugins []PluginStatus
}

// ToolSummary names one tool.
type ToolSummary struct {
	Name, Description string
}

// PluginStatus is one plugin's condition.
type PluginStatus struct {
	Name string
	// State is "running", "restarting", "failed" or "stopped"; Error says why when
	// not running.
	State, Error string
	// Generation counts starts (restarts and reloads); PID is the serving process.
	Generation uint32
	PID        int
}

func locationFrom(p *servepb.Location) Location {
	l := Location{ID: p.Id, WorkspaceID: p.WorkspaceId}
	for _, t := range p.Tools {
		l.Tools = append(l.Tools, ToolSummary{Name: t.Name, Description: t.Description})
	}
	for _, ps := range p.Plugins {
		l.Plugins = append(l.Plugins, PluginStatus{Name: ps.Name, State: ps.State, Error: ps.Error, Generation: ps.Generation, PID: int(ps.Pid)})
	}
	return l
}

// ActivateLocation activates the workspace at the absolute directory dir, or returns
// it with already set when it is active. It blocks until the Location's plugins are
// built and started; ctx bounds that. A failed activation is ErrActivation with the
// reason.
func (c *Client) ActivateLocation(ctx context.Context, dir string) (loc Location, already bool, err error) {
	resp, err := c.rpc.ActivateLocation(ctx, &servepb.ActivateLocationRequest{Directory: dir})
	if err != nil {
		return Location{}, false, rpcError(ctx, "activate "+dir, err)
	}
	return locationFrom(resp.Location), resp.AlreadyActive, nil
}

// DeactivateLocation deactivates a Location (for every client).
func (c *Client) DeactivateLocation(ctx context.Context, id string) error {
	_, err := c.rpc.DeactivateLocation(ctx, &servepb.DeactivateLocationRequest{LocationId: id})
	return rpcError(ctx, "deactivate "+id, err)
}

// ListLocations lists the active Locations, sorted by id.
func (c *Client) ListLocations(ctx context.Context) ([]Location, error) {
	resp, err := c.rpc.ListLocations(ctx, &servepb.ListLocationsRequest{})
	if err != nil {
		return nil, rpcError(ctx, "list locations", err)
	}
	out := make([]Location, len(resp.Locations))
	for i, l := range resp.Locations {
		out[i] = locationFrom(l)
	}
	return out, nil
}

// Request is a prepared Request: what to advertise to the model for one model
// request. Calls settle against it (Client.Settle with its ID).
type Request struct {
	ID string
	// Definitions are the tools to advertise, sorted by name; with a provider profile
	// their input schemas are adapted for it.
	Definitions []registry.Definition
	// Problems are the tools' model-compatibility problems for the provider.
	Problems []ToolProblem
}

// ToolProblem is one model-compatibility problem of one tool.
type ToolProblem struct {
	Tool, Pointer, Message string
}

// PrepareRequest captures a Request on Location locationID. provider is "",
// "openai", "anthropic" or "gemini". The Request offers what the Location's
// permission rules leave visible, or every tool with AllTools.
func (c *Client) PrepareRequest(ctx context.Context, locationID, provider string, opts ...PrepareOption) (*Request, error) {
	id, err := c.handle(ctx)
	if err != nil {
		return nil, err
	}
	var pc prepareConfig
	for _, o := range opts {
		o(&pc)
	}
	req := &servepb.PrepareRequestRequest{ClientId: id, LocationId: locationID, Provider: provider, AllTools: pc.allTools}
	resp, err := c.rpc.PrepareRequest(ctx, req)
	if err != nil {
		return nil, rpcError(ctx, "prepare request", err)
	}
	r := &Request{ID: resp.RequestId}
	for _, d := range resp.Definitions {
		r.Definitions = append(r.Definitions, definitionFrom(d))
	}
	for _, p := range resp.Problems {
		r.Problems = append(r.Problems, ToolProblem{Tool: p.Tool, Pointer: p.Pointer, Message: p.Message})
	}
	return r, nil
}

// PrepareOption changes what PrepareRequest asks for.
type PrepareOption func(*prepareConfig)

// prepareConfig is what the PrepareOptions of one PrepareRequest ask for.
type prepareConfig struct{ allTools bool }

// AllTools makes PrepareRequest offer every tool of the Location, those its
// permission rules deny outright included (the serve API's all_tools).
func AllTools() PrepareOption {
	return func(c *prepareConfig) { c.allTools = true }
}

// ReleaseRequest forgets a Request.
func (c *Client) ReleaseRequest(ctx context.Context, requestID string) error {
	id, err := c.handle(ctx)
	if err != nil {
		return err
	}
	_, err = c.rpc.ReleaseRequest(ctx, &servepb.ReleaseRequestRequest{ClientId: id, RequestId: requestID})
	return rpcError(ctx, "release request", err)
}

// Call is one tool call to settle.
type Call struct {
	Name string
	// Input is the raw JSON input; empty means {}.
	Input json.RawMessage
	// Invocation identifies the call; ToolCallID is required.
	Invocation sdk.Invocation
}

// Kind classifies a CallError.
type Kind string

// The kinds of CallError.
const (
	Interrupted Kind = "interrupted"
	Defect      Kind = "defect"
	Operational Kind = "operational"
)

// CallError is a call that ended without a settlement. An interrupted one satisfies
// errors.Is(err, context.Canceled).
type CallError struct {
	Kind    Kind
	Message string
}

func (e *CallError) Error() string { return fmt.Sprintf("client: call %s: %s", e.Kind, e.Message) }

// Unwrap makes an interruption match context.Canceled.
func (e *CallError) Unwrap() error {
	if e.Kind == Interrupted {
		return context.Canceled
	}
	return nil
}

// Settle settles one call on Request requestID. progress, if set, receives the
// tool's progress events in order (some may be dropped under load), from the calling
// goroutine; without it the call is one unary round trip (the serve API's Settle),
// with it a stream (SettleStream). It returns the settlement, whatever its outcome
// (its Hint is the server's runner_hint: for the runner and the person, never for
// the model), or an error: an interruption (errors.Is(err, context.Canceled): ctx
// was cancelled, CancelCall, the Client closed, the Location closed, the server shut
// down), a *CallError of kind Defect or Operational, or an RPC error (ErrNotFound for
// a Request of another Client).
func (c *Client) Settle(ctx context.Context, requestID string, call Call, progress func(sdk.Progress)) (*registry.Settlement, error) {
	id, err := c.handle(ctx)
	if err != nil {
		return nil, err
	}
	req := &servepb.SettleRequest{
		ClientId:  id,
		RequestId: requestID,
		Name:      call.Name,
		InputJson: string(call.Input),
		Invocation: &servepb.Invocation{
			SessionId:          call.Invocation.SessionID,
			Agent:              call.Invocation.Agent,
			AssistantMessageId: call.Invocation.AssistantMessageID,
			ToolCallId:         call.Invocation.ToolCallID,
		},
	}
	if progress == nil {
		resp, err := c.rpc.Settle(ctx, req)
		if err != nil {
			return nil, rpcError(ctx, "settle "+call.Name, err)
		}
		switch r := resp.Result.(type) {
		case *servepb.SettleResponse_Settlement:
			return settlementFrom(r.Settlement, resp.RunnerHint), nil
		case *servepb.SettleResponse_Error:
			return nil, callErrorFrom(r.Error)
		}
		return nil, &CallError{Kind: Operational, Message: "the server sent no result"}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream if we return early
	stream, err := c.rpc.SettleStream(ctx, req)
	if err != nil {
		return nil, rpcError(ctx, "settle "+call.Name, err)
	}
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return nil, &CallError{Kind: Operational, Message: "the stream ended without a final event"}
		}
		if err != nil {
			return nil, rpcError(ctx, "settle "+call.Name, err)
		}
		switch e := ev.Event.(type) {
		case *servepb.SettleEvent_Progress:
			progress(sdk.Progress{Progress: e.Progress.Progress, Total: e.Progress.Total, Message: e.Progress.Message})
		case *servepb.SettleEvent_Settlement:
			drain(stream)
			return settlementFrom(e.Settlement, ev.RunnerHint), nil
		case *servepb.SettleEvent_Error:
			drain(stream)
			return nil, callErrorFrom(e.Error)
		}
	}
}

func callErrorFrom(e *servepb.CallError) *CallError {
	kind := Operational
	switch e.Kind {
	case servepb.CallError_INTERRUPTED:
		kind = Interrupted
	case servepb.CallError_DEFECT:
		kind = Defect
	}
	return &CallError{Kind: kind, Message: e.Message}
}

// drain reads the end of a stream whose final event has come: the server ends it
// right after, and ending it cleanly is cheaper for both sides than cancelling it.
func drain(stream grpc.ServerStreamingClient[servepb.SettleEvent]) {
	for {
		if _, err := stream.Recv(); err != nil {
			return
		}
	}
}

// CancelCall interrupts a call in flight; its Settle returns an interruption.
func (c *Client) CancelCall(ctx context.Context, requestID, toolCallID string) error {
	id, err := c.handle(ctx)
	if err != nil {
		return err
	}
	_, err = c.rpc.CancelCall(ctx, &servepb.CancelCallRequest{ClientId: id, RequestId: requestID, ToolCallId: toolCallID})
	return rpcError(ctx, "cancel call", err)
}

// Ask is a permission ask waiting for an answer.
type Ask struct {
	ID         string
	LocationID string
	Request    permission.Request
}

// AskEvent is one WatchAsks event: an ask to answer, or the id of an ask that no
// longer waits.
type AskEvent struct {
	Asked    *Ask
	Resolved string
}

// AskWatch is an open WatchAsks stream.
type AskWatch struct{ s syncedStream[AskEvent] }

// WatchAsks watches the permission asks this Client may answer, in one Location
// (locationID) or all (""). It returns once the server has registered the watch, so
// asks raised from then on wait for this watcher. Read events with Next; Close it
// (or cancel ctx) when done.
func (c *Client) WatchAsks(ctx context.Context, locationID string) (*AskWatch, error) {
	id, err := c.handle(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.WatchAsks(ctx, &servepb.WatchAsksRequest{ClientId: id, LocationId: locationID})
	if err != nil {
		cancel()
		return nil, rpcError(ctx, "watch asks", err)
	}
	s, err := openSynced(cancel, func() (*AskEvent, error) {
		ev, err := stream.Recv()
		if err != nil {
			return nil, rpcError(ctx, "watch asks", err)
		}
		switch e := ev.Event.(type) {
		case *servepb.AskEvent_Asked:
			return &AskEvent{Asked: askFrom(e.Asked)}, nil
		case *servepb.AskEvent_Resolved:
			return &AskEvent{Resolved: e.Resolved}, nil
		}
		return nil, nil // synced
	})
	if err != nil {
		return nil, err
	}
	return &AskWatch{s}, nil
}

// Next blocks for the next event. It returns an error when the watch ends (ctx
// cancelled, Close, the server shutting down).
func (w *AskWatch) Next() (AskEvent, error) { return w.s.next() }

// Close ends the watch.
func (w *AskWatch) Close() { w.s.cancel() }

// syncedStream is a watch stream that sends the events already pending when it
// began, then a marker (synced), then new events. recv returns the next event, or nil
// for the marker.
type syncedStream[E any] struct {
	cancel  context.CancelFunc
	recv    func() (*E, error)
	pending []E // the events before the marker, not yet returned by next
}

// openSynced reads up to the synced marker, so the watch is registered when it
// returns; on an error it cancels the stream.
func openSynced[E any](cancel context.CancelFunc, recv func() (*E, error)) (syncedStream[E], error) {
	s := syncedStream[E]{cancel: cancel, recv: recv}
	for {
		ev, err := recv()
		if err != nil {
			cancel()
			return s, err
		}
		if ev == nil {
			return s, nil
		}
		s.pending = append(s.pending, *ev)
	}
}

// next returns the next event, blocking.
func (s *syncedStream[E]) next() (E, error) {
	if len(s.pending) > 0 {
		ev := s.pending[0]
		s.pending = s.pending[1:]
		return ev, nil
	}
	for {
		ev, err := s.recv()
		if err != nil {
			var zero E
			return zero, err
		}
		if ev != nil {
			return *ev, nil
		}
	}
}

func askFrom(p *servepb.Ask) *Ask {
	a := &Ask{ID: p.Id, LocationID: p.LocationId, Request: permission.Request{
		SessionID: p.SessionId,
		Agent:     p.Agent,
		Source:    permission.Source{Type: p.SourceType, Tool: p.SourceTool, MessageID: p.MessageId, CallID: p.CallId},
		Action:    p.Action,
		Resources: p.Resources,
		Save:      p.Save,
	}}
	if p.MetadataJson != "" {
		_ = json.Unmarshal([]byte(p.MetadataJson), &a.Request.Metadata)
	}
	return a
}

// AnswerAsk answers a pending ask.
func (c *Client) AnswerAsk(ctx context.Context, id string, answer permission.Answer) error {
	var reply servepb.AnswerAskRequest_Reply
	switch answer.Reply {
	case permission.Once:
		reply = servepb.AnswerAskRequest_ONCE
	case permission.Always:
		reply = servepb.AnswerAskRequest_ALWAYS
	case permission.Reject:
		reply = servepb.AnswerAskRequest_REJECT
	default:
		return fmt.Errorf("%w: reply %q (want once, always or reject)", ErrInvalidArgument, answer.Reply)
	}
	cid, err := c.handle(ctx)
	if err != nil {
		return err
	}
	_, err = c.rpc.AnswerAsk(ctx, &servepb.AnswerAskRequest{ClientId: cid, Id: id, Reply: reply, Message: answer.Message})
	return rpcError(ctx, "answer ask "+id, err)
}

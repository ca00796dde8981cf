package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/tracectx"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// hostPlugin is the host side of the go-plugin gRPC plugin.
type hostPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

type hostConn struct {
	client pluginpb.PluginClient
	broker *plugin.GRPCBroker
}

func (hostPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("plugins: the host side serves no plugin")
}

func (hostPlugin) GRPCClient(_ context.Context, broker *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &hostConn{client: pluginpb.NewPluginClient(conn), broker: broker}, nil
}

// toolsServer is the Tools capability of one instance. It can reach nothing but that
// instance's registrations.
type toolsServer struct {
	pluginpb.UnimplementedToolsServer
	inst *Instance
}

func (s *toolsServer) Register(_ context.Context, req *pluginpb.RegisterRequest) (*pluginpb.RegisterResponse, error) {
	// Not abandoned when the plugin gives up on the call: the registration would
	// then be made all the same, under an id the plugin believes free.
	if err := s.inst.registerUntil(s.inst.scope.Context(), req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pluginpb.RegisterResponse{}, nil
}

// registerUntil is registerBatch, abandoned when ctx ends: the host's shutdown or a
// start that gave up never waits for a registration's schemas to compile. The
// abandoned registration finishes by itself (its cost is bounded: see
// registry.MaxBatchSchemaNodes); ctx must end no later than the instance's scope,
// so it is then refused (the registry refuses an owner that closed) or released
// with the scope's other registrations.
func (inst *Instance) registerUntil(ctx context.Context, req *pluginpb.RegisterRequest) error {
	done := make(chan error, 1)
	go func() { done <- inst.registerBatch(req) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// registerBatch registers a batch the plugin sent, over the Tools capability or in
// its activation's response.
func (inst *Instance) registerBatch(req *pluginpb.RegisterRequest) error {
	tools := make(map[string]sdk.Tool, len(req.Tools))
	for _, def := range req.Tools {
		if _, dup := tools[def.Name]; dup {
			return fmt.Errorf("plugin %q: tool %q appears twice in one batch", inst.cfg.Name, def.Name)
		}
		if len(def.Title) > maxTitleBytes {
			return fmt.Errorf("plugin %q: tool %q has a title of %d bytes, over the %d a title may have; a title is a short name for people (say more in the description)",
				inst.cfg.Name, def.Name, len(def.Title), maxTitleBytes)
		}
		tools[def.Name] = sdk.Tool{
			Description:      def.Description,
			InputSchema:      def.InputSchema,
			OutputSchema:     def.OutputSchema,
			StructuredSchema: def.StructuredSchema,
			Title:            def.Title,
			Execute:          inst.bounded(def.Name, inst.executor(req.Registration, def.Name)),
		}
		if a := def.Annotations; a != nil {
			t := tools[def.Name]
			t.Annotations = &sdk.Annotations{
				ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
				IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint,
			}
			tools[def.Name] = t
		}
	}
	err := inst.register(req.Registration, registry.Batch{
		Location:    inst.target.Location,
		Source:      registry.Source{Kind: "plugin", Name: inst.cfg.Name, Generation: inst.generation},
		Tools:       tools,
		Owner:       inst.scope,
		OwnerJoined: true, // bounded
		Overrides:   inst.cfg.Overrides,
		Limits:      inst.cfg.Limits,
	})
	if err != nil {
		inst.log.logs.Log(hclog.Warn, "refused a registration", "plugin", inst.cfg.Name, "error", err.Error())
	}
	return err
}

func (s *toolsServer) Close(_ context.Context, req *pluginpb.CloseRequest) (*pluginpb.CloseResponse, error) {
	if err := s.inst.closeRegistration(req.Registration); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return &pluginpb.CloseResponse{}, nil
}

// errCallTimeout is the cause of a call's context when Config.CallTimeout ends it.
var errCallTimeout = errors.New("plugins: call timeout")

// bounded gives every execution of exec one context that ends with the caller's,
// with the instance's scope, and, once the host's permission check
// (Config.Authorize) has passed, with Config.CallTimeout. The registry leaves the
// scope to it (registry.Batch.OwnerJoined): the registry's join and a timeout's
// context of their own were two contexts, two channels and two registrations more
// per call, with the call's RPC registering under the last.
//
// A call that runs out of its timeout is cancelled in the plugin (the cancellation
// crosses the process boundary; the plugin sees no deadline for it) and settles as a
// tool failure saying it timed out, as an MCP tool's does; the end of the caller's
// own context stays an interruption, and the scope's close is the registry's to
// classify.
func (inst *Instance) bounded(authored string, exec sdk.Executor) sdk.Executor {
	timeout, authorize, watch := inst.cfg.CallTimeout, inst.cfg.Authorize, inst.watch
	name, _ := registry.NormalizeName(authored) // registration refuses names that fail
	return func(ctx context.Context, inv sdk.Invocation, input json.RawMessage) (sdk.Output, error) {
		callCtx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		watched := watch.add(cancel)
		defer watch.remove(watched)
		if authorize != nil {
			if err := authorize(callCtx, name, inv); err != nil {
				return sdk.Output{}, err
			}
		}
		// A cancellation, not a deadline: gRPC would send a deadline along (a
		// grpc-timeout header on every call, and a timer per call in the plugin),
		// and the cancellation crosses the boundary without it. In alternating
		// runs the call without the deadline was faster in 6 of 7 runs with 64
		// callers (by 2-12%). The caller's own deadline, if any, still goes along.
		watch.arm(watched)
		out, err := exec(callCtx, inv, input)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(callCtx), errCallTimeout) {
			return sdk.Output{}, &sdk.ToolFailure{
				Message: fmt.Sprintf("the plugin tool %q did not finish within its timeout of %s and was cancelled", name, timeout),
				Err:     err,
			}
		}
		return out, err
	}
}

// executor proxies one tool's executions to the plugin process. A call with a
// progress listener streams (Execute); one without takes a single round trip (Call),
// fetching a result too large for one message with Fetch.
func (inst *Instance) executor(registration uint64, name string) sdk.Executor {
	source := registry.Source{Kind: "plugin", Name: inst.cfg.Name}.ID()
	return func(ctx context.Context, inv sdk.Invocation, input json.RawMessage) (sdk.Output, error) {
		inst.inFlight.Add(1)
		defer inst.inFlight.Add(-1)
		ctx, span := tracectx.StartPluginCall(ctx, source, name)
		defer span.End()
		// The request, its invocation and its trace context in one allocation; no
		// invocation at all when it is empty (the plugin's sdk takes nil as empty).
		msgs := &struct {
			req   pluginpb.ExecuteRequest
			inv   pluginpb.Invocation
			trace [tracectx.BinaryLen]byte
		}{}
		req := &msgs.req
		req.Registration, req.Tool, req.Input = registration, name, input
		if tc, state := tracectx.AppendBinary(msgs.trace[:0], ctx); len(tc) > 0 {
			req.Trace, req.TraceState = tc, state
		}
		if inv != (sdk.Invocation{}) {
			msgs.inv.SessionId, msgs.inv.Agent = inv.SessionID, inv.Agent
			msgs.inv.AssistantMessageId, msgs.inv.ToolCallId = inv.AssistantMessageID, inv.ToolCallID
			req.Invocation = &msgs.inv
		}
		if len(inst.cfg.Grants) > 0 {
			req.Call = inst.nextCall.Add(1)
			inst.calls.Store(req.Call, ctx)
			defer inst.calls.Delete(req.Call)
		}
		a := &assembly{inst: inst, name: name}
		if !sdk.ProgressWanted(ctx) && !inst.noCall.Load() {
			res, err := inst.rpc.Call(ctx, req)
			switch {
			case status.Code(err) == codes.Unimplemented:
				// A plugin built without Call (an older sdk, or no sdk): the call did
				// not run, so it takes the streaming path, now and from now on.
				inst.noCall.Store(true)
			case err != nil:
				return sdk.Output{}, inst.callError(ctx, err)
			case len(res.Output) > 0 && len(res.Events) == 0 && res.Fetch == 0:
				// The flat result (ActivateRequest.flat_results): an output alone.
				return sdk.Output{JSON: res.Output}, nil
			case res.Fetch != 0:
				// A stream's context must end when the call returns, whatever path
				// returns; a unary call's ends with the call.
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				stream, err := inst.rpc.Fetch(ctx, &pluginpb.FetchRequest{Fetch: res.Fetch})
				if err != nil {
					return sdk.Output{}, inst.callError(ctx, err)
				}
				return a.read(ctx, stream)
			default:
				for _, ev := range res.Events {
					if out, done, err := a.add(ctx, ev); done || err != nil {
						return out, err
					}
				}
				return sdk.Output{}, fmt.Errorf("plugins: plugin %q: call %q: no result", inst.cfg.Name, name)
			}
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := inst.rpc.Execute(ctx, req)
		if err != nil {
			return sdk.Output{}, inst.callError(ctx, err)
		}
		return a.read(ctx, stream)
	}
}

// assembly rebuilds one result from its events.
type assembly struct {
	inst            *Instance
	name            string
	out, structured bytes.Buffer
	content         []sdk.Part
	part            *bytes.Buffer // the part being filled, nil between parts
}

// read consumes a stream of events up to the terminal one, then its trailers.
func (a *assembly) read(ctx context.Context, stream interface {
	Recv() (*pluginpb.ExecuteEvent, error)
}) (sdk.Output, error) {
	for {
		ev, err := stream.Recv()
		if err == io.EOF {
			return sdk.Output{}, fmt.Errorf("plugins: plugin %q: execute %q: stream ended without a result", a.inst.cfg.Name, a.name)
		}
		if err != nil {
			return sdk.Output{}, a.inst.callError(ctx, err)
		}
		out, done, err := a.add(ctx, ev)
		if !done && err == nil {
			continue
		}
		// Read the trailers too, so the stream ends cleanly instead of being reset.
		if _, rerr := stream.Recv(); rerr != io.EOF && err == nil {
			return sdk.Output{}, fmt.Errorf("plugins: plugin %q: execute %q: data after the result", a.inst.cfg.Name, a.name)
		}
		return out, err
	}
}

func (a *assembly) finishPart() {
	if a.part == nil {
		return
	}
	p := &a.content[len(a.content)-1]
	if p.Type == sdk.PartText || p.Type == sdk.PartResource && p.Data == nil {
		p.Text = a.part.String()
	} else if a.part.Len() > 0 { // an empty blob resource keeps its non-nil Data
		p.Data = a.part.Bytes()
	}
	a.part = nil
}

// add takes one event. done reports the terminal event: the result, or the
// classified error it carries.
func (a *assembly) add(ctx context.Context, ev *pluginpb.ExecuteEvent) (out sdk.Output, done bool, err error) {
	fail := func(format string, args ...any) (sdk.Output, bool, error) {
		return sdk.Output{}, true, fmt.Errorf("plugins: plugin %q: execute %q: "+format, append([]any{a.inst.cfg.Name, a.name}, args...)...)
	}
	switch e := ev.Event.(type) {
	case *pluginpb.ExecuteEvent_Progress:
		// The message is the plugin's text, passed on to whoever watches the call (a
		// serve API stream keeps 16 events): a status line, cut to loglimit.MaxText.
		sdk.ReportProgress(ctx, sdk.Progress{Progress: e.Progress.Progress, Total: e.Progress.Total, Message: loglimit.Cut(e.Progress.Message)})
	case *pluginpb.ExecuteEvent_Output:
		a.out.Write(e.Output)
	case *pluginpb.ExecuteEvent_Structured:
		a.structured.Write(e.Structured)
	case *pluginpb.ExecuteEvent_Part:
		a.finishPart()
		t := sdk.PartType(e.Part.Type)
		if t != sdk.PartText && t != sdk.PartMedia && t != sdk.PartResource {
			return fail("unknown content part type %q", e.Part.Type)
		}
		part := sdk.Part{Type: t, MIMEType: e.Part.MimeType, URI: e.Part.Uri}
		if t == sdk.PartResource && e.Part.Blob {
			part.Data = []byte{} // a blob, even when empty
		}
		a.content = append(a.content, part)
		a.part = new(bytes.Buffer)
	case *pluginpb.ExecuteEvent_PartData:
		if a.part == nil {
			return fail("part data before a part")
		}
		a.part.Write(e.PartData)
	case *pluginpb.ExecuteEvent_Done:
		a.finishPart()
		output := e.Done.Output
		if a.out.Len() > 0 {
			a.out.Write(e.Done.Output)
			output = a.out.Bytes()
		}
		result := sdk.Output{JSON: output, Content: a.content, HasContent: e.Done.HasContent}
		if e.Done.HasStructured {
			result.Structured = a.structured.Bytes()
		}
		return result, true, nil
	case *pluginpb.ExecuteEvent_Failure:
		switch e.Failure.Kind {
		case pluginpb.Failure_INVALID_INPUT:
			return sdk.Output{}, true, &sdk.InputDecodingError{Err: errors.New(e.Failure.Message)}
		case pluginpb.Failure_INVALID_OUTPUT:
			return sdk.Output{}, true, &sdk.OutputEncodingError{Err: errors.New(e.Failure.Message)}
		case pluginpb.Failure_DECLINED:
			return sdk.Output{}, true, &permission.DeclinedError{Action: a.name, Reason: "declined (in plugin " + a.inst.cfg.Name + "): " + e.Failure.Message}
		}
		return sdk.Output{}, true, &sdk.ToolFailure{Message: e.Failure.Message}
	case *pluginpb.ExecuteEvent_Defect:
		stack := e.Defect.Stack
		if len(stack) > maxDefectStack {
			stack = stack[:maxDefectStack] // its head: the panicking frames
		}
		return sdk.Output{}, true, &registry.DefectError{Tool: a.name, Value: fmt.Sprintf("in plugin %q: %s", a.inst.cfg.Name, loglimit.Cut(e.Defect.Message)), Stack: []byte(stack)}
	default:
		return fail("unexpected event %T", ev.Event)
	}
	return sdk.Output{}, false, nil
}

// callError translates an RPC error. Cancellation is the caller's (the registry
// reports it as an interruption); a dead process is a crash naming the exit status;
// anything else is the plugin's error, named.
func (inst *Instance) callError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if cerr := inst.exitedDuring(err); cerr != nil {
		// Its tools go now, not when the supervisor gets to the crash: a call made
		// after this one failed must find them closed (and wait for the successor),
		// not run on a dead process.
		inst.releaseAll()
		return cerr
	}
	return fmt.Errorf("plugins: plugin %q: %w", inst.cfg.Name, statusError(err))
}

// exitedDuring returns the crash when err is a broken connection and the process has
// exited (waiting a moment for the exit to be seen), so errors say how the process
// ended and quote its stderr instead of the transport's complaint.
func (inst *Instance) exitedDuring(err error) *supervise.CrashError {
	if c := status.Code(err); c != codes.Unavailable && c != codes.Canceled {
		return nil
	}
	select {
	case <-inst.exited:
		return inst.crash()
	case <-time.After(2 * time.Second):
		return nil
	}
}

// statusError turns a gRPC status into a plain error for people: the plugin's own
// message (cut to loglimit.MaxText: the plugin writes it, and the error goes to
// logs and runners), and for a broken connection what that means; never the gRPC
// code. It never wraps context errors: only the caller's own context decides
// interruption.
func statusError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := loglimit.Cut(st.Message())
	if st.Code() == codes.Unavailable {
		return fmt.Errorf("the connection to the plugin broke: %s", msg)
	}
	return errors.New(msg)
}

package plugins

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
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
	inst := s.inst
	tools := make(map[string]sdk.Tool, len(req.Tools))
	for _, def := range req.Tools {
		if _, dup := tools[def.Name]; dup {
			return nil, status.Errorf(codes.InvalidArgument, "plugin %q: tool %q appears twice in one batch", inst.cfg.Name, def.Name)
		}
		tools[def.Name] = sdk.Tool{
			Description:      def.Description,
			InputSchema:      def.InputSchema,
			OutputSchema:     def.OutputSchema,
			StructuredSchema: def.StructuredSchema,
			Execute:          inst.authorized(def.Name, inst.executor(req.Registration, def.Name)),
		}
	}
	err := inst.register(req.Registration, registry.Batch{
		Location: inst.target.Location,
		Source:   registry.Source{Kind: "plugin", Name: inst.cfg.Name, Generation: inst.generation},
		Tools:    tools,
		Owner:    inst.scope,
	})
	if err != nil {
		inst.cfg.Logger.Warn("refused a registration", "plugin", inst.cfg.Name, "error", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pluginpb.RegisterResponse{}, nil
}

func (s *toolsServer) Close(_ context.Context, req *pluginpb.CloseRequest) (*pluginpb.CloseResponse, error) {
	if err := s.inst.closeRegistration(req.Registration); err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	return &pluginpb.CloseResponse{}, nil
}

// authorized puts the host's permission check (Config.Authorize) in front of exec.
func (inst *Instance) authorized(authored string, exec sdk.Executor) sdk.Executor {
	authorize := inst.cfg.Authorize
	if authorize == nil {
		return exec
	}
	name, _ := registry.NormalizeName(authored) // registration refuses names that fail
	return func(ctx context.Context, inv sdk.Invocation, input json.RawMessage) (sdk.Output, error) {
		if err := authorize(ctx, name, inv); err != nil {
			return sdk.Output{}, err
		}
		return exec(ctx, inv, input)
	}
}

// executor proxies one tool's executions to the plugin process.
func (inst *Instance) executor(registration uint64, name string) sdk.Executor {
	return func(ctx context.Context, inv sdk.Invocation, input json.RawMessage) (sdk.Output, error) {
		inst.inFlight.Add(1)
		defer inst.inFlight.Add(-1)
		// The stream's context ends here, whatever path returns.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := inst.rpc.Execute(ctx, &pluginpb.ExecuteRequest{
			Registration: registration,
			Tool:         name,
			Input:        input,
			Invocation: &pluginpb.Invocation{
				SessionId:          inv.SessionID,
				Agent:              inv.Agent,
				AssistantMessageId: inv.AssistantMessageID,
				ToolCallId:         inv.ToolCallID,
			},
		})
		if err != nil {
			return sdk.Output{}, inst.callError(ctx, err)
		}
		var out, structured bytes.Buffer
		var content []sdk.Part
		var part *bytes.Buffer
		finishPart := func() {
			if part == nil {
				return
			}
			p := &content[len(content)-1]
			if p.Type == sdk.PartText {
				p.Text = part.String()
			} else {
				p.Data = part.Bytes()
			}
			part = nil
		}
		for {
			ev, err := stream.Recv()
			if err == io.EOF {
				return sdk.Output{}, fmt.Errorf("plugins: plugin %q: execute %q: stream ended without a result", inst.cfg.Name, name)
			}
			if err != nil {
				return sdk.Output{}, inst.callError(ctx, err)
			}
			switch e := ev.Event.(type) {
			case *pluginpb.ExecuteEvent_Progress:
				sdk.ReportProgress(ctx, sdk.Progress{Progress: e.Progress.Progress, Total: e.Progress.Total, Message: e.Progress.Message})
			case *pluginpb.ExecuteEvent_Output:
				out.Write(e.Output)
			case *pluginpb.ExecuteEvent_Structured:
				structured.Write(e.Structured)
			case *pluginpb.ExecuteEvent_Part:
				finishPart()
				t := sdk.PartType(e.Part.Type)
				if t != sdk.PartText && t != sdk.PartMedia {
					return sdk.Output{}, fmt.Errorf("plugins: plugin %q: execute %q: unknown content part type %q", inst.cfg.Name, name, e.Part.Type)
				}
				content = append(content, sdk.Part{Type: t, MIMEType: e.Part.MimeType})
				part = new(bytes.Buffer)
			case *pluginpb.ExecuteEvent_PartData:
				if part == nil {
					return sdk.Output{}, fmt.Errorf("plugins: plugin %q: execute %q: part data before a part", inst.cfg.Name, name)
				}
				part.Write(e.PartData)
			case *pluginpb.ExecuteEvent_Done:
				finishPart()
				output := e.Done.Output
				if out.Len() > 0 {
					out.Write(e.Done.Output)
					output = out.Bytes()
				}
				result := sdk.Output{JSON: output, Content: content, HasContent: e.Done.HasContent}
				if e.Done.HasStructured {
					result.Structured = structured.Bytes()
				}
				// Read the trailers too, so the stream ends cleanly instead of being
				// reset by the cancel above.
				if _, err := stream.Recv(); err != io.EOF {
					return sdk.Output{}, fmt.Errorf("plugins: plugin %q: execute %q: data after the result", inst.cfg.Name, name)
				}
				return result, nil
			case *pluginpb.ExecuteEvent_Failure:
				switch e.Failure.Kind {
				case pluginpb.Failure_INVALID_INPUT:
					return sdk.Output{}, &sdk.InputDecodingError{Err: errors.New(e.Failure.Message)}
				case pluginpb.Failure_INVALID_OUTPUT:
					return sdk.Output{}, &sdk.OutputEncodingError{Err: errors.New(e.Failure.Message)}
				case pluginpb.Failure_DECLINED:
					return sdk.Output{}, &permission.DeclinedError{Action: name, Reason: "declined (in plugin " + inst.cfg.Name + "): " + e.Failure.Message}
				}
				return sdk.Output{}, &sdk.ToolFailure{Message: e.Failure.Message}
			case *pluginpb.ExecuteEvent_Defect:
				return sdk.Output{}, &registry.DefectError{Tool: name, Value: fmt.Sprintf("in plugin %q: %s", inst.cfg.Name, e.Defect.Message), Stack: []byte(e.Defect.Stack)}
			default:
				return sdk.Output{}, fmt.Errorf("plugins: plugin %q: execute %q: unexpected event %T", inst.cfg.Name, name, ev.Event)
			}
		}
	}
}

// callError translates an RPC error. Cancellation is the caller's (the registry
// reports it as an interruption); a dead process is a crash naming the exit status;
// anything else is the plugin's error, named.
func (inst *Instance) callError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if status.Code(err) == codes.Unavailable || status.Code(err) == codes.Canceled {
		// The connection broke: if the process is gone, say how it ended.
		select {
		case <-inst.exited:
			cerr := &CrashError{Plugin: inst.cfg.Name, Generation: inst.generation, Stderr: inst.stderr.String(), Status: "exited"}
			if inst.proc != nil {
				cerr.Status = inst.proc.exitStatus()
			}
			return cerr
		case <-time.After(2 * time.Second):
		}
	}
	return fmt.Errorf("plugins: plugin %q: %w", inst.cfg.Name, statusError(err))
}

// statusError turns a gRPC status into a plain error with its message. It never
// wraps context errors: only the caller's own context decides interruption.
func statusError(err error) error {
	if st, ok := status.FromError(err); ok {
		return fmt.Errorf("%s (%s)", st.Message(), st.Code())
	}
	return err
}

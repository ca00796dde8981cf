package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/peercred"
	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/tracectx"
)

// Serve serves p as a toolhost plugin; it is a plugin binary's whole main. It logs
// with [Logger]'s logger (the host shows those logs), and returns only when the
// host ends the plugin or goes away; the process exits then.
//
// Run the binary with -debug to start it by hand, for example under a debugger: it
// prints a TOOLHOST_REATTACH=... line; export it where toolhost runs and the host
// attaches to this process instead of launching one. The map key is the binary's
// base name; it must match the plugin's name in the Location config. The process
// serves any number of hosts one after another, each with a fresh activation, until
// it is interrupted.
func Serve(p Plugin) {
	logger := processLogger()
	gp := &grpcPlugin{impl: p, logger: logger}
	config := &plugin.ServeConfig{
		HandshakeConfig: pluginpb.Handshake,
		Plugins:         plugin.PluginSet{pluginpb.PluginName: gp},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, serverOptions()...)...)
		},
		Logger: logger,
	}
	if !debugFlag() {
		// Only the host that launched this process may call it: other processes of
		// the same user (other plugins) are refused by the kernel-reported pid.
		host := hostPID()
		creds := peercred.Creds(func(p peercred.Peer) error {
			if p.PID != host {
				return fmt.Errorf("peer pid %d is not the host (pid %d)", p.PID, host)
			}
			return nil
		})
		if multiplexed() {
			// Every connection is a stream of the one go-plugin's server accepted,
			// which the sdk never sees: no peer to ask the kernel about. The host
			// token on each (below) is the check; the host multiplexes only where
			// this process's sandbox refuses connect(2), and checks its end itself.
			creds = insecure.NewCredentials()
		}
		var tokenOpts []grpc.ServerOption
		if token, ok := os.LookupEnv(pluginpb.HostTokenEnv); ok {
			os.Unsetenv(pluginpb.HostTokenEnv) // not for the plugin's own children
			if pluginpb.OffersConnToken() {
				// go-plugin picks pluginpb.ConnTokenVersion (served below): the host
				// presents the token once per connection.
				creds = pluginpb.ConnTokenServerCreds(token, creds)
			} else {
				tokenOpts = pluginpb.TokenServerOptions(token) // an older host: per call
			}
		}
		set := config.Plugins
		config.Plugins = nil
		config.VersionedPlugins = map[int]plugin.PluginSet{int(pluginpb.Handshake.ProtocolVersion): set, pluginpb.ConnTokenVersion: set}
		go exitWithParent()
		if activateAtStart(gp, logger) {
			config.VersionedPlugins[pluginpb.StartActivationVersion] = set
		} else {
			go warmUp() // for the Activate call
		}
		config.GRPCServer = func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, tokenOpts...)
			return grpc.NewServer(append(append(opts, serverOptions()...), grpc.Creds(creds))...)
		}
		plugin.Serve(config)
		return
	}
	go warmUp()
	serveDebug(config, p, logger)
}

// serveDebug serves hosts one after another, for as long as the process runs, each
// with a fresh activation. go-plugin's broker serves one host per server, so every
// host gets a server of its own: one is always waiting, and when a host connects to
// it the next is started and its socket renamed onto the public address (the one the
// reattach line names), so a host that attaches right after another detached never
// meets a used server. A server stops when its host's connection ends.
func serveDebug(config *plugin.ServeConfig, p Plugin, logger hclog.Logger) {
	interrupt := make(chan os.Signal, 1)
	signal.Notify(interrupt, os.Interrupt, syscall.SIGTERM)
	next := make(chan struct{}, 1)
	next <- struct{}{}
	var public string // the socket every host dials
	var servers sync.WaitGroup
	stopAll, cancelAll := context.WithCancel(context.Background())
	defer func() {
		cancelAll()
		servers.Wait()
		os.Remove(public)
	}()
	for {
		select {
		case <-interrupt:
			return
		case <-next:
		}
		ctx, cancel := context.WithCancel(stopAll)
		var attached, detached sync.Once
		cfg := *config
		cfg.Logger = quietClose{logger}
		cfg.Plugins = plugin.PluginSet{pluginpb.PluginName: &grpcPlugin{impl: p, logger: logger}}
		cfg.GRPCServer = func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(append(opts, serverOptions()...), grpc.StatsHandler(connEvents{
				begin: func() { attached.Do(func() { next <- struct{}{} }) },
				end:   func() { detached.Do(cancel) },
			}))...)
		}
		reattach := make(chan *plugin.ReattachConfig, 1)
		closed := make(chan struct{})
		cfg.Test = &plugin.ServeTestConfig{Context: ctx, ReattachConfigCh: reattach, CloseCh: closed}
		servers.Go(func() {
			plugin.Serve(&cfg)
			<-closed
		})
		rc := <-reattach
		if rc == nil {
			fmt.Fprintln(os.Stderr, "sdk: plugin failed to start in debug mode")
			os.Exit(1)
		}
		first := public == ""
		if first {
			public = rc.Addr.String() + ".debug"
		}
		if err := os.Rename(rc.Addr.String(), public); err != nil {
			fmt.Fprintf(os.Stderr, "sdk: debug mode: cannot serve at %s: %v\n", public, err)
			os.Exit(1)
		}
		if first {
			r := pluginpb.ReattachFrom(rc)
			r.Address = public
			line, _ := json.Marshal(map[string]pluginpb.Reattach{filepath.Base(os.Args[0]): r})
			fmt.Printf("plugin started in debug mode; run toolhost with:\n\n\t%s='%s'\n\n", pluginpb.ReattachEnv, line)
		} else {
			logger.Debug("ready for the next host")
		}
	}
}

// quietClose is the logger of go-plugin's server in debug mode. go-plugin stops a
// server whose host detached by closing its listener first, and its gRPC server
// then logs the failed accept as an error; a detach is normal, so that error is
// left out.
type quietClose struct{ hclog.Logger }

func (l quietClose) Error(msg string, args ...any) {
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, net.ErrClosed) {
			return
		}
	}
	l.Logger.Error(msg, args...)
}

// connEvents is a gRPC stats handler that reports connections beginning and ending.
type connEvents struct{ begin, end func() }

func (connEvents) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (connEvents) HandleRPC(context.Context, stats.RPCStats)                         {}
func (connEvents) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c connEvents) HandleConn(_ context.Context, s stats.ConnStats) {
	switch s.(type) {
	case *stats.ConnBegin:
		c.begin()
	case *stats.ConnEnd:
		c.end()
	}
}

// serverOptions configure the plugin's gRPC server: the protocol's codec and
// transport settings, and worker goroutines for the calls. Without workers every
// call runs on a new goroutine, whose stack grows (and is copied) a few times in the
// call's first microseconds: about a fifth of a small call's CPU in the plugin. A
// call that finds every worker busy gets a goroutine of its own, as before.
func serverOptions() []grpc.ServerOption {
	return append(pluginpb.ServerOptions(), grpc.NumStreamWorkers(streamWorkers))
}

// streamWorkers is the number of call workers: enough for 64 calls at once, the
// most the benchmarks make (BenchmarkConcurrentAlternating; BENCHMARKS.md has what
// the count changes). Calls beyond it get a goroutine of their own, as without
// workers. An idle worker keeps the stack it grew, a few KB.
const streamWorkers = 64

// warmUp builds, while the host is still connecting, what the activation's first
// derived schema would otherwise build while the host waits: the schema
// reflector's tables. It runs for an activation by a call only; one at the start
// (activateAtStart) builds them itself. (The protocol's messages need no such
// warming: their encoding is generated code, see pluginpb's codec.)
func warmUp() {
	_ = SchemaFor[struct {
		S string `json:"s"`
	}]()
}

func debugFlag() bool {
	for _, a := range os.Args[1:] {
		if a == "-debug" || a == "--debug" {
			return true
		}
	}
	return false
}

// hostPID is the pid the kernel reports for the host's connections: the parent's,
// unless the host says otherwise (its sandbox sets TOOLHOST_HOST_PID) — 0 when the
// plugin runs in its own PID namespace, where every process outside it has pid 0
// (the host's own peer checks then keep other processes away from the plugin's
// capabilities; Landlock keeps a confined plugin from other plugins).
func hostPID() int {
	if v, ok := os.LookupEnv("TOOLHOST_HOST_PID"); ok {
		if pid, err := strconv.Atoi(v); err == nil {
			return pid
		}
	}
	return os.Getppid()
}

// exitWithParent ends the process when its parent (the host) is gone, so no plugin
// outlives its host even if the host was killed without a chance to stop it.
func exitWithParent() {
	parent := os.Getppid()
	for range time.Tick(500 * time.Millisecond) {
		if os.Getppid() != parent {
			os.Exit(2)
		}
	}
}

// activateAtStart activates the plugin before its server starts when the host asked
// for it (pluginpb.StartActivationVersion), and prints the outcome for the host. It
// reports whether it did; if not, the host activates the plugin with a call. While
// the plugin activates, what it writes to os.Stdout goes to standard error: the
// host reads the handshake from standard output.
func activateAtStart(gp *grpcPlugin, logger hclog.Logger) bool {
	req, err := pluginpb.StartActivationRequest()
	if err != nil {
		logger.Error("activation request from the host", "error", err) // activated by a call then
		return false
	}
	if req == nil {
		return false
	}
	if !req.RegistrationsInResponse {
		// Its registrations would need the Tools capability, whose broker comes
		// with the server: it would wait for itself. Activated by a call then.
		logger.Error("activation request from the host wants registrations over the Tools capability; activating by a call")
		return false
	}
	gp.server = newPluginServer(gp.impl, logger)
	stdout := os.Stdout
	os.Stdout = os.Stderr
	res, err := gp.server.activate(context.Background(), req)
	os.Stdout = stdout
	line, err := pluginpb.ActivationLine(res, err)
	if err == nil {
		_, err = stdout.Write(line)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sdk: report the activation to the host: %v\n", err)
		os.Exit(1)
	}
	return true
}

// grpcPlugin is the plugin side of the go-plugin gRPC plugin.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl   Plugin
	logger hclog.Logger
	// server, when set, is the server of the activation made at the start; otherwise
	// every gRPC server (one per host in debug mode) gets a fresh one.
	server *pluginServer
}

func (g *grpcPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	srv := g.server
	if srv == nil {
		srv = newPluginServer(g.impl, g.logger)
	}
	srv.setBroker(broker)
	pluginpb.RegisterPluginServer(s, srv)
	return nil
}

func (g *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("sdk: the plugin side has no client")
}

// pluginServer serves the Plugin service for one activation.
type pluginServer struct {
	pluginpb.UnimplementedPluginServer
	impl   Plugin
	logger hclog.Logger
	// broker is go-plugin's broker of this plugin's connection, set once the server
	// is up (setBroker), which can be after an activation at the start.
	broker    *plugin.GRPCBroker
	brokerSet chan struct{}
	activated atomic.Bool
	// flat: the host reads a Call's lone output from CallResult.output
	// (ActivateRequest.flat_results).
	flat atomic.Bool

	mu        sync.RWMutex
	regs      map[uint64]map[string]Tool          // registration id → authored name → tool
	next      atomic.Uint64                       // the last registration id used
	kept      map[uint64][]*pluginpb.ExecuteEvent // large Call results awaiting Fetch
	nextFetch atomic.Uint64
	// interaction is the host's Interaction capability, nil when not granted; set
	// once, during Activate.
	interaction pluginpb.InteractionClient
}

func newPluginServer(impl Plugin, logger hclog.Logger) *pluginServer {
	return &pluginServer{impl: impl, logger: logger, brokerSet: make(chan struct{}),
		regs: map[uint64]map[string]Tool{}, kept: map[uint64][]*pluginpb.ExecuteEvent{}}
}

// setBroker sets the broker, once.
func (s *pluginServer) setBroker(b *plugin.GRPCBroker) {
	s.broker = b
	close(s.brokerSet)
}

// Activate is the activation by a call (see activateAtStart for the other kind).
func (s *pluginServer) Activate(ctx context.Context, req *pluginpb.ActivateRequest) (*pluginpb.ActivateResponse, error) {
	return s.activate(ctx, req)
}

// activate runs the plugin's activation for req. The host's capabilities are dialled
// when first used, and dialDelay after the activation at the latest.
func (s *pluginServer) activate(ctx context.Context, req *pluginpb.ActivateRequest) (_ *pluginpb.ActivateResponse, err error) {
	if !s.activated.CompareAndSwap(false, true) {
		return nil, status.Error(codes.FailedPrecondition, "sdk: plugin already activated")
	}
	s.flat.Store(req.FlatResults)
	tools := &toolsClient{server: s, capability: s.capability(req.ToolsBrokerId, "the Tools capability"), collecting: req.RegistrationsInResponse}
	if !tools.collecting {
		if _, err := tools.client(); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	loc := Location{Directory: req.Directory, WorkspaceID: req.WorkspaceId, Options: req.Options}
	var later []*capability
	if req.ServicesBrokerId != 0 {
		c := s.capability(req.ServicesBrokerId, "the Location services")
		loc.Services = newServices(c)
		later = append(later, c)
	}
	if req.InteractionBrokerId != 0 {
		c := s.capability(req.InteractionBrokerId, "the Interaction capability")
		s.interaction = pluginpb.NewInteractionClient(c)
		later = append(later, c)
	}
	defer func() {
		for _, c := range later {
			c.dialLater()
		}
	}()
	defer func() {
		if v := recover(); v != nil {
			s.logger.Error("activation panicked", "panic", v, "stack", string(debug.Stack()))
			err = status.Errorf(codes.Internal, "sdk: activation panicked: %v", v)
		}
	}()
	if err := s.impl.Activate(ctx, loc, tools); err != nil {
		return nil, status.Error(codes.Aborted, err.Error()) // the host says it was the activation
	}
	return &pluginpb.ActivateResponse{Registrations: tools.endActivation()}, nil
}

func (s *pluginServer) Execute(req *pluginpb.ExecuteRequest, stream pluginpb.Plugin_ExecuteServer) error {
	var sendMu sync.Mutex // progress may be reported from several goroutines
	_, err := s.execute(stream.Context(), req, true, false, func(ev *pluginpb.ExecuteEvent) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(ev)
	})
	return err
}

// fetchTTL is how long Call keeps a large result for its Fetch.
const fetchTTL = time.Minute

func (s *pluginServer) Call(ctx context.Context, req *pluginpb.ExecuteRequest) (*pluginpb.CallResult, error) {
	var events []*pluginpb.ExecuteEvent
	size := 0
	flat, err := s.execute(ctx, req, false, s.flat.Load(), func(ev *pluginpb.ExecuteEvent) error {
		events = append(events, ev)
		size += ev.SizeVT()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if flat != nil {
		return &pluginpb.CallResult{Output: flat}, nil
	}
	if size <= pluginpb.ChunkSize {
		return &pluginpb.CallResult{Events: events}, nil
	}
	id := s.nextFetch.Add(1)
	s.mu.Lock()
	s.kept[id] = events
	s.mu.Unlock()
	time.AfterFunc(fetchTTL, func() { s.take(id) })
	return &pluginpb.CallResult{Fetch: id}, nil
}

func (s *pluginServer) Fetch(req *pluginpb.FetchRequest, stream pluginpb.Plugin_FetchServer) error {
	events, ok := s.take(req.Fetch)
	if !ok {
		return status.Errorf(codes.NotFound, "sdk: no kept result %d", req.Fetch)
	}
	for _, ev := range events {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

// take removes and returns a kept result.
func (s *pluginServer) take(id uint64) ([]*pluginpb.ExecuteEvent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	events, ok := s.kept[id]
	delete(s.kept, id)
	return events, ok
}

// execute runs one call and hands its events to send: progress (when progress is
// set), then the output in chunks, the structured result, the projection's parts,
// and exactly one terminal event. Errors the tool did not classify, and
// cancellation, end the call with a gRPC status instead. When flat is set and the
// call completed with an output alone that fits in one chunk, execute sends
// nothing and returns that output (CallResult.output).
func (s *pluginServer) execute(ctx context.Context, req *pluginpb.ExecuteRequest, progress, flat bool, send func(*pluginpb.ExecuteEvent) error) (flatOutput []byte, _ error) {
	s.mu.RLock()
	tool, ok := s.regs[req.Registration][req.Tool]
	s.mu.RUnlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sdk: no tool %q in registration %d", req.Tool, req.Registration)
	}
	if progress {
		ctx = WithProgress(ctx, func(p Progress) {
			_ = send(&pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_Progress{Progress: &pluginpb.Progress{Progress: p.Progress, Total: p.Total, Message: p.Message}}})
		})
	}
	if s.interaction != nil && req.Call != 0 {
		ctx = WithInteractor(ctx, hostInteractor{client: s.interaction, call: req.Call})
	}
	// The tool's own spans join the host's trace; a host before the request's
	// trace field sent it as metadata.
	if len(req.Trace) > 0 {
		ctx = tracectx.FromBinary(ctx, req.Trace, req.TraceState)
	} else {
		ctx = tracectx.FromIncoming(ctx)
	}
	inv := Invocation{}
	if i := req.Invocation; i != nil {
		inv = Invocation{SessionID: i.SessionId, Agent: i.Agent, AssistantMessageID: i.AssistantMessageId, ToolCallID: i.ToolCallId}
	}
	out, content, err := s.run(ctx, tool, inv, req.Input)
	if ctx.Err() != nil {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		if ev := terminalEvent(err); ev != nil {
			return nil, send(ev)
		}
		return nil, status.Error(codes.Unknown, err.Error())
	}
	if flat && out.Structured == nil && tool.Project == nil && len(out.JSON) > 0 && len(out.JSON) <= pluginpb.ChunkSize {
		return out.JSON, nil
	}
	// All output chunks but the last go first; the last rides in Done, so a small
	// result is one message.
	output := out.JSON
	for len(output) > pluginpb.ChunkSize {
		if err := send(&pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_Output{Output: output[:pluginpb.ChunkSize]}}); err != nil {
			return nil, err
		}
		output = output[pluginpb.ChunkSize:]
	}
	if out.Structured != nil {
		if err := sendChunks(send, out.Structured, func(b []byte) *pluginpb.ExecuteEvent {
			return &pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_Structured{Structured: b}}
		}); err != nil {
			return nil, err
		}
	}
	for _, p := range content {
		if err := send(&pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_Part{Part: &pluginpb.PartStart{
			Type: string(p.Type), MimeType: p.MIMEType, Uri: p.URI, Blob: p.IsBlob(),
		}}}); err != nil {
			return nil, err
		}
		data := p.Data
		if p.Type == PartText || p.Type == PartResource && !p.IsBlob() {
			data = []byte(p.Text)
		}
		if err := sendChunks(send, data, func(b []byte) *pluginpb.ExecuteEvent {
			return &pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_PartData{PartData: b}}
		}); err != nil {
			return nil, err
		}
	}
	return nil, send(&pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_Done{Done: &pluginpb.Done{
		HasContent:    tool.Project != nil,
		HasStructured: out.Structured != nil,
		Output:        output,
	}}})
}

// run executes the tool and, if it has one, its projection, recovering panics as
// defects. The projection is pure, so computing it here saves a round trip; the host
// discards it if the output fails validation.
func (s *pluginServer) run(ctx context.Context, tool Tool, inv Invocation, input []byte) (out Output, content []Part, err error) {
	defer func() {
		if v := recover(); v != nil {
			stack := debug.Stack()
			s.logger.Error("tool panicked", "panic", v, "stack", string(stack))
			err = &defectError{message: fmt.Sprint(v), stack: string(stack)}
		}
	}()
	out, err = tool.Execute(ctx, inv, input)
	if err == nil && tool.Project != nil {
		content = tool.Project(input, out.JSON)
	}
	return out, content, err
}

type defectError struct{ message, stack string }

func (e *defectError) Error() string { return "panic: " + e.message }

// terminalEvent maps an executor error to the event that crosses the boundary, or nil
// for errors the tool did not classify: those end the RPC with an Unknown status.
func terminalEvent(err error) *pluginpb.ExecuteEvent {
	var failure *ToolFailure
	var decodeErr *InputDecodingError
	var encodeErr *OutputEncodingError
	var defect *defectError
	fail := func(kind pluginpb.Failure_Kind, msg string) *pluginpb.ExecuteEvent {
		return &pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_Failure{Failure: &pluginpb.Failure{Kind: kind, Message: msg}}}
	}
	switch {
	case errors.As(err, &failure):
		return fail(pluginpb.Failure_TOOL, failure.Message)
	case errors.As(err, &decodeErr):
		return fail(pluginpb.Failure_INVALID_INPUT, decodeErr.Err.Error())
	case errors.As(err, &encodeErr):
		return fail(pluginpb.Failure_INVALID_OUTPUT, encodeErr.Err.Error())
	case errors.Is(err, ErrDeclined):
		return fail(pluginpb.Failure_DECLINED, err.Error())
	case errors.As(err, &defect):
		return &pluginpb.ExecuteEvent{Event: &pluginpb.ExecuteEvent_Defect{Defect: &pluginpb.Defect{Message: defect.message, Stack: defect.stack}}}
	}
	return nil
}

func sendChunks(send func(*pluginpb.ExecuteEvent) error, data []byte, event func([]byte) *pluginpb.ExecuteEvent) error {
	if len(data) == 0 {
		return send(event(nil))
	}
	for len(data) > 0 {
		n := min(len(data), pluginpb.ChunkSize)
		if err := send(event(data[:n])); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// toolsClient is the plugin's end of the Tools capability. During an activation
// whose host takes registrations in its response (collecting), Register only
// records the batch; the connection is dialled for registrations made later.
type toolsClient struct {
	server     *pluginServer
	capability *capability

	mu         sync.Mutex
	collecting bool
	pending    []*pluginpb.RegisterRequest // collected, in order
}

// client returns the Tools capability's client, dialling it the first time.
func (t *toolsClient) client() (pluginpb.ToolsClient, error) {
	if _, err := t.capability.dial(); err != nil {
		return nil, err
	}
	return pluginpb.NewToolsClient(t.capability), nil
}

// endActivation ends collecting and returns what was collected; the Tools
// capability is dialled dialDelay later, unless a registration needs it sooner.
func (t *toolsClient) endActivation() []*pluginpb.RegisterRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.collecting {
		return nil
	}
	t.collecting = false
	t.capability.dialLater()
	pending := t.pending
	t.pending = nil
	return pending
}

func (t *toolsClient) Register(ctx context.Context, tools map[string]Tool) (Registration, error) {
	req := &pluginpb.RegisterRequest{}
	kept := make(map[string]Tool, len(tools))
	for name, tool := range tools {
		if tool.Execute == nil {
			return nil, fmt.Errorf("sdk: register %q: tool has no executor", name)
		}
		kept[name] = tool
		req.Tools = append(req.Tools, &pluginpb.ToolDefinition{
			Name:             name,
			Description:      tool.Description,
			InputSchema:      tool.InputSchema,
			OutputSchema:     tool.OutputSchema,
			StructuredSchema: tool.StructuredSchema,
			Title:            tool.Title,
			Annotations:      annotationsPB(tool.Annotations),
		})
	}
	id := t.server.next.Add(1)
	req.Registration = id
	// Ready to execute before the host can advertise the tools.
	t.server.mu.Lock()
	t.server.regs[id] = kept
	t.server.mu.Unlock()
	t.mu.Lock()
	if t.collecting {
		t.pending = append(t.pending, req)
		t.mu.Unlock()
		return &registration{tools: t, id: id}, nil
	}
	t.mu.Unlock()
	client, err := t.client()
	if err == nil {
		_, err = client.Register(ctx, req)
		if err != nil {
			err = fmt.Errorf("sdk: register: %s", status.Convert(err).Message())
		}
	}
	if err != nil {
		t.server.mu.Lock()
		delete(t.server.regs, id)
		t.server.mu.Unlock()
		return nil, err
	}
	return &registration{tools: t, id: id}, nil
}

// unpend removes a batch still being collected; false if it was sent.
func (t *toolsClient) unpend(id uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, req := range t.pending {
		if req.Registration == id {
			t.pending = slices.Delete(t.pending, i, i+1)
			return true
		}
	}
	return false
}

type registration struct {
	tools *toolsClient
	id    uint64
	once  sync.Once
	err   error
}

func (r *registration) Close(ctx context.Context) error {
	r.once.Do(func() {
		if !r.tools.unpend(r.id) {
			client, err := r.tools.client()
			if err == nil {
				_, err = client.Close(ctx, &pluginpb.CloseRequest{Registration: r.id})
				if err != nil {
					err = fmt.Errorf("sdk: close registration: %s", status.Convert(err).Message())
				}
			}
			if err != nil {
				r.err = err
				return
			}
		}
		r.tools.server.mu.Lock()
		delete(r.tools.server.regs, r.id)
		r.tools.server.mu.Unlock()
	})
	return r.err
}

func annotationsPB(a *Annotations) *pluginpb.ToolAnnotations {
	if a == nil {
		return nil
	}
	return &pluginpb.ToolAnnotations{
		ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
		IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint,
	}
}

// multiplexed reports whether the host that launched this process multiplexes its
// connections to it (go-plugin's PLUGIN_MULTIPLEX_GRPC, which the host sets where
// this process's sandbox refuses connect(2)): each then reaches the plugin's
// server as a stream of one connection, with no peer of its own for the kernel to
// name.
func multiplexed() bool {
	v, _ := strconv.ParseBool(os.Getenv("PLUGIN_MULTIPLEX_GRPC"))
	return v
}

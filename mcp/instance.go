package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/tracectx"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// maxListPages caps the pages of one tools/list.
const maxListPages = 100

// maxTitleBytes is the longest title (the tool's, or its annotations') a listed
// tool may have, as plugins' maxTitleBytes: a title is a short name for people, and
// max_schema_bytes does not count it. A tool with a longer one is skipped.
const maxTitleBytes = 1 << 10

// A server's tools are listed again on its tools/list_changed at most relistBurst
// times at once, then once every relistEvery: notifications meanwhile are
// coalesced into the next listing, and counted in a log line.
const (
	relistBurst = 4
	relistEvery = time.Second
)

// Instance is one running generation of a server: one process, one MCP session and
// one scope. Its tools are registered into its scope; closing the scope (through Stop
// or the parent's close) unregisters them, ends their in-flight calls and stops the
// process. Safe for concurrent use.
type Instance struct {
	cfg        Config
	target     Target
	generation uint64
	scope      *scope.Scope
	proc       *process  // nil for a remote server
	conn       *conn     // nil for a remote server
	link       *httpLink // nil for a stdio server
	transport  string    // a remote server's transport in use
	waitErr    error     // why the session ended, once dead is closed
	session    *gomcp.ClientSession
	dead       chan struct{} // closed when the process exited or the session ended
	relist     chan struct{} // a tools/list_changed is pending
	notified   atomic.Int64  // tools/list_changed notifications since the last listing
	token      atomic.Uint64
	inFlight   atomic.Int64
	logs       *loglimit.Logger // the server's notifications/message (log.go)
	gate       *gate            // every message to and from the server (budget.go)
	asks       *asks            // the server's elicitation and sampling requests (asks.go)

	progressMu sync.Mutex
	progress   map[string]*progressSink

	mu       sync.Mutex
	tools    map[string]*registered // by registered name
	warnings []error
	listings int
	changed  chan struct{} // closed and replaced after every listing
}

// registered is one tool of the server as registered now.
type registered struct {
	original string // the server's name for it
	key      string // what the definition was made from; equal keys: unchanged tool
	reg      *registry.Registration
}

// Start launches generation gen of the server in a new child scope of parent,
// initializes the MCP session, lists the server's tools and registers them. It
// returns once they are registered; on any error everything started is stopped
// before Start returns (a *StartError). The instance lives until its scope closes
// (see Stop).
func Start(ctx context.Context, parent *scope.Scope, cfg Config, target Target, gen uint64) (*Instance, error) {
	cfg = cfg.withDefaults()
	sc, err := parent.Child()
	if err != nil {
		return nil, &StartError{Server: cfg.Name, Err: err}
	}
	inst := &Instance{
		cfg: cfg, target: target, generation: gen, scope: sc,
		dead: make(chan struct{}), relist: make(chan struct{}, 1),
		progress: map[string]*progressSink{}, tools: map[string]*registered{}, changed: make(chan struct{}),
		logs: loglimit.New(cfg.Logger, 0, 0),
	}
	inst.gate = newGate(cfg.Name, cfg.MaxHeldBytes, inst.onNotification, inst.logs)
	inst.asks = newAsks(cfg.Name, cfg.Asks, inst.logs)
	_ = sc.Defer(ctx, func(context.Context) error { inst.logs.Close(); return nil }) // runs last
	_ = sc.Defer(ctx, func(context.Context) error { inst.asks.close(); return nil }) // once the session is over
	if err := inst.start(ctx); err != nil {
		_ = sc.Close(context.WithoutCancel(ctx))
		serr := &StartError{Server: cfg.Name, Err: err}
		if inst.proc != nil {
			serr.Stderr = inst.proc.stderrTail.String()
		}
		if cfg.URL != "" {
			serr.URL = RedactURL(cfg.URL)
		}
		return nil, serr
	}
	if gen <= 1 && inst.proc != nil { // a remote server has no process here
		mode, confined := inst.Containment()
		cfg.Logger.Info("mcp server sandbox", "server", cfg.Name, "containment", mode, "confined", confined, "limits", inst.proc.Box.Spec().Limits.String(), "processes_capped", inst.proc.Box.ProcessesCapped(), "layers", strings.Join(inst.proc.Box.Layers(), ","))
	}
	return inst, nil
}

func (inst *Instance) start(ctx context.Context) error {
	cfg := inst.cfg
	sctx, cancel := context.WithTimeoutCause(ctx, cfg.StartTimeout,
		fmt.Errorf("did not start within the start timeout (%s)", cfg.StartTimeout))
	defer cancel()
	stop := context.AfterFunc(inst.scope.Context(), cancel)
	defer stop()

	if cfg.URL == "" {
		proc, err := startProcess(cfg, inst.logs)
		if err != nil {
			return err
		}
		inst.proc = proc
		inst.conn = newConn(cfg.Name, cfg.MaxMessageBytes, inst.logs, inst.gate, proc.Stdin, proc.Stdout)
		inst.conn.grace = cfg.notReadingGrace
	}
	// Deferred first, so it runs last: the process stops after the tools are gone.
	_ = inst.scope.Defer(ctx, inst.stop)
	_ = inst.scope.Defer(ctx, func(context.Context) error { inst.releaseAll(); return nil })

	client := gomcp.NewClient(&gomcp.Implementation{Name: "toolhost", Version: version()}, &gomcp.ClientOptions{
		// No roots. Sampling and elicitation requests made during a call are
		// forwarded to whoever runs the call (forward.go). On stdio, the
		// notifications the host acts on are handled by the gate as they are read
		// (onNotification) and never reach these handlers.
		Capabilities: &gomcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *gomcp.ToolListChangedRequest) {
			inst.onListChanged()
		},
		ProgressNotificationHandler: func(_ context.Context, req *gomcp.ProgressNotificationClientRequest) {
			if req.Params != nil {
				inst.onProgress(req.Params)
			}
		},
		LoggingMessageHandler: func(_ context.Context, req *gomcp.LoggingMessageRequest) {
			if req.Params != nil {
				inst.onLog(req.Params)
			}
		},
		CreateMessageHandler: inst.onCreateMessage,
		ElicitationHandler:   inst.onElicit,
		Logger:               newSlog(cfg.Logger),
	})
	var session *gomcp.ClientSession
	var err error
	if cfg.URL != "" {
		session, err = inst.connectRemote(sctx, client)
	} else {
		session, err = client.Connect(sctx, transport{inst.conn}, nil)
	}
	if err != nil {
		return inst.startErr(ctx, sctx, "initialize", err)
	}
	inst.session = session
	sessionDone := make(chan struct{})
	go func() {
		inst.waitErr = session.Wait()
		close(sessionDone)
	}()
	go func() {
		select {
		case <-inst.exited():
		case <-sessionDone:
		}
		close(inst.dead)
	}()

	if err := inst.sync(sctx); err != nil {
		return inst.startErr(ctx, sctx, "list tools", err)
	}
	_ = inst.scope.Go(inst.relistLoop)
	return nil
}

// startErr explains a failed start step: the timeout, the process's exit, or err.
func (inst *Instance) startErr(ctx, sctx context.Context, step string, err error) error {
	if inst.proc == nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%s: %w", step, context.Cause(sctx))
		}
		return fmt.Errorf("%s: %w", step, inst.explainRemote(err))
	}
	select {
	case <-inst.conn.ended:
		// Its stdout ended: the server is exiting; let its status explain. (ended,
		// not conn.done: the reader hands the end over before its goroutine returns,
		// so done may not be closed yet when the failed step reports it.)
		t := time.NewTimer(time.Second)
		defer t.Stop()
		select {
		case <-inst.proc.Exited():
		case <-t.C:
		}
	default:
	}
	select {
	case <-inst.proc.Exited():
		return fmt.Errorf("%s: the server exited (%s): %w", step, inst.proc.Status(), err)
	default:
	}
	if sctx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: %w", step, context.Cause(sctx))
	}
	return fmt.Errorf("%s: %w", step, err)
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// Generation returns the instance's generation.
func (inst *Instance) Generation() uint64 { return inst.generation }

// Scope returns the instance's scope.
func (inst *Instance) Scope() *scope.Scope { return inst.scope }

// PID returns the server process's id (its process group's id too); 0 for a
// remote server.
func (inst *Instance) PID() int {
	if inst.proc == nil {
		return 0
	}
	return inst.proc.Cmd.Process.Pid
}

// Transport returns the transport in use: "stdio", TransportStreamable or
// TransportSSE.
func (inst *Instance) Transport() string {
	if inst.proc != nil {
		return "stdio"
	}
	return inst.transport
}

// exited returns a channel closed when the server's process exited; never
// closed for a remote server.
func (inst *Instance) exited() <-chan struct{} {
	if inst.proc == nil {
		return nil
	}
	return inst.proc.Exited()
}

// Containment reports how the server's process tree is held together, and whether
// Landlock confines it (see sandbox.Mode); a remote server has no process here
// (ModeNone, not confined).
func (inst *Instance) Containment() (mode sandbox.Mode, confined bool) {
	if inst.proc == nil {
		return sandbox.ModeNone, false
	}
	return sandbox.Mode(inst.proc.Box.Mode()), inst.proc.Box.Confined()
}

// Stderr returns the tail of what the server wrote to stderr (about 8 KiB); "" for
// a remote server.
func (inst *Instance) Stderr() string {
	if inst.proc == nil {
		return ""
	}
	return inst.proc.stderrTail.String()
}

// Done returns a channel closed when the server process has exited or its session
// has ended, for whatever reason.
func (inst *Instance) Done() <-chan struct{} { return inst.dead }

// InFlight returns the number of calls in progress on this instance.
func (inst *Instance) InFlight() int { return int(inst.inFlight.Load()) }

// Tools returns the registered tools: registered name → the server's tool name.
func (inst *Instance) Tools() map[string]string {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	out := make(map[string]string, len(inst.tools))
	for name, r := range inst.tools {
		out[name] = r.original
	}
	return out
}

// Warnings returns the problems of the latest listing: tools skipped (a schema that
// does not compile, a name clash), a page cap or a repeated cursor.
func (inst *Instance) Warnings() []error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return slices.Clone(inst.warnings)
}

// Listed returns how many listings have been applied so far and a channel closed
// when the next one has been. Tests and tools use it to wait for a re-listing
// without polling.
func (inst *Instance) Listed() (n int, next <-chan struct{}) {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.listings, inst.changed
}

// Stop closes the instance's scope: its tools are unregistered, its in-flight calls
// end as interruptions, and its process is stopped (stdin closed, then SIGTERM, then
// SIGKILL to its process group, within Config.StopGrace). Idempotent.
func (inst *Instance) Stop(ctx context.Context) error { return inst.scope.Close(ctx) }

// Crash describes the end of a server whose process exited, or whose session ended,
// on its own (a *supervise.CrashError, with its status and stderr); see supervise.Generation.
func (inst *Instance) Crash() error {
	cerr := &supervise.CrashError{Kind: "MCP server", Name: inst.cfg.Name, Generation: inst.generation, Status: "session closed"}
	if inst.proc == nil {
		if inst.waitErr != nil {
			cerr.Status = "session closed: " + inst.waitErr.Error()
		}
		return cerr
	}
	if err := inst.conn.failure(); err != nil {
		cerr.Status = "session closed: " + err.Error()
		cerr.Stderr = inst.proc.stderrTail.String()
		return cerr
	}
	// The session may end (its stdout closed) a moment before the process is reaped:
	// give the exit status a moment to say how it ended. A server that lives on with
	// its stdout closed is killed by the scope's close that follows.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-inst.proc.Exited():
		cerr.Status = inst.proc.Status()
	case <-t.C:
	}
	cerr.Stderr = inst.proc.stderrTail.String()
	return cerr
}

// stop ends the session and the process; it is the scope's last release.
func (inst *Instance) stop(ctx context.Context) error {
	grace := inst.cfg.StopGrace
	if d, ok := ctx.Deadline(); ok {
		grace = max(0, min(grace, time.Until(d)))
	}
	if inst.proc == nil {
		if inst.session != nil {
			stopRemote(ctx, inst.session, grace)
		}
		if inst.link != nil {
			inst.link.close()
		}
		inst.gate.ended()
		return nil
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		if inst.session != nil {
			// Closes stdin; returns once the connection is done.
			_ = inst.session.Close()
		} else {
			_ = inst.conn.Close()
		}
	}()
	inst.proc.stop(grace)
	<-closed // the process is gone, so the connection's reader has ended
	<-inst.conn.done
	inst.gate.ended()
	return nil
}

// onNotification handles a notification the gate lets through, as it is read.
func (inst *Instance) onNotification(method string, params json.RawMessage) {
	switch method {
	case notifyToolsListed:
		inst.onListChanged()
	case notifyProgress:
		var p gomcp.ProgressNotificationParams
		if json.Unmarshal(params, &p) == nil {
			inst.onProgress(&p)
		}
	case notifyMessage:
		var p gomcp.LoggingMessageParams
		if json.Unmarshal(params, &p) == nil {
			inst.onLog(&p)
		}
	}
}

// onListChanged notes a tools/list_changed; relistLoop does the listing, so the
// session's reading is never blocked on a request.
func (inst *Instance) onListChanged() {
	inst.notified.Add(1)
	select {
	case inst.relist <- struct{}{}:
	default: // one is pending already; it will see this change too
	}
}

// relistLoop lists the tools again after each tools/list_changed, paced: see
// relistBurst.
func (inst *Instance) relistLoop(ctx context.Context) {
	tokens, refilled := relistBurst, time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-inst.relist:
		}
		if n := int(time.Since(refilled) / relistEvery); n > 0 {
			tokens, refilled = min(relistBurst, tokens+n), refilled.Add(time.Duration(n)*relistEvery)
		}
		if tokens == 0 {
			wait := time.Until(refilled.Add(relistEvery))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			tokens, refilled = 1, time.Now()
			select {
			case <-inst.relist: // what came meanwhile is in this listing
			default:
			}
			inst.logs.Log(hclog.Warn, "tools/list_changed arrives faster than the host lists tools again; notifications coalesced",
				"server", inst.cfg.Name, "notifications", inst.notified.Load(), "every", relistEvery.String())
		}
		tokens--
		inst.notified.Store(0)
		lctx, cancel := context.WithTimeout(ctx, inst.cfg.StartTimeout)
		err := inst.sync(lctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			inst.logs.Log(hclog.Warn, "re-listing tools failed; keeping the current set", "server", inst.cfg.Name, "error", err)
		}
	}
}

// candidate is one listed tool ready to register.
type candidate struct {
	name, original, key string
	tool                sdk.Tool
}

// sync lists the server's tools and brings the registrations in line, in place:
// an unchanged tool keeps its registration; a changed tool replaces its registration
// in its slot (Registration.Replace), so it keeps its precedence against other
// sources — an override registered later keeps winning — and its name is never
// briefly missing; a new tool is registered; a vanished tool is released.
func (inst *Instance) sync(ctx context.Context) error {
	ctx, release := inst.gate.hold(ctx) // the pages read, until the listing is applied
	defer release()
	listed, warnings, err := inst.list(ctx)
	if err != nil {
		return err
	}
	cands, more := inst.candidates(listed)
	warnings = append(warnings, more...)

	inst.mu.Lock()
	defer inst.mu.Unlock()
	next := make(map[string]*registered, len(cands))
	var fresh []*registry.Registration
	for _, c := range cands {
		cur, ok := inst.tools[c.name]
		if ok && cur.key == c.key {
			next[c.name] = cur
			continue
		}
		b := registry.Batch{
			Location:  inst.target.Location,
			Source:    registry.Source{Kind: "mcp", Name: inst.cfg.Name, Generation: inst.generation},
			Tools:     map[string]sdk.Tool{c.name: c.tool},
			Owner:     inst.scope,
			Overrides: inst.cfg.Overrides,
			Limits:    inst.cfg.Limits,
		}
		var reg *registry.Registration
		if ok {
			reg, err = cur.reg.Replace(b)
		} else {
			reg, err = inst.target.Registry.Add(b)
		}
		var rerr *registry.RegistrationError
		switch {
		case errors.As(err, &rerr):
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tool %q skipped: %w", inst.cfg.Name, c.original, err))
			continue
		case err != nil:
			// Not about this tool (the owner closed, the Location is gone): nothing
			// else will register either. Replacements stay, tracked, so the scope's
			// close releases them.
			for _, g := range fresh {
				g.Release()
			}
			for name, r := range next {
				inst.tools[name] = r
			}
			return err
		}
		if !ok {
			fresh = append(fresh, reg)
		}
		next[c.name] = &registered{original: c.original, key: c.key, reg: reg}
	}
	for name, cur := range inst.tools {
		if _, kept := next[name]; !kept {
			cur.reg.Release() // vanished, or changed in a way the registry refused
		}
	}
	inst.tools = next
	inst.warnings = warnings
	for _, w := range warnings {
		inst.logs.Log(hclog.Warn, "tool listing problem", "server", inst.cfg.Name, "warning", w)
	}
	inst.listings++
	close(inst.changed)
	inst.changed = make(chan struct{})
	return nil
}

// list pages through tools/list, stopping at the page cap or a repeated cursor
// (with a warning: the pages read so far are used).
func (inst *Instance) list(ctx context.Context) ([]*gomcp.Tool, []error, error) {
	var tools []*gomcp.Tool
	var warnings []error
	seen := map[string]bool{}
	cursor := ""
	for page := 0; ; page++ {
		if page == maxListPages {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tools/list stopped at the cap of %d pages; later pages are ignored", inst.cfg.Name, maxListPages))
			break
		}
		res, err := inst.session.ListTools(ctx, &gomcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, context.Cause(ctx)
			}
			if failure := heldFailure(ctx); failure != nil {
				return nil, nil, failure
			}
			return nil, nil, err
		}
		tools = append(tools, res.Tools...)
		if max := inst.maxTools(); len(tools) > max {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tools/list listed more than max_tools (%d) tools; the rest are ignored", inst.cfg.Name, max))
			tools = tools[:max]
			break
		}
		cursor = res.NextCursor
		if cursor == "" {
			break
		}
		if seen[cursor] {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tools/list repeated cursor %q; later pages are ignored", inst.cfg.Name, cursor))
			break
		}
		seen[cursor] = true
	}
	return tools, warnings, nil
}

// maxTools is the most tools the server may hold (its max_tools).
func (inst *Instance) maxTools() int {
	if n := inst.cfg.Limits.MaxTools; n > 0 {
		return n
	}
	return registry.DefaultMaxTools
}

// candidates turns listed tools into registrable ones, skipping (with a warning)
// those without a usable name, whose names clash after normalization, or whose
// schemas registering would refuse, and those past the server's max_schema_bytes
// in all, or past registry.MaxBatchSchemaNodes subschemas in all, written out or
// unfolded through "$ref" (one warning), before any of them is compiled: the tools
// are registered one batch each, and the listing as a whole costs no more to
// compile than one batch of a plugin.
func (inst *Instance) candidates(listed []*gomcp.Tool) ([]candidate, []error) {
	var warnings []error
	maxBytes := inst.cfg.Limits.MaxSchemaBytes
	if maxBytes <= 0 {
		maxBytes = registry.DefaultMaxSchemaBytes
	}
	var size int64
	var nodes, unfolded int
	byName := map[string]string{}
	seenOriginal := map[string]bool{}
	var out []candidate
	for _, t := range listed {
		if t == nil || seenOriginal[t.Name] {
			continue
		}
		seenOriginal[t.Name] = true
		name, err := ToolName(inst.cfg.Name, t.Name)
		if err != nil {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tool %q skipped: %w", inst.cfg.Name, t.Name, err))
			continue
		}
		if other, dup := byName[name]; dup {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tool %q skipped: its name %q is already used by tool %q", inst.cfg.Name, t.Name, name, other))
			continue
		}
		c, err := inst.candidate(name, t)
		if err != nil {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tool %q skipped: %w", inst.cfg.Name, t.Name, err))
			continue
		}
		if size += int64(len(c.tool.Description) + len(c.tool.InputSchema) + len(c.tool.OutputSchema)); size > maxBytes {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: its tools from %q on are skipped: the listing's definitions pass max_schema_bytes (%d)", inst.cfg.Name, t.Name, maxBytes))
			break
		}
		cost, err := schemaCost(c.tool)
		if err != nil {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: tool %q skipped: %w", inst.cfg.Name, t.Name, err))
			continue
		}
		if nodes, unfolded = nodes+cost.Nodes, unfolded+cost.Unfolded; nodes > registry.MaxBatchSchemaNodes || unfolded > registry.MaxBatchSchemaNodes {
			warnings = append(warnings, fmt.Errorf("mcp: server %q: its tools from %q on are skipped: the listing's schemas pass %d subschemas together (written out or unfolded through \"$ref\"), the most the host compiles for one registration", inst.cfg.Name, t.Name, registry.MaxBatchSchemaNodes))
			break
		}
		byName[name] = t.Name
		out = append(out, c)
	}
	return out, warnings
}

// schemaCost is what compiling t's schemas costs together.
func schemaCost(t sdk.Tool) (registry.SchemaCost, error) {
	in, err := registry.MeasureSchema("input schema", t.InputSchema)
	if err != nil || len(t.OutputSchema) == 0 {
		return in, err
	}
	out, err := registry.MeasureSchema("output schema", t.OutputSchema)
	return registry.SchemaCost{Nodes: in.Nodes + out.Nodes, Unfolded: in.Unfolded + out.Unfolded}, err
}

func (inst *Instance) candidate(name string, t *gomcp.Tool) (candidate, error) {
	input := json.RawMessage(`{"type":"object"}`)
	if t.InputSchema != nil {
		data, err := marshal(t.InputSchema)
		if err != nil {
			return candidate{}, fmt.Errorf("input schema: %w", err)
		}
		input = data
	}
	var output json.RawMessage
	if t.OutputSchema != nil {
		data, err := marshal(t.OutputSchema)
		if err != nil {
			return candidate{}, fmt.Errorf("output schema: %w", err)
		}
		output = data
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	var key bytes.Buffer
	for _, s := range [][]byte{[]byte(t.Name), []byte(desc), input, output} {
		key.WriteString(strconv.Itoa(len(s)))
		key.WriteByte(':')
		key.Write(s)
	}
	tool := sdk.Tool{Description: desc, Title: t.Title, InputSchema: input, OutputSchema: output, Execute: inst.executor(name, t.Name)}
	if a := t.Annotations; a != nil {
		if tool.Title == "" {
			tool.Title = a.Title
		}
		tool.Annotations = &sdk.Annotations{ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint, IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
	}
	if len(tool.Title) > maxTitleBytes {
		return candidate{}, fmt.Errorf("its title is %d bytes, over the %d a title may have", len(tool.Title), maxTitleBytes)
	}
	// Title and annotations are part of the key: a change to them re-registers the
	// tool, so clients see it.
	if ann, _ := json.Marshal(tool.Annotations); tool.Title != "" || tool.Annotations != nil {
		key.WriteString(tool.Title)
		key.Write(ann)
	}
	return candidate{name: name, original: t.Name, key: key.String(), tool: tool}, nil
}

// Release unregisters every tool of the server; its calls in flight go on. Stop
// releases them too. Idempotent.
func (inst *Instance) Release() { inst.releaseAll() }

// releaseAll removes every registration of the instance.
func (inst *Instance) releaseAll() {
	inst.mu.Lock()
	tools := inst.tools
	inst.tools = map[string]*registered{}
	inst.mu.Unlock()
	for _, r := range tools {
		r.reg.Release()
	}
}

// executor forwards calls of one tool to the server.
func (inst *Instance) executor(name, original string) sdk.Executor {
	return func(ctx context.Context, inv sdk.Invocation, input json.RawMessage) (sdk.Output, error) {
		if inst.cfg.Authorize != nil {
			if err := inst.cfg.Authorize(ctx, name, inv); err != nil {
				return sdk.Output{}, err
			}
		}
		args, err := arguments(input)
		if err != nil {
			return sdk.Output{}, &sdk.InputDecodingError{Err: err}
		}
		inst.inFlight.Add(1)
		defer inst.inFlight.Add(-1)

		// The gate holds the response's bytes until the call returns.
		callCtx, release := inst.gate.hold(ctx)
		defer release()
		callCtx, cancel := context.WithTimeout(callCtx, inst.cfg.Timeout)
		defer cancel()
		params := &gomcp.CallToolParams{Name: original, Arguments: args}
		token := strconv.FormatUint(inst.generation, 10) + "-" + strconv.FormatUint(inst.token.Add(1), 10)
		params.SetProgressToken(token)
		callCtx, span := tracectx.StartMCPCall(callCtx, inst.cfg.Name, original)
		defer span.End()
		params.Meta = tracectx.ToMeta(callCtx, params.Meta)
		sink := inst.addSink(ctx, token)
		res, err := inst.session.CallTool(callCtx, params)
		inst.removeSink(token, sink)
		if err != nil {
			if failure := heldFailure(callCtx); failure != nil {
				err = failure // over HTTP its type did not cross the session
			}
			var tooLarge *MessageTooLargeError
			var overBudget *BudgetError
			var notReading *NotReadingError
			switch {
			case ctx.Err() != nil:
				return sdk.Output{}, context.Cause(ctx)
			case callCtx.Err() != nil:
				return sdk.Output{}, &sdk.ToolFailure{
					Message: fmt.Sprintf("the MCP tool %q did not finish within its timeout of %s and was cancelled", name, inst.cfg.Timeout),
					Err:     err,
				}
			case errors.As(err, &tooLarge):
				return sdk.Output{}, tooLarge
			case errors.As(err, &overBudget):
				return sdk.Output{}, overBudget
			case errors.Is(err, gomcp.ErrConnectionClosed), errors.As(err, &notReading):
				return sdk.Output{}, &ConnectionError{Server: inst.cfg.Name, Tool: original, Err: err}
			}
			select {
			case <-inst.dead:
				return sdk.Output{}, &ConnectionError{Server: inst.cfg.Name, Tool: original, Err: err}
			default:
			}
			return sdk.Output{}, &CallError{Server: inst.cfg.Name, Tool: original, Err: shortened(err)}
		}
		return output(res)
	}
}

// arguments returns the call's arguments: always a JSON object.
func arguments(input json.RawMessage) (json.RawMessage, error) {
	input = bytes.TrimSpace(input)
	if len(input) == 0 || bytes.Equal(input, []byte("null")) {
		return json.RawMessage("{}"), nil
	}
	if input[0] != '{' {
		return nil, fmt.Errorf("MCP tool arguments must be a JSON object")
	}
	return input, nil
}

// progressSink delivers one call's progress until the call has finished; later
// notifications for its token are dropped.
type progressSink struct {
	mu   sync.Mutex
	ctx  context.Context
	seq  uint64 // the order the calls started in
	done bool
}

func (inst *Instance) addSink(ctx context.Context, token string) *progressSink {
	s := &progressSink{ctx: ctx, seq: inst.token.Load()}
	inst.progressMu.Lock()
	inst.progress[token] = s
	inst.progressMu.Unlock()
	return s
}

func (inst *Instance) removeSink(token string, s *progressSink) {
	inst.progressMu.Lock()
	delete(inst.progress, token)
	inst.progressMu.Unlock()
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

func (inst *Instance) onProgress(p *gomcp.ProgressNotificationParams) {
	token, _ := p.ProgressToken.(string)
	inst.progressMu.Lock()
	s := inst.progress[token]
	inst.progressMu.Unlock()
	if s == nil {
		return // a finished call's, or not ours
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		// The message is the server's text, passed on to whoever watches the call
		// (a serve API stream keeps 16 events) and never held by the budget: a status
		// line, cut to loglimit.MaxText.
		sdk.ReportProgress(s.ctx, sdk.Progress{Progress: p.Progress, Total: p.Total, Message: loglimit.Cut(p.Message)})
	}
}

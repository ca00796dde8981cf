package plugins

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/peercred"
	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/proc"
	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/internal/stderrtail"
	"github.com/toolhost/toolhost/registry"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// Config describes one plugin of one Location.
type Config struct {
	// Name is the plugin's name in the Location config; it names the source of its
	// registrations and appears in every error about it.
	Name string
	// Path is the plugin binary's absolute path.
	Path string
	// Args are extra command-line arguments.
	Args []string
	// SHA256, if set, is the lowercase hex digest the binary must have. It is checked
	// on every start, before the process is created.
	SHA256 string
	// Env is the plugin's whole environment: the host's own is never inherited. The
	// go-plugin handshake variables are added, and the Go runtime's settings
	// GOMAXPROCS (a quarter of the host's, at least 1) and GOGC=200 unless Env sets
	// them (a plugin's "env" in the Location config).
	Env map[string]string
	// Options is passed to the plugin's activation (a JSON object, or nil).
	Options json.RawMessage
	// WorkspaceID is passed to the plugin's activation: the workspace id of the
	// Location config. A plugin learns a new one only by activating again, so a
	// Location reloads the plugin with it (Supervisor.Reload) when it changes.
	WorkspaceID string
	// StartTimeout bounds launching, the handshake and activation. Default 10s.
	StartTimeout time.Duration
	// StopGrace is how long a stopping plugin gets to exit after being asked before
	// its process group is killed. Default 5s.
	StopGrace time.Duration
	// SocketDir is where the private (mode 0700) socket directory of each process is
	// made. Default: $XDG_RUNTIME_DIR if absolute, else /dev/shm, else the system
	// temporary directory, else /tmp (the first where one can be made and whose
	// sockets' paths fit; see defaultSocketDir). Starts fail with a *SocketDirError
	// when it is too long for unix socket paths.
	SocketDir string
	// Reattach, if set, attaches to an already running plugin (started with -debug)
	// instead of launching Path. The host does not own that process: stopping only
	// disconnects.
	Reattach *Reattach
	// Logger receives the plugin's logs. Default: discard.
	Logger hclog.Logger
	// Services, for a plugin the Location trusts, are served to it beside the Tools
	// capability. nil (untrusted, the default): the plugin gets the Tools capability
	// and nothing else.
	Services *Services
	// Sandbox contains and confines a launched plugin. Its process tree is always
	// contained (Contain is forced on; see sandbox.Mode). Confine nil means: confined
	// with the defaults (sandbox.Confinement{}) when the plugin is untrusted (Services
	// nil), unconfined when trusted. The plugin's socket directory is always writable
	// to it. Name defaults to the plugin's. Not applied to a reattached plugin, which
	// the host did not launch.
	Sandbox sandboxcfg.Spec
	// Authorize, if set, runs before each call is forwarded to the plugin, with the
	// tool's (normalized) name; an error is the call's result and the plugin never
	// sees the call. Locations set it for untrusted plugins.
	Authorize func(ctx context.Context, tool string, inv sdk.Invocation) error
	// CallTimeout bounds each call of the plugin's tools. A call that runs out of it
	// is cancelled in the plugin (within a twentieth of the timeout, at most a
	// second, after it passed) and settles as a tool failure saying it timed out.
	// Default 10 minutes.
	CallTimeout time.Duration
	// Overrides are the tool names the plugin may take over from another source of
	// its Location (registry.Batch.Overrides).
	Overrides []string
	// Limits bound what each generation of the plugin holds (registry.Batch.Limits),
	// and with it what the host takes from the plugin before looking: a message on
	// its Tools capability, and its activation line, may be at most
	// registerMessageLimit(Limits) (twice MaxSchemaBytes and 1 MiB, 9 MiB by
	// default); a longer one is refused before it is read. At most
	// maxRegistrations of its registrations are received at a time. A message to
	// its Interaction capability is bounded the same way.
	Limits registry.SourceLimits
	// MaxHeldBytes bounds the bytes of the messages the plugin sent the host that
	// the host holds at once: registrations being registered, asks and samples
	// being answered, the results of its calls being collected and handed on. A
	// message past it is refused (a capability call unread, from the largest message
	// it may carry; a call's result with an error naming the plugin and the limit).
	// Default: maxRegistrations registrations of the largest size and 64 MiB (82 MiB
	// with the default Limits).
	MaxHeldBytes int64
	// Grants lets the plugin, during its calls, ask the person (GrantAsk) and sample
	// the model (GrantSample) through whatever runs the call (sdk.Ask, sdk.Sample).
	// Locations grant both to trusted plugins and what the config lists to others.
	Grants []Grant
}

// Reattach is where a plugin started with -debug serves (what it prints for
// TOOLHOST_REATTACH): its pid and its socket's network and address.
type Reattach struct {
	Pid     int    `json:"pid"`
	Network string `json:"network"`
	Address string `json:"address"`
}

// sandboxSpec is the launched plugin's sandbox: see Config.Sandbox.
func (c Config) sandboxSpec() sandbox.Spec {
	spec := sandbox.SpecOf(c.Sandbox)
	spec.Contain, spec.HostPID = true, true
	if spec.Name == "" {
		spec.Name = c.Name
	}
	if spec.Confine == nil && c.Services == nil {
		spec.Confine = &sandbox.Confinement{}
	}
	return spec
}

// Grant is a capability a plugin may be granted beyond the Tools capability.
type Grant string

const (
	// GrantAsk: sdk.Ask reaches the person behind the call.
	GrantAsk Grant = "ask"
	// GrantSample: sdk.Sample reaches the runner's model.
	GrantSample Grant = "sample"
)

func (c Config) withDefaults() Config {
	if c.StartTimeout <= 0 {
		c.StartTimeout = 10 * time.Second
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 5 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.SocketDir == "" {
		c.SocketDir = defaultSocketDir()
	}
	for k, v := range map[string]string{"GOMAXPROCS": strconv.Itoa(pluginGOMAXPROCS()), "GOGC": pluginGOGC} {
		if _, set := c.Env[k]; !set {
			c.Env = maps.Clone(c.Env)
			if c.Env == nil {
				c.Env = map[string]string{}
			}
			c.Env[k] = v
		}
	}
	return c
}

// pluginGOGC is the GOGC a plugin gets unless its config's env sets one. A plugin's
// live heap is small, so at the default of 100 its collector would run every few
// calls; a higher goal trades up to a few MiB more heap per plugin process for
// fewer collections on the call path (BENCHMARKS.md).
const pluginGOGC = "200"

// pluginGOMAXPROCS is the GOMAXPROCS a plugin gets unless its config's env sets one:
// a quarter of the host's own (the CPUs the host may use), at least 1. A plugin
// serves one host, whose calls come a few at a time, and each processor its runtime
// has spins looking for work on the CPUs the host needs for the next call
// (BENCHMARKS.md). A plugin with parallel work of its own sets GOMAXPROCS in its env.
func pluginGOMAXPROCS() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// defaultSocketDir is where plugin sockets go unless configured: a memory file
// system when there is one, because every launch creates and removes a directory and
// two sockets, which costs far more on a disk-backed /tmp (BENCHMARKS.md). In order:
// $XDG_RUNTIME_DIR (the per-user runtime directory meant for sockets; ignored unless
// absolute, as the XDG spec says), /dev/shm, the system temporary directory, then
// /tmp: the first where a private directory can be made and whose sockets' paths fit
// a unix socket address (socketDirFits). When none does, the system temporary
// directory, and starts fail with a *SocketDirError naming it. The directory made
// inside it is private (mode 0700) wherever it is.
func defaultSocketDir() string {
	socketDirOnce.Do(func() {
		socketDir = os.TempDir()
		for _, dir := range []string{os.Getenv("XDG_RUNTIME_DIR"), "/dev/shm", os.TempDir(), "/tmp"} {
			if filepath.IsAbs(dir) && socketDirFits(dir) == nil && usableDir(dir) {
				socketDir = dir
				return
			}
		}
	})
	return socketDir
}

// maxSocketPath is the longest unix socket path, in bytes, that every supported
// kernel takes: sun_path holds 108 bytes on Linux and 104 on macOS and the BSDs,
// the terminating NUL included.
const maxSocketPath = 103

// socketSuffix is the longest a plugin's socket path gets past its socket
// directory: go-plugin's "/plugin-dir" + up to 10 random digits, then "/plugin" +
// up to 10 (the host's own link, "/toolhost-link" + 10 + "/plugin.sock", is shorter).
const socketSuffix = len("/plugin-dir") + 10 + len("/plugin") + 10

// SocketDirError reports a socket directory whose sockets' paths would be too long
// for a unix socket address, so no plugin can start under it.
type SocketDirError struct {
	Dir string // the socket directory
	Max int    // the longest the directory may be, in bytes
}

func (e *SocketDirError) Error() string {
	return fmt.Sprintf("the socket directory %s is %d bytes long, too long for the unix sockets made in it (at most %d): "+
		"set XDG_RUNTIME_DIR (absolute) or TMPDIR to a shorter directory", e.Dir, len(e.Dir), e.Max)
}

// socketDirFits returns a *SocketDirError if the sockets made under dir would have
// paths longer than a unix socket address may be.
func socketDirFits(dir string) error {
	if len(dir)+socketSuffix > maxSocketPath {
		return &SocketDirError{Dir: dir, Max: maxSocketPath - socketSuffix}
	}
	return nil
}

var (
	socketDirOnce sync.Once
	socketDir     string
)

// usableDir reports whether a private directory can be made (and removed) in dir.
func usableDir(dir string) bool {
	d, err := os.MkdirTemp(dir, "toolhost-probe")
	if err != nil {
		return false
	}
	return os.Remove(d) == nil
}

// Target is where a plugin's tools go.
type Target struct {
	Registry *registry.Registry
	// Location is the registry placement (the Location id).
	Location string
	// Directory is passed to the plugin's activation.
	Directory string
}

// StartError reports a plugin that could not be started or activated. Stderr holds
// the tail of what the plugin wrote to stderr, which usually says why.
type StartError struct {
	Plugin string
	Err    error
	Stderr string
}

func (e *StartError) Error() string {
	msg := fmt.Sprintf("plugins: plugin %q did not start: %v", e.Plugin, e.Err)
	return stderrtail.Quote(msg, "plugin", e.Stderr)
}

func (e *StartError) Unwrap() error { return e.Err }

// ErrChecksum is wrapped by a StartError when the binary does not have its pinned
// digest; the process was not created.
var ErrChecksum = errors.New("plugins: checksum mismatch")

// Instance is one running generation of a plugin: one process and one scope. Its
// tools are registered into its scope; closing the scope (through Stop or the
// parent's close) unregisters them, ends their in-flight executions and stops the
// process.
type Instance struct {
	cfg        Config
	target     Target
	generation uint64
	scope      *scope.Scope
	client     *plugin.Client
	rpcClient  plugin.ClientProtocol // nil until the handshake succeeded
	rpc        pluginpb.PluginClient
	broker     *plugin.GRPCBroker
	proc       *procRunner     // nil when reattached
	attached   *attachedRunner // set when reattached
	stderr     *proc.Ring
	log        *pluginLog
	exited     <-chan struct{}
	inFlight   atomic.Int64
	watch      *callWatch  // the call timeout and the scope's end, for every call
	noCall     atomic.Bool // the plugin does not implement Call: always stream
	// calls holds the context of every call in flight that the plugin may ask
	// about (granted plugins only): call id → context.Context.
	calls    sync.Map
	nextCall atomic.Uint64

	// registering holds a token per registration being received (see admit).
	registering chan struct{}
	// budget counts what the plugin's messages make the host hold.
	budget *budget

	mu   sync.Mutex
	regs map[uint64]*registry.Registration // by the plugin-chosen registration id
	// multiplexed: the plugin's sandbox refuses connect(2), so its broker's
	// connections are streams of the host's one connection to it (go-plugin's
	// GRPCBrokerMultiplex) instead of connections to sockets the host listens on.
	// Set before the launch.
	multiplexed bool
	// announced has a channel per capability served, closed once the broker has
	// announced it to the plugin (acceptAndServe).
	announced []chan struct{}
}

// Start launches generation gen of the plugin in a new child scope of parent,
// serves it the Tools capability, and runs its activation. It returns once the
// activation returned. On any error everything started is stopped before Start
// returns. The instance lives until its scope closes (see Stop).
func Start(ctx context.Context, parent *scope.Scope, cfg Config, target Target, gen uint64) (*Instance, error) {
	cfg = cfg.withDefaults()
	if cfg.SHA256 != "" && cfg.Reattach == nil {
		if err := checkDigest(cfg.Path, cfg.SHA256); err != nil {
			return nil, &StartError{Plugin: cfg.Name, Err: err}
		}
	}
	sc, err := parent.Child()
	if err != nil {
		return nil, &StartError{Plugin: cfg.Name, Err: err}
	}
	inst := &Instance{cfg: cfg, target: target, generation: gen, scope: sc, stderr: proc.NewRing(8 << 10), regs: map[uint64]*registry.Registration{},
		watch: newCallWatch(sc.Context(), cfg.CallTimeout), registering: make(chan struct{}, maxRegistrations),
		budget: newBudget(heldLimit(cfg))}
	inst.log = &pluginLog{name: cfg.Name, logs: loglimit.New(cfg.Logger, 0, 0), tail: inst.stderr}
	if err := inst.start(ctx); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.StopGrace)
		defer cancel()
		_ = sc.Close(closeCtx)
		return nil, &StartError{Plugin: cfg.Name, Err: err, Stderr: inst.stderr.String()}
	}
	if gen <= 1 && inst.proc != nil {
		mode, confined := inst.Containment()
		cfg.Logger.Info("plugin sandbox", "plugin", cfg.Name, "containment", mode, "confined", confined, "limits", inst.proc.box.Spec().Limits.String(), "processes_capped", inst.proc.box.ProcessesCapped(), "layers", strings.Join(inst.Layers(), ","))
	}
	return inst, nil
}

// start launches (or attaches to) the plugin, serves it its capabilities and runs
// its activation, in that order; each step is a method below. Whatever it started
// is stopped by the instance's scope, which Start closes on an error.
func (inst *Instance) start(ctx context.Context) error {
	req := inst.activateRequest()
	clientCfg, atStart, err := inst.clientConfig(req)
	if err != nil {
		return err
	}
	inst.client = plugin.NewClient(clientCfg)
	// Registered first, so it runs last: what the plugin logged is reported once its
	// process and the reading of its stderr have ended.
	_ = inst.scope.Defer(ctx, func(context.Context) error { inst.log.logs.Close(); return nil })
	// The process stops after the tools are gone.
	_ = inst.scope.Defer(ctx, inst.stop)
	_ = inst.scope.Defer(ctx, func(context.Context) error { inst.releaseAll(); return nil })
	if err := inst.connect(ctx, atStart != ""); err != nil {
		return err
	}
	inst.serveCapabilities()
	return inst.activate(ctx, req)
}

// activateRequest is the plugin's activation request. The capabilities' broker ids
// are fixed, so the request can go with the launch.
func (inst *Instance) activateRequest() *pluginpb.ActivateRequest {
	req := &pluginpb.ActivateRequest{
		Directory:               inst.target.Directory,
		WorkspaceId:             inst.cfg.WorkspaceID,
		Options:                 inst.cfg.Options,
		ToolsBrokerId:           toolsBrokerID,
		RegistrationsInResponse: true,
		FlatResults:             true,
	}
	if inst.cfg.Services != nil {
		req.ServicesBrokerId = servicesBrokerID
	}
	if len(inst.cfg.Grants) > 0 {
		req.InteractionBrokerId = interactionBrokerID
	}
	return req
}

// clientConfig is go-plugin's config for the plugin: the protocol versions offered,
// the host token, and how the process is launched in its sandbox (or attached to).
// atStart is the encoded activation request when the plugin is offered activation at
// start (pluginpb.StartActivationVersion), else "".
func (inst *Instance) clientConfig(req *pluginpb.ActivateRequest) (_ *plugin.ClientConfig, atStart string, _ error) {
	cfg := inst.cfg
	plugins := plugin.PluginSet{pluginpb.PluginName: &hostPlugin{}}
	clientCfg := &plugin.ClientConfig{
		HandshakeConfig: pluginpb.Handshake,
		// Version 1 (Handshake.ProtocolVersion) for plugins built with an older sdk,
		// which take the host token in a header on every call.
		Plugins:          plugins,
		VersionedPlugins: map[int]plugin.PluginSet{pluginpb.ConnTokenVersion: plugins},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           cfg.Logger,
		StartTimeout:     cfg.StartTimeout,
		// What the plugin writes to os.Stderr and os.Stdout comes over the
		// connection; its stderr itself, procRunner gives to inst.log.
		SyncStderr:  inst.log.writer("stderr"),
		SyncStdout:  inst.log.writer("stdout"),
		SkipHostEnv: true,
		GRPCDialOptions: append(append(pluginpb.DialOptions(),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(2*pluginpb.ChunkSize)), grpc.WithMaxHeaderListSize(maxHeaderBytes)),
			inst.budget.dialOptions()...),
	}
	if cfg.Reattach != nil {
		rc, err := pluginpb.Reattach(*cfg.Reattach).Config()
		if err != nil {
			return nil, "", err
		}
		inst.attached = newAttachedRunner(rc.Pid)
		rc.ReattachFunc = func() (runner.AttachedRunner, error) { return inst.attached, nil }
		clientCfg.Reattach = rc
		return clientCfg, "", nil
	}

	// Activation at start, if offered: not to a plugin with the Location services,
	// which it may use while it activates, before its server (and with it the broker
	// its connection to them needs) is up.
	if cfg.Services == nil {
		value, ok, err := pluginpb.EncodeActivateRequest(req)
		if err != nil {
			return nil, "", fmt.Errorf("encode the activation request: %w", err)
		}
		if ok {
			atStart = value
			clientCfg.VersionedPlugins[pluginpb.StartActivationVersion] = plugins
		}
	}
	token := rand.Text() // see pluginpb.HostTokenEnv
	// inst.client is set before the connection is dialled, and go-plugin has read the
	// plugin's version from its handshake by then.
	perConn := func() bool { return inst.client.NegotiatedVersion() >= pluginpb.ConnTokenVersion }
	clientCfg.GRPCDialOptions = append(clientCfg.GRPCDialOptions, pluginpb.ConnTokenDialOptions(token, perConn)...)
	if _, err := os.Stat(cfg.Path); err != nil {
		return nil, "", fmt.Errorf("plugin binary: %w", err)
	}
	if err := socketDirFits(cfg.SocketDir); err != nil {
		return nil, "", err
	}
	clientCfg.UnixSocketConfig = &plugin.UnixSocketConfig{TempDir: cfg.SocketDir}
	// The host connects only to the socket the plugin's process serves in its own
	// directory (see procRunner.PluginToHost and dial). Where the plugin's sandbox
	// refuses connect(2) (confined without a world and without the network), the
	// host connects once and the broker's connections are streams multiplexed over
	// that one, so that the plugin connects to nothing (see multiplexed).
	inst.multiplexed = sandbox.RefusesConnect(cfg.sandboxSpec())
	clientCfg.GRPCBrokerMultiplex = inst.multiplexed
	if !inst.multiplexed {
		clientCfg.GRPCDialOptions = append(clientCfg.GRPCDialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			inst.mu.Lock()
			proc := inst.proc
			inst.mu.Unlock()
			return proc.dial(ctx, addr)
		}))
	}
	served := map[uint32]bool{toolsBrokerID: true, servicesBrokerID: cfg.Services != nil, interactionBrokerID: len(cfg.Grants) > 0}
	clientCfg.GRPCDialOptions = append(clientCfg.GRPCDialOptions, grpc.WithChainStreamInterceptor(brokerInbound(func(id uint32) bool { return served[id] })))
	clientCfg.RunnerFunc = func(_ hclog.Logger, spec *exec.Cmd, socketDir string) (runner.Runner, error) {
		env := append(proc.EnvList(cfg.Env), spec.Env...) // spec.Env: go-plugin's own variables only
		env = append(env, pluginpb.HostTokenEnv+"="+token)
		if atStart != "" {
			env = append(env, pluginpb.StartActivationEnv+"="+atStart)
		}
		box, err := sandbox.Command(cfg.sandboxSpec(), cfg.Path, append([]string{cfg.Path}, cfg.Args...), inst.target.Directory, env, socketDir)
		if err != nil {
			return nil, err
		}
		if box.RefusesConnect() != inst.multiplexed {
			box.Release()
			return nil, fmt.Errorf("its sandbox refuses connect(2): %v, but the host expected %v (a bug: sandbox.RefusesConnect and the box disagree)", box.RefusesConnect(), inst.multiplexed)
		}
		if w := box.Warning(); w != "" {
			cfg.Logger.Warn("plugin runs unconfined", "plugin", cfg.Name, "reason", w)
		}
		proc := newProcRunner(box, activationLineLimit(cfg.Limits), inst.log, socketDir)
		if inst.multiplexed {
			// go-plugin dials the multiplexed connection itself (net.Dial), once: it
			// dials a hard link the host makes to the plugin's socket in a directory
			// of its own (see PluginToHost).
			if proc.linkDir, err = os.MkdirTemp(cfg.SocketDir, "toolhost-link"); err != nil {
				box.Release()
				return nil, fmt.Errorf("a directory for the link to its socket: %w", err)
			}
			_ = inst.scope.Defer(context.Background(), func(context.Context) error { return os.RemoveAll(proc.linkDir) })
		}
		inst.mu.Lock() // stop may read it at once: the Location can close during a start
		inst.proc = proc
		inst.mu.Unlock()
		return proc, nil
	}
	return clientCfg, atStart, nil
}

// connect launches (or attaches to) the plugin and completes go-plugin's handshake
// (activating: the plugin activates as it starts).
func (inst *Instance) connect(ctx context.Context, activating bool) error {
	rpcClient, err := inst.client.Client()
	if err != nil {
		return inst.handshakeError(err, activating)
	}
	inst.rpcClient = rpcClient
	raw, err := rpcClient.Dispense(pluginpb.PluginName)
	if err != nil {
		return err
	}
	conn := raw.(*hostConn)
	inst.rpc, inst.broker = conn.client, conn.broker
	if gc, ok := rpcClient.(*plugin.GRPCClient); ok && inst.multiplexed {
		// The first call over the multiplexed connection (go-plugin's health check),
		// within the start timeout: a plugin built with an older sdk refuses it (it
		// checks its peer's pid on every connection, and a stream of one has none),
		// which would otherwise show only at its first call.
		pctx, cancel := context.WithTimeout(ctx, inst.cfg.StartTimeout)
		defer cancel()
		if _, err := grpc_health_v1.NewHealthClient(gc.Conn).Check(pctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName}); err != nil {
			return fmt.Errorf("the plugin refused the host's connection (%w): where its sandbox refuses connect(2) (no world, no network) the host multiplexes everything over one connection, which a plugin built with an older toolhost sdk refuses; rebuild it with the current sdk", err)
		}
	}
	if inst.proc != nil {
		inst.exited = inst.proc.exited
	} else {
		inst.exited = inst.attached.exited
	}
	return nil
}

// serveCapabilities serves the plugin its capabilities on their broker ids: the
// Tools capability always, the Location services to a trusted plugin, the
// Interaction capability to a granted one. Each has one connection, served until the
// plugin's broker closes with the process.
func (inst *Instance) serveCapabilities() {
	cfg := inst.cfg
	inst.acceptAndServe(toolsBrokerID, func(opts []grpc.ServerOption) *grpc.Server {
		s := inst.capabilityServer(opts, registerMessageLimit(cfg.Limits), inst.admit, grpc.MaxConcurrentStreams(maxRegistrations))
		pluginpb.RegisterToolsServer(s, &toolsServer{inst: inst})
		return s
	})
	if svc := cfg.Services; svc != nil {
		inst.acceptAndServe(servicesBrokerID, func(opts []grpc.ServerOption) *grpc.Server {
			s := inst.capabilityServer(opts, serviceMessageLimit, nil, grpc.MaxSendMsgSize(64<<20))
			pluginpb.RegisterFileSystemServer(s, &fsServer{fs: svc.FS})
			pluginpb.RegisterPermissionServer(s, &permissionServer{perm: svc.Permission, source: "plugin:" + inst.cfg.Name})
			return s
		})
	}
	if len(cfg.Grants) > 0 {
		inst.acceptAndServe(interactionBrokerID, func(opts []grpc.ServerOption) *grpc.Server {
			s := inst.capabilityServer(opts, registerMessageLimit(cfg.Limits), nil, grpc.MaxSendMsgSize(64<<20))
			pluginpb.RegisterInteractionServer(s, newInteractionServer(inst, cfg.Grants))
			return s
		})
	}
}

// activate takes the outcome of the activation the plugin made as it started, or
// calls Activate with req, within the start timeout, and registers the activation's
// registrations.
func (inst *Instance) activate(ctx context.Context, req *pluginpb.ActivateRequest) error {
	cfg := inst.cfg
	actx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	stop := context.AfterFunc(inst.scope.Context(), cancel)
	defer stop()
	var res *pluginpb.ActivateResponse
	var err error
	if inst.proc != nil && inst.client.NegotiatedVersion() >= pluginpb.StartActivationVersion {
		res, err = inst.activatedAtStart(actx)
	} else {
		res, err = inst.rpc.Activate(actx, req)
	}
	if err != nil {
		if status.Code(err) == codes.DeadlineExceeded {
			// The plugin's server enforces the same deadline (gRPC sends it along) and
			// may report it before our own timer has fired: wait a moment for ours.
			select {
			case <-actx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		if actx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("activation did not finish within the start timeout (%s)", cfg.StartTimeout)
		}
		if inst.exited != nil {
			if cerr := inst.exitedDuring(err); cerr != nil {
				return fmt.Errorf("the plugin exited during its activation (%s)", cerr.Status) // StartError adds the stderr tail
			}
		}
		return fmt.Errorf("its activation failed: %w", statusError(err))
	}
	// The activation's own registrations came with its answer, in the order made (a
	// plugin built with an older sdk sent them over the Tools capability instead).
	for _, req := range res.Registrations {
		if err := inst.registerUntil(actx, req); err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("its registrations were not made within the start timeout (%s)", cfg.StartTimeout)
			}
			return fmt.Errorf("its activation failed: %w", err)
		}
	}
	return nil
}

// handshakeError says why go-plugin's handshake with a launched plugin failed:
// go-plugin's own words, unless the process exited by itself (its status says more
// than "Unrecognized remote plugin message") or the start timed out (activating:
// the plugin was asked to activate as it started).
func (inst *Instance) handshakeError(err error, activating bool) error {
	if inst.proc == nil {
		return err
	}
	what := "start"
	if activating {
		what = "start and activate"
	}
	select {
	case <-inst.proc.exited:
		if !inst.proc.killedByHost() {
			if activating {
				return fmt.Errorf("the plugin exited before it finished its activation (%s)", inst.proc.exitStatus())
			}
			return fmt.Errorf("the plugin exited before it served (%s)", inst.proc.exitStatus())
		}
	case <-time.After(100 * time.Millisecond):
	}
	if errors.Is(err, plugin.ErrGRPCBrokerMuxNotSupported) {
		return fmt.Errorf("its go-plugin cannot multiplex its broker, which the host requires (the plugin connects to nothing; its sandbox may refuse connect(2)): rebuild it with the current toolhost sdk")
	}
	if strings.Contains(err.Error(), "timeout while waiting for plugin to start") {
		return fmt.Errorf("the plugin did not %s within the start timeout (%s)", what, inst.cfg.StartTimeout)
	}
	return err
}

// The broker ids of the host's capabilities. Each connection to a plugin has a
// broker of its own, so they can be fixed.
const (
	toolsBrokerID uint32 = iota + 1
	servicesBrokerID
	interactionBrokerID
)

// activatedAtStart returns the outcome of an activation the plugin made as it
// started (pluginpb.StartActivationVersion), read off its standard output, as
// Activate would have returned it.
func (inst *Instance) activatedAtStart(ctx context.Context) (*pluginpb.ActivateResponse, error) {
	select {
	case line := <-inst.proc.stdout.Activation():
		return pluginpb.ParseActivationLine(line)
	case <-inst.exited:
		return nil, status.Error(codes.Unavailable, "the plugin exited")
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// acceptAndServe serves a capability on broker id id, from a goroutine, until the
// broker closes. The plugin dials its capabilities when it needs them, possibly
// after its activation returned, so nothing else orders the broker's Accept (which
// announces the capability to the plugin) before a stop that closes the broker:
// stop waits for the announcement (see awaitAnnounced), or go-plugin logs "broker
// closed" on the host's standard logger.
func (inst *Instance) acceptAndServe(id uint32, newServer func([]grpc.ServerOption) *grpc.Server) {
	announced := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(announced) }) }
	inst.mu.Lock()
	inst.announced = append(inst.announced, announced)
	inst.mu.Unlock()
	go func() {
		defer done() // Accept failed, or serving ended
		inst.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
			done()
			return newServer(opts)
		})
	}()
}

// awaitAnnounced waits until every capability was announced to the plugin, or ctx
// ends.
func (inst *Instance) awaitAnnounced(ctx context.Context) {
	inst.mu.Lock()
	announced := inst.announced
	inst.mu.Unlock()
	for _, ch := range announced {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// onlyThePlugin admits only this instance's plugin process tree (the plugin and, in
// the sandbox's cgroup and subreaper modes, its launcher) to a broker-served
// capability. Multiplexed, that holds by construction: a capability's connections
// are streams of the one connection the host dialled to the plugin's socket
// (through the link procRunner.PluginToHost made), and no socket serves them; nil
// then. Otherwise the broker listens on sockets: their directory is private to the host's user, but
// plugins run as that user, so the kernel's word on the peer's pid is what keeps
// one plugin from dialling another's capabilities.
func (inst *Instance) onlyThePlugin() []grpc.ServerOption {
	if inst.multiplexed {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(peercred.Creds(func(p peercred.Peer) error {
		if inst.proc != nil && inst.proc.box.Contains(p.PID) {
			return nil
		}
		if want := inst.pluginPID(); p.PID != want {
			return fmt.Errorf("peer pid %d is not plugin %q (pid %d)", p.PID, inst.cfg.Name, want)
		}
		return nil
	}))}
}

// pluginPID is the plugin process's pid, launched or attached.
func (inst *Instance) pluginPID() int {
	if inst.attached != nil {
		return inst.attached.pid
	}
	return inst.PID()
}

func checkDigest(path, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("plugin binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("plugin binary: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(want) {
		return &checksumError{path: path, got: got, want: want}
	}
	return nil
}

// checksumError is ErrChecksum with its particulars; its text does not repeat
// ErrChecksum's package prefix inside the StartError that carries it.
type checksumError struct{ path, got, want string }

func (e *checksumError) Error() string {
	return fmt.Sprintf("checksum mismatch: %s has sha256 %s, the config pins %s; refusing to start it", e.path, e.got, e.want)
}

func (e *checksumError) Is(target error) bool { return target == ErrChecksum }

// Generation returns the instance's generation.
func (inst *Instance) Generation() uint64 { return inst.generation }

// Scope returns the instance's scope.
func (inst *Instance) Scope() *scope.Scope { return inst.scope }

// Done returns a channel closed when the plugin process has exited, for whatever
// reason.
func (inst *Instance) Done() <-chan struct{} { return inst.exited }

// Stop closes the instance's scope: its tools are unregistered, its in-flight
// executions end as interruptions, and its process is stopped (asked, then killed as
// a group after the grace). Idempotent.
func (inst *Instance) Stop(ctx context.Context) error { return inst.scope.Close(ctx) }

// Crash describes the exit of a plugin process that ended on its own (a
// *supervise.CrashError, with its exit status and stderr); see supervise.Generation.
func (inst *Instance) Crash() error { return inst.crash() }

// crash is the *supervise.CrashError of the plugin's exit.
func (inst *Instance) crash() *supervise.CrashError {
	cerr := &supervise.CrashError{Kind: "plugin", Name: inst.cfg.Name, Generation: inst.generation, Stderr: inst.stderr.String(), Status: "exited"}
	if inst.proc != nil {
		cerr.Status = inst.proc.exitStatus()
	}
	return cerr
}

// stop ends the process: go-plugin's graceful shutdown (it asks the plugin's server
// to stop), and SIGKILL to the whole process group once the grace (or the close
// deadline, whichever is first) has passed without an exit.
func (inst *Instance) stop(ctx context.Context) error {
	inst.awaitAnnounced(ctx)
	if inst.cfg.Reattach != nil {
		// Reattached: the process is not ours; only disconnect (go-plugin's Kill
		// would ask it to shut down).
		if inst.broker != nil {
			_ = inst.broker.Close()
		}
		if gc, ok := inst.rpcClient.(*plugin.GRPCClient); ok {
			_ = gc.Conn.Close()
		}
		if inst.attached != nil {
			_ = inst.attached.Kill(ctx)
		}
		return nil
	}
	deadline := time.Now().Add(inst.cfg.StopGrace)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// go-plugin's Kill waits a hard-coded 2s before calling the runner's Kill; ours
	// waits for our own deadline instead, and this watchdog covers a plugin too
	// wedged to answer the shutdown request. The process may not have been launched
	// yet (a close during the start): go-plugin's Kill then waits for its start to
	// end, and the process it launched is killed after.
	if proc := inst.runner(); proc != nil {
		proc.killAfter(deadline)
		watchdog := time.AfterFunc(time.Until(deadline), proc.killGroup)
		defer watchdog.Stop()
	}
	inst.client.Kill() // returns once the process is reaped and the socket dir removed
	if proc := inst.runner(); proc != nil {
		proc.killGroup()
	}
	return nil
}

// runner returns the process runner once go-plugin has launched the plugin, else nil.
func (inst *Instance) runner() *procRunner {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.proc
}

// register adds a batch the plugin sent over its Tools capability.
func (inst *Instance) register(id uint64, b registry.Batch) error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if _, dup := inst.regs[id]; dup {
		return fmt.Errorf("registration id %d already in use", id)
	}
	g, err := inst.target.Registry.Add(b)
	if err != nil {
		return err
	}
	inst.regs[id] = g
	return nil
}

// closeRegistration removes one batch the running plugin closed (withdrawn: gone at
// once, even while the supervisor holds the plugin's tools); unknown ids are an error
// (a plugin can only close its own).
func (inst *Instance) closeRegistration(id uint64) error {
	inst.mu.Lock()
	g, ok := inst.regs[id]
	delete(inst.regs, id)
	inst.mu.Unlock()
	if !ok {
		return fmt.Errorf("no registration %d in this plugin's scope", id)
	}
	g.Withdraw()
	return nil
}

// Release unregisters every tool of the plugin, newest batch first; its calls in
// flight go on. Stop releases them too. Idempotent.
func (inst *Instance) Release() { inst.releaseAll() }

// releaseAll removes every batch, newest first.
func (inst *Instance) releaseAll() {
	inst.mu.Lock()
	ids := make([]uint64, 0, len(inst.regs))
	for id := range inst.regs {
		ids = append(ids, id)
	}
	regs := inst.regs
	inst.regs = map[uint64]*registry.Registration{}
	inst.mu.Unlock()
	slices.Sort(ids)
	for _, id := range slices.Backward(ids) {
		regs[id].Release()
	}
}

// InFlight returns the number of executions in progress on this instance.
func (inst *Instance) InFlight() int { return int(inst.inFlight.Load()) }

// PID returns the plugin process's id (in the host's PID namespace; under the
// sandbox's cgroup and subreaper modes its parent is a launcher), or 0 when the host
// did not launch it.
func (inst *Instance) PID() int {
	if inst.proc == nil {
		return 0
	}
	return inst.proc.box.ProgramPID()
}

// Stderr returns the tail of what the plugin wrote to stderr (about 8 KiB).
func (inst *Instance) Stderr() string { return inst.stderr.String() }

// Layers names what holds the plugin's process (see sandbox.Box.Layers); nil for a
// reattached plugin.
func (inst *Instance) Layers() []string {
	if inst.proc == nil {
		return nil
	}
	return inst.proc.box.Layers()
}

// Containment reports how the plugin's process tree is held together, and whether
// Landlock confines it. A reattached plugin (-debug), which the host did not launch,
// is neither: ModeNone.
func (inst *Instance) Containment() (mode sandboxcfg.Mode, confined bool) {
	if inst.proc == nil {
		return sandboxcfg.ModeNone, false
	}
	return sandboxcfg.Mode(inst.proc.box.Mode()), inst.proc.box.Confined()
}

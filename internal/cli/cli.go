package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/internal/termtext"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

// Exit codes of Run.
const (
	// ExitOK: the command succeeded; for call, the call completed.
	ExitOK = 0
	// ExitToolError: the call settled with a model-visible error (tool failure, unknown
	// tool, invalid input or output, unavailable).
	ExitToolError = 1
	// ExitFailure: an operational failure (activation failed, defect, plugin crash,
	// storage failure).
	ExitFailure = 2
	// ExitInterrupted: interrupted (the context was cancelled, e.g. by SIGINT).
	ExitInterrupted = 3
	// ExitPartial: tools and status: the Location is active, but some of its sources
	// do not serve (starting, restarting or failed); they are reported after the tools.
	ExitPartial = 4
	// ExitUsage: the command line was wrong.
	ExitUsage = 64
)

// closeTimeout bounds a command's shutdown as a whole: every step of it (serve's
// drain, deactivation) shares one deadline, closeTimeout after the shutdown began
// (the first signal, or the first step when the command ends by itself); see
// app.closeContext. Main's backstop ends the process closeTimeout+exitMargin after
// the first signal whatever a step does.
const closeTimeout = 10 * time.Second

// exitMargin is how long past closeTimeout Main waits, after the first signal, for
// Run to return before it exits anyway: the time for the forced kills that an
// expired close deadline starts to be reaped.
const exitMargin = 2 * time.Second

const usage = `usage: toolhost <command> [flags] [arguments]

commands:
  tools    list the tools of a Location
  call     settle one tool call in a Location
  serve    serve the API for session runners (gRPC on a unix socket or loopback TCP)
  dev      serve, watching plugins and hot-reloading them when they change
  mcp      serve the tools of Locations as an MCP server (stdio or loopback HTTP)
  mcp-login  authorize toolhost with a Location's remote MCP server (OAuth)
  status   print the source health of a running serve or dev
  restart  restart one source of a Location on a running serve or dev
  plugins  lock, upgrade, verify and list plugins taken from Go modules
  version  print the version
  help     print this help, or a command's: toolhost help <command>

exit status:
  0   success; for call, the call completed
  1   the call settled with a model-visible error: tool failure, unknown tool,
      invalid input, invalid output or unavailable
  2   operational failure: activation failed, defect, plugin crash, storage failure;
      for call, a tool whose source is starting or failed (named, with its error)
  3   interrupted
  4   tools, status: some sources of the Location do not serve (reported on stdout)
  64  usage error

environment:
  TOOLHOST_OUTPUT_DIR   managed storage for oversized output
                        (default $XDG_DATA_HOME/toolhost/tool-output)
  TOOLHOST_BUILD_CACHE  where plugins given as Go source are built
                        (default $XDG_CACHE_HOME/toolhost/build)
  TOOLHOST_REATTACH     attach to plugins started with -debug instead of launching them
`

// Run runs the toolhost command with args (without the program name) and returns its
// exit status. Cancelling ctx interrupts it: a call in flight ends as an interruption
// (ExitInterrupted) and everything started is stopped before Run returns. stdin is
// read only by `call NAME -`. Run writes results to stdout and diagnostics, progress
// and logs to stderr; it never writes to either after it returns.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	defer sandbox.DropReserves() // what is kept ready for confined starts
	// Everything on stderr is made inert (termtext): logs, errors, progress and
	// permission asks quote what tool sources say.
	a := &app{stdin: stdin, stdout: stdout, stderr: &lockedWriter{w: termtext.NewWriter(stderr)}}
	// An interruption starts the shutdown's clock, whichever step comes first.
	defer context.AfterFunc(ctx, a.beginClose)()
	if isTerminal(stdin) {
		p := newPromptAsker(stdin, a.stderr)
		a.asker, a.questions = p, questionPrompt{p}
	}
	if len(args) == 0 {
		fmt.Fprint(a.stderr, usage)
		return ExitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "tools":
		return a.tools(ctx, rest)
	case "call":
		return a.call(ctx, rest)
	case "serve":
		return a.serve(ctx, rest)
	case "dev":
		return a.dev(ctx, rest)
	case "mcp":
		return a.mcp(ctx, rest)
	case "mcp-login":
		return a.mcpLogin(ctx, rest)
	case "status":
		return a.status(ctx, rest)
	case "restart":
		return a.restart(ctx, rest)
	case "plugins":
		return a.plugins(ctx, rest)
	case "version":
		return a.version(rest)
	case "help", "-h", "-help", "--help":
		return a.help(rest)
	default:
		a.errorf("toolhost: unknown command %q\n\n%s", cmd, usage)
		return ExitUsage
	}
}

type app struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// asker answers permission asks: the person at the terminal when stdin is one;
	// nil otherwise, so asks are denied (the hint on stderr says how to allow them).
	asker permission.Asker
	// questions answers tools' sdk.Ask questions in call: the person at the
	// terminal when stdin is one; nil otherwise (nobody to ask).
	questions sdk.Interactor

	closeOnce sync.Once
	closeBy   time.Time // the shutdown's one deadline, once closeOnce ran
}

// beginClose starts the shutdown's clock, once: the shutdown must end by
// closeTimeout from now. Safe for concurrent use.
func (a *app) beginClose() {
	a.closeOnce.Do(func() { a.closeBy = time.Now().Add(closeTimeout) })
}

// closeContext returns a context for one step of the command's shutdown: not
// cancelled with ctx, and with the shutdown's one deadline (beginClose), so that the
// steps together, not each, end within closeTimeout. The deadline is measured on the
// monotonic clock: a wall-clock jump moves it neither way.
func (a *app) closeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	a.beginClose()
	return context.WithDeadline(context.WithoutCancel(ctx), a.closeBy)
}

func (a *app) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if msg == "" || msg[len(msg)-1] != '\n' {
		msg += "\n"
	}
	io.WriteString(a.stderr, msg)
}

func (a *app) help(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stdout, usage)
		return ExitOK
	}
	var fs *flag.FlagSet
	switch args[0] {
	case "tools":
		fs, _ = a.toolsFlags()
	case "call":
		fs, _ = a.callFlags()
	case "serve":
		fs, _ = a.serveCommandFlags()
	case "dev":
		fs, _ = a.devFlags()
	case "mcp":
		fs, _ = a.mcpFlags()
	case "mcp-login":
		fs, _ = a.mcpLoginFlags()
	case "status":
		fs, _ = a.statusFlags()
	case "restart":
		fs, _ = a.restartFlags()
	case "plugins":
		fmt.Fprint(a.stdout, pluginsUsage)
		return ExitOK
	case "version":
		fmt.Fprintln(a.stdout, "usage: toolhost version\n\nprints the version of toolhost.")
		return ExitOK
	default:
		a.errorf("toolhost help: unknown command %q\n\n%s", args[0], usage)
		return ExitUsage
	}
	fs.SetOutput(a.stdout)
	fs.Usage()
	return ExitOK
}

func (a *app) version(args []string) int {
	if len(args) > 0 {
		a.errorf("toolhost version: unexpected arguments %q\nusage: toolhost version", args)
		return ExitUsage
	}
	fmt.Fprintf(a.stdout, "toolhost %s\n", Version())
	return ExitOK
}

// Version returns the main module's version from the build info, or "(devel)".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// newFlagSet returns a flag set for one subcommand that prints its usage (synopsis,
// description, flags) to stderr.
func (a *app) newFlagSet(name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet("toolhost "+name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: toolhost %s %s\n\n%s\nflags:\n", name, synopsis, description)
		fs.PrintDefaults()
		fmt.Fprintf(w, "\nexit status: 0 success, 1 model-visible error, 2 operational failure,\n3 interrupted, 64 usage error (see toolhost help)\n")
	}
	return fs
}

// parse parses flags that may come before, between or after the positional
// arguments, and returns the positional ones. "--" ends the flags. It returns a
// usage exit code and false when parsing failed or help was asked for.
func (a *app) parse(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, ExitOK, false
			}
			return nil, ExitUsage, false // the flag package printed the error and usage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, 0, true
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), 0, true
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// usageError reports a wrong command line with the subcommand's usage.
func (a *app) usageError(fs *flag.FlagSet, format string, args ...any) int {
	a.errorf("%s: %s", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return ExitUsage
}

// session is what a command needs to work in one activated Location.
type session struct {
	loc    *location.Location
	reg    *registry.Registry
	logger hclog.Logger
}

// withLocation opens the managed storage and a registry, activates the Location at
// dir in a root scope, runs fn, and closes everything (within closeTimeout) before it
// returns fn's exit code.
func (a *app) withLocation(ctx context.Context, cmd, dir string, verbose bool, fn func(*session) int) int {
	level := hclog.Warn
	if verbose {
		level = hclog.Debug
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "toolhost", Output: a.stderr, Level: level})

	tel, stopTelemetry, err := a.startTelemetry(ctx, false, logger)
	if err != nil {
		a.errorf("toolhost %s: %v", cmd, err)
		return ExitFailure
	}
	defer func() {
		if err := stopTelemetry(); err != nil {
			for _, err := range joined(err) {
				a.errorf("toolhost %s: %v", cmd, err)
			}
		}
	}()
	reg, err := openObservedRegistry(tel)
	if err != nil {
		a.errorf("toolhost %s: %v", cmd, err)
		return ExitFailure
	}

	root := scope.New(ctx)
	defer func() {
		closeCtx, cancel := a.closeContext(ctx)
		defer cancel()
		if err := root.Close(closeCtx); err != nil {
			a.errorf("toolhost %s: deactivate: %v", cmd, err)
		}
	}()
	loc, err := location.Activate(ctx, root, dir, location.Options{Registry: reg, Logger: logger, Asker: a.asker, ObservePermission: tel.ObservePermission()})
	if err != nil {
		if ctx.Err() != nil {
			a.errorf("interrupted")
			return ExitInterrupted
		}
		a.errorf("toolhost %s: %v", cmd, err)
		return ExitFailure
	}
	if a.asker != nil { // a person at a terminal: remote servers can log in now
		a.loginOnFirstUse(ctx, loc)
	}
	return fn(&session{loc: loc, reg: reg, logger: logger})
}

// lockedWriter serializes writes from the logger, progress reports and diagnostics.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

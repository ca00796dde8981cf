package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/devwatch"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/mcpserve"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/server"
)

type mcpOptions struct {
	locations []string
	http      string
	tokenFile string
	noToken   bool
	dev       bool
	debounce  time.Duration
	verbose   bool
}

func (a *app) mcpFlags() (*flag.FlagSet, *mcpOptions) {
	o := &mcpOptions{}
	fs := a.newFlagSet("mcp", "[--location DIR]... [--http 127.0.0.1:PORT [--token-file PATH]] [--dev [--debounce DURATION]] [--verbose]",
		"serves the tools of the Locations as an MCP server: on stdin and stdout (what MCP\n"+
			"clients launch), or with --http as streamable HTTP on loopback. Calls go through\n"+
			"the same pipeline as every runner's: permission, validation, bounding, hooks.\n"+
			"Permission asks go to the client's user as elicitations (once, always or reject)\n"+
			"when the client supports them; otherwise they are denied.\n\n"+
			"With no --location, the client's roots (file:// directories) are the Locations,\n"+
			"activated and deactivated as the client's roots change.\n"+
			"With one Location tools keep their names; with several each is prefixed with its\n"+
			"Location's workspace_id (else its directory name) and \"_\", made unique.\n\n"+
			"--http listens on a loopback address only and every request must carry\n"+
			"\"Authorization: Bearer <token>\", the token (alone, no newline) being in the token\n"+
			"file; requests with a non-loopback Host or Origin are refused. The first line on\n"+
			"stdout says \"serving on http://ADDRESS/mcp, token in FILE\".\n\n"+
			"--dev watches the plugins and hot-reloads them as `toolhost dev` does; the client\n"+
			"is sent notifications/tools/list_changed when the tool set changes. Logs and\n"+
			"reload reports go to stderr (and, as notifications/message, to the client).\n")
	fs.Func("location", "serve the Location at `DIR` (repeatable; none: the client's roots)", func(dir string) error {
		o.locations = append(o.locations, dir)
		return nil
	})
	fs.StringVar(&o.http, "http", "", "serve streamable HTTP at `address` (127.0.0.1:PORT, [::1]:PORT; port 0 picks one)\ninstead of stdio")
	fs.StringVar(&o.tokenFile, "token-file", "", "with --http, write the token to `path` (mode 0600; default toolhost-mcp.token\nnext to the default socket of toolhost serve)")
	fs.BoolVar(&o.noToken, "no-token", false, "with --http, require no token: any local process can call the tools (for the\nMCP conformance suite, which cannot send one); Host and Origin are still checked")
	fs.BoolVar(&o.dev, "dev", false, "watch the plugins and hot-reload them when they change")
	fs.DurationVar(&o.debounce, "debounce", devwatch.DefaultDebounce, "with --dev, the quiet `period` that ends a burst of changes")
	fs.BoolVar(&o.verbose, "verbose", false, "show plugin and host logs on stderr (otherwise only warnings and errors)")
	return fs, o
}

func (a *app) mcp(ctx context.Context, args []string) int {
	fs, o := a.mcpFlags()
	positional, code, ok := a.parse(fs, args)
	if !ok {
		return code
	}
	switch {
	case len(positional) > 0:
		return a.usageError(fs, "unexpected arguments %q", positional)
	case len(o.locations) == 0 && o.dev:
		return a.usageError(fs, "--dev needs --location DIR")
	case o.http == "" && (o.tokenFile != "" || o.noToken):
		return a.usageError(fs, "--token-file and --no-token go with --http")
	case o.noToken && o.tokenFile != "":
		return a.usageError(fs, "--no-token and --token-file exclude each other")
	}
	m := &mcpRun{app: a, o: o, logger: mcpLogger(a.stderr, o.verbose)}
	defer m.cleanup()
	var lis net.Listener
	if o.http != "" {
		var err error
		if lis, err = m.listen(); err != nil {
			if errors.Is(err, server.ErrNotLoopback) {
				return a.usageError(fs, "%v", err)
			}
			return m.fail(err)
		}
	}
	if err := m.start(ctx); err != nil {
		return m.fail(err)
	}
	if lis == nil {
		return m.serveStdio(ctx)
	}
	if err := m.activate(ctx); err != nil {
		return m.activationFailed(ctx, err)
	}
	return m.serveHTTP(ctx, lis)
}

// mcpRun is one run of toolhost mcp: its steps are the methods below, in order
// (listen with --http; start; then serveStdio, or activate and serveHTTP), and
// cleanup undoes, in reverse, what they did.
type mcpRun struct {
	app    *app
	o      *mcpOptions
	logger hclog.InterceptLogger

	token, tokenFile string
	srv              *mcpserve.Server
	locOpts          location.Options
	root             *scope.Scope
	roots            map[string]*location.Location // with no --location: the client's roots served
	undo             []func()
}

// mcpLogger sends plugin and host logs to stderr at level Warn (Debug with verbose),
// and, through the sinks the server registers, to the client's sessions at the level
// each set with logging/setLevel. The logger itself passes everything down to Debug:
// a plugin's log lines below the host logger's level are dropped before any sink
// sees them.
func mcpLogger(stderr io.Writer, verbose bool) hclog.InterceptLogger {
	level := hclog.Warn
	if verbose {
		level = hclog.Debug
	}
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "toolhost", Output: io.Discard, Level: hclog.Debug})
	logger.RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{Output: stderr, Level: level}))
	return logger
}

func (m *mcpRun) fail(err error) int {
	m.app.errorf("toolhost mcp: %v", err)
	return ExitFailure
}

// cleanup runs the steps' undos, last first.
func (m *mcpRun) cleanup() {
	for i := len(m.undo) - 1; i >= 0; i-- {
		m.undo[i]()
	}
}

// listen opens --http's loopback listener and, unless --no-token, writes the token
// file.
func (m *mcpRun) listen() (net.Listener, error) {
	lis, err := server.ListenTCP(m.o.http, m.logger)
	if err != nil {
		return nil, err
	}
	m.undo = append(m.undo, func() { lis.Close() })
	if m.o.noToken {
		return lis, nil
	}
	m.tokenFile = m.o.tokenFile
	if m.tokenFile == "" {
		m.tokenFile = filepath.Join(filepath.Dir(server.DefaultTokenPath(os.Getenv)), "toolhost-mcp.token")
	}
	if m.tokenFile, m.token, err = writeToken(m.tokenFile); err != nil {
		return nil, err
	}
	m.undo = append(m.undo, func() { removeToken(m.tokenFile, m.token) })
	return lis, nil
}

// start opens telemetry, the registry and the MCP server, and sets up how Locations
// are activated (m.locOpts, m.root): nothing a client's initialize waits for beyond
// these.
func (m *mcpRun) start(ctx context.Context) error {
	tel, stopTelemetry, err := m.app.startTelemetry(ctx, false, m.logger)
	if err != nil {
		return err
	}
	m.undo = append(m.undo, func() {
		if err := stopTelemetry(); err != nil {
			for _, err := range joined(err) {
				m.app.errorf("toolhost mcp: %v", err)
			}
		}
	})
	reg, err := openObservedRegistry(tel)
	if err != nil {
		return err
	}
	mopts := mcpserve.Options{Registry: reg, Logger: m.logger.Named("mcp"), Version: Version()}
	if len(m.o.locations) == 0 {
		mopts.Roots = func(dirs []string) { m.followRoots(ctx, dirs) }
	}
	if m.srv, err = mcpserve.New(mopts); err != nil {
		return err
	}
	m.undo = append(m.undo, func() { m.srv.Close() })
	m.logger.RegisterSink(m.srv.LogSink())

	// Plugins build and sources start in the background, so the client's
	// initialize is answered at once; their tools arrive with list_changed. (The
	// dev watcher needs the plugins' supervisors from the start.)
	m.locOpts = location.Options{Registry: reg, Logger: m.logger, Asker: m.srv, StartInBackground: !m.o.dev, WatchConfig: true,
		ObservePermission: tel.ObservePermission()}
	if m.o.dev {
		if m.locOpts.BuildCache, err = location.BuildCacheDir("", os.Environ()); err != nil {
			return err
		}
	}
	m.root = scope.New(context.WithoutCancel(ctx))
	m.undo = append(m.undo, func() {
		closeCtx, cancel := m.app.closeContext(ctx)
		defer cancel()
		if err := m.root.Close(closeCtx); err != nil {
			m.app.errorf("toolhost mcp: %v", err)
		}
	})
	m.roots = map[string]*location.Location{}
	return nil
}

// followRoots makes the client's roots the Locations served (no --location): each
// new root is activated and served, each root gone is removed and closed.
func (m *mcpRun) followRoots(ctx context.Context, dirs []string) {
	for dir, loc := range m.roots {
		if !slices.Contains(dirs, dir) {
			m.srv.Remove(loc.ID())
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
			if err := loc.Close(closeCtx); err != nil {
				m.app.errorf("toolhost mcp: root %s: %v", dir, err)
			}
			cancel()
			delete(m.roots, dir)
		}
	}
	for _, dir := range dirs {
		if m.roots[dir] != nil {
			continue
		}
		loc, err := location.Activate(ctx, m.root, dir, m.locOpts)
		if err != nil {
			m.app.errorf("toolhost mcp: root %s: not served: %v", dir, err)
			continue
		}
		m.roots[dir] = loc
		m.srv.Add(loc)
	}
}

// activate activates the --location Locations (with --dev, watching each) and
// serves them.
func (m *mcpRun) activate(ctx context.Context) error {
	for _, dir := range m.o.locations {
		loc, err := location.Activate(ctx, m.root, dir, m.locOpts)
		if err != nil {
			return err
		}
		if m.o.dev {
			w, err := devwatch.Watch(context.WithoutCancel(ctx), loc, devwatch.Options{
				BuildCache: m.locOpts.BuildCache,
				Debounce:   m.o.debounce,
				Logger:     m.logger,
				Report:     func(ev devwatch.Event) { io.WriteString(m.app.stderr, ev.String()+"\n") },
			})
			if err != nil {
				m.app.errorf("toolhost mcp: %s: not watching: %v", loc.ID(), err)
			} else {
				m.undo = append(m.undo, func() { w.Close() })
			}
		}
		m.srv.Add(loc)
	}
	return nil
}

// activationFailed reports err, activate's, and returns the exit code.
func (m *mcpRun) activationFailed(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		m.app.errorf("interrupted")
		return ExitInterrupted
	}
	return m.fail(err)
}

// serveStdio serves one client session on stdin and stdout until it ends. The
// session is served from the start, and the Locations are activated once the
// server has written its first message (the answer to the client's initialize):
// the answer never waits for, or shares the processors with, reading configs and
// starting sources; the client's tools/list and tools/call wait
// (mcpserve.Server.Hold) until the Locations are served. A Location that cannot be
// activated ends the session and the run; a client that goes away ends the
// activation, or keeps it from starting.
func (m *mcpRun) serveStdio(ctx context.Context) int {
	in := m.app.stdin
	relay := false
	if f, ok := in.(*os.File); ok && f == os.Stdin {
		if pf, restore := pollable(f); pf != nil {
			defer restore()
			in = pf
		}
		relay = true
	}
	release := m.srv.Hold()
	defer release()
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	actCtx, stopActivating := context.WithCancel(ctx)
	defer stopActivating()
	served := make(chan error, 1)
	out := &firstWrite{w: m.app.stdout, done: make(chan struct{})}
	go func() {
		served <- m.srv.ServeStdio(serveCtx, in, out)
		stopActivating()
	}()
	var err error
	select {
	case <-out.done:
		err = m.activate(actCtx)
	case <-actCtx.Done():
		err = actCtx.Err()
	}
	release()
	if relay { // after the activation, which runs beside the session's first answers
		defer relayProcs()()
	}
	if err != nil && (ctx.Err() != nil || actCtx.Err() == nil) { // not a client that went away
		stopServing()
		<-served
		return m.activationFailed(ctx, err)
	}
	if err := <-served; err != nil {
		return m.fail(err)
	}
	return ExitOK
}

// firstWrite is a writer that closes done once its first Write has returned.
type firstWrite struct {
	w    io.Writer
	once sync.Once
	done chan struct{}
}

func (f *firstWrite) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	f.once.Do(func() { close(f.done) })
	return n, err
}

// serveHTTP serves streamable HTTP on lis until ctx ends or serving fails.
func (m *mcpRun) serveHTTP(ctx context.Context, lis net.Listener) int {
	// No WriteTimeout: a session's event stream lives as long as the session (the
	// handler bounds each write itself). A kept-alive connection left idle is let go.
	hs := &http.Server{Handler: m.srv.Handler(mcpserve.HTTPOptions{Token: m.token, TokenFile: m.tokenFile}),
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()
	if m.o.noToken {
		fmt.Fprintf(m.app.stdout, "serving on http://%s/mcp, no token\n", lis.Addr())
	} else {
		fmt.Fprintf(m.app.stdout, "serving on http://%s/mcp, token in %s\n", lis.Addr(), m.tokenFile)
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return m.fail(err)
		}
	}
	m.srv.Close() // ends the sessions' streams, so Shutdown need not wait for them
	closeCtx, cancel := m.app.closeContext(ctx)
	defer cancel()
	if err := hs.Shutdown(closeCtx); err != nil {
		return m.fail(err)
	}
	return ExitOK
}

// relayProcs gives the process one processor (GOMAXPROCS=1) while it serves stdio,
// unless the environment sets GOMAXPROCS, and only where the rule the host applies
// to its plugins (a quarter of its own processors, at least one) gives one as well:
// on fewer than 8, where plugins get one either way. It returns the function that
// gives the runtime back its default. toolhost mcp relays one client's calls to
// plugins and servers in other processes; each idle processor of its runtime spins
// looking for work on the CPUs those processes need. It pays only with stdin read
// through the poller (pollable): in blocking mode the blocked read would hold the
// one processor until the runtime's monitor takes it back (BENCHMARKS.md has both
// measured).
func relayProcs() (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0)/4 > 1 {
		return func() {}
	}
	runtime.GOMAXPROCS(1)
	return func() { runtime.SetDefaultGOMAXPROCS() }
}

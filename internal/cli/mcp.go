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
	level := hclog.Warn
	if o.verbose {
		level = hclog.Debug
	}
	// Plugin and host logs go to stderr at level, and to the client's sessions at the
	// level each set (the sink sees every message).
	// The logger passes everything down to debug (a plugin's log lines below the
	// host logger's level are dropped before any sink sees them); stderr gets level
	// and up, each client session what it asked for with logging/setLevel.
	logger := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: "toolhost", Output: io.Discard, Level: hclog.Debug})
	logger.RegisterSink(hclog.NewSinkAdapter(&hclog.LoggerOptions{Output: a.stderr, Level: level}))
	fail := func(err error) int {
		a.errorf("toolhost mcp: %v", err)
		return ExitFailure
	}

	var (
		lis       net.Listener
		token     string
		tokenFile string
		err       error
	)
	if o.http != "" {
		if lis, err = server.ListenTCP(o.http, logger); err != nil {
			if errors.Is(err, server.ErrNotLoopback) {
				return a.usageError(fs, "%v", err)
			}
			return fail(err)
		}
		defer lis.Close()
	}
	if lis != nil && !o.noToken {
		tokenFile = o.tokenFile
		if tokenFile == "" {
			tokenFile = filepath.Join(filepath.Dir(server.DefaultTokenPath(os.Getenv)), "toolhost-mcp.token")
		}
		if tokenFile, token, err = writeToken(tokenFile); err != nil {
			return fail(err)
		}
		defer removeToken(tokenFile, token)
	}

	tel, stopTelemetry, err := startTelemetry(ctx, false)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err := stopTelemetry(); err != nil {
			a.errorf("toolhost mcp: %v", err)
		}
	}()
	reg, err := openObservedRegistry(tel)
	if err != nil {
		return fail(err)
	}
	var fromRoots func([]string) // set below, once the Locations' options are known
	mopts := mcpserve.Options{Registry: reg, Logger: logger.Named("mcp"), Version: Version()}
	if len(o.locations) == 0 {
		mopts.Roots = func(dirs []string) { fromRoots(dirs) }
	}
	srv, err := mcpserve.New(mopts)
	if err != nil {
		return fail(err)
	}
	defer srv.Close()
	logger.RegisterSink(srv.LogSink())

	// Plugins build and sources start in the background, so the client's
	// initialize is answered at once; their tools arrive with list_changed. (The
	// dev watcher needs the plugins' supervisors from the start.)
	locOpts := location.Options{Registry: reg, Logger: logger, Asker: srv, StartInBackground: !o.dev, WatchConfig: true,
		ObservePermission: tel.ObservePermission()}
	if o.dev {
		if locOpts.BuildCache, err = location.BuildCacheDir("", os.Environ()); err != nil {
			return fail(err)
		}
	}
	root := scope.New(context.WithoutCancel(ctx))
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := root.Close(closeCtx); err != nil {
			a.errorf("toolhost mcp: %v", err)
		}
	}()
	// With no --location, the client's roots are the Locations: each new root is
	// activated and served, each root gone is removed and closed.
	roots := map[string]*location.Location{}
	fromRoots = func(dirs []string) {
		for dir, loc := range roots {
			if !slices.Contains(dirs, dir) {
				srv.Remove(loc.ID())
				closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
				if err := loc.Close(closeCtx); err != nil {
					a.errorf("toolhost mcp: root %s: %v", dir, err)
				}
				cancel()
				delete(roots, dir)
			}
		}
		for _, dir := range dirs {
			if roots[dir] != nil {
				continue
			}
			loc, err := location.Activate(ctx, root, dir, locOpts)
			if err != nil {
				a.errorf("toolhost mcp: root %s: not served: %v", dir, err)
				continue
			}
			roots[dir] = loc
			srv.Add(loc)
		}
	}
	for _, dir := range o.locations {
		loc, err := location.Activate(ctx, root, dir, locOpts)
		if err != nil {
			if ctx.Err() != nil {
				a.errorf("interrupted")
				return ExitInterrupted
			}
			return fail(err)
		}
		if o.dev {
			w, err := devwatch.Watch(context.WithoutCancel(ctx), loc, devwatch.Options{
				BuildCache: locOpts.BuildCache,
				Debounce:   o.debounce,
				Logger:     logger,
				Report:     func(ev devwatch.Event) { io.WriteString(a.stderr, ev.String()+"\n") },
			})
			if err != nil {
				a.errorf("toolhost mcp: %s: not watching: %v", loc.ID(), err)
			} else {
				defer w.Close()
			}
		}
		srv.Add(loc)
	}

	if lis == nil {
		in := a.stdin
		if f, ok := in.(*os.File); ok && f == os.Stdin {
			if pf, restore := pollable(f); pf != nil {
				defer restore()
				in = pf
			}
			defer relayProcs()()
		}
		if err := srv.ServeStdio(ctx, in, a.stdout); err != nil {
			return fail(err)
		}
		return ExitOK
	}
	hs := &http.Server{Handler: srv.Handler(mcpserve.HTTPOptions{Token: token, TokenFile: tokenFile}), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()
	if o.noToken {
		fmt.Fprintf(a.stdout, "serving on http://%s/mcp, no token\n", lis.Addr())
	} else {
		fmt.Fprintf(a.stdout, "serving on http://%s/mcp, token in %s\n", lis.Addr(), tokenFile)
	}
	select {
	case <-ctx.Done():
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return fail(err)
		}
	}
	srv.Close() // ends the sessions' streams, so Shutdown need not wait for them
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	if err := hs.Shutdown(closeCtx); err != nil {
		return fail(err)
	}
	return ExitOK
}

// relayProcs gives the process one processor (GOMAXPROCS=1) while it serves stdio,
// unless the environment sets GOMAXPROCS, and only where the rule the host applies
// to its plugins (a quarter of its own processors, at least one) gives one as well:
// on fewer than 8, where plugins get one either way. It returns the function that
// gives the runtime back its default. toolhost mcp relays one client's calls to
// plugins and servers in other processes; each idle processor of its runtime spins
// looking for work on the CPUs those processes need. With stdin read through the
// poller (pollable), a tools/call to a plugin echo took 0.80-0.89 of the time it
// took before (median 0.85, 12 alternating runs on 2 CPUs; the poller alone, with
// two processors, 0.84-0.97). One processor with stdin in blocking mode was slower
// than two (1.14-1.27): the blocked read holds the one processor until the
// runtime's monitor takes it back.
func relayProcs() (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0)/4 > 1 {
		return func() {}
	}
	runtime.GOMAXPROCS(1)
	return func() { runtime.SetDefaultGOMAXPROCS() }
}

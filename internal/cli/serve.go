package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/server"
)

// serveOptions are the flags serve and dev share.
type serveOptions struct {
	socket    string
	tcp       string
	tokenFile string
	locations []string
	verbose   bool
	metrics   string
	debounce  time.Duration // dev only
}

const serveSynopsis = "[--location DIR]... [--socket PATH | --tcp 127.0.0.1:PORT [--token-file PATH]] [--metrics 127.0.0.1:PORT] [--verbose]"

func (a *app) serveFlags(name, synopsis, description string) (*flag.FlagSet, *serveOptions) {
	o := &serveOptions{}
	fs := a.newFlagSet(name, synopsis, description)
	fs.StringVar(&o.socket, "socket", "", "listen on the unix socket at `path` (default $XDG_RUNTIME_DIR/toolhost.sock,\nelse toolhost.sock in a private directory under the temporary directory)")
	fs.StringVar(&o.tcp, "tcp", "", "listen on TCP at `address` instead, loopback only (127.0.0.1:PORT, [::1]:PORT;\nport 0 picks one); every call must then carry the token")
	fs.StringVar(&o.tokenFile, "token-file", "", "with --tcp, write the token to `path` (mode 0600; default toolhost.token\nnext to the default socket)")
	fs.Func("location", "activate the Location at `DIR` at start (repeatable); runners activate more\nthrough the API", func(dir string) error {
		o.locations = append(o.locations, dir)
		return nil
	})
	fs.BoolVar(&o.verbose, "verbose", false, "show plugin and host logs (otherwise only warnings and errors)")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at http://`address`/metrics, loopback only\n(127.0.0.1:PORT, [::1]:PORT); see README's Observability")
	return fs, o
}

func (a *app) serveCommandFlags() (*flag.FlagSet, *serveOptions) {
	return a.serveFlags("serve", serveSynopsis,
		"serves the toolhost API (gRPC, see internal/servepb/serve.proto) to session runners:\n"+
			"activate Locations, prepare Requests, settle calls with streamed progress, cancel\n"+
			"them, answer permission asks.\n\n"+
			servingLineHelp+"\n"+
			"The unix socket is mode 0600 in a directory only its owner can write, and peers of\n"+
			"other users are refused. TCP is refused beyond loopback, and every TCP call must\n"+
			"carry \"authorization: Bearer <token>\" with the token (32 random bytes, hex) from\n"+
			"the token file, which holds the token alone (no newline). Requests belong to the\n"+
			"client handle (OpenClient) that prepared them.\n\n"+
			"SIGINT, SIGTERM or SIGHUP shuts it down within 10 s: calls in flight end as\n"+
			"interruptions, every Location is deactivated, no plugin process remains; a\n"+
			"second signal ends it at once. Output to a pipe whose reader has gone is\n"+
			"dropped; serving goes on.\n")
}

// servingLineHelp documents the machine-readable first line of serve and dev.
const servingLineHelp = "The first line on stdout is machine-readable, and always comes first: once the\n" +
	"--location Locations are active, \"serving on ADDRESS\" for a unix socket, or\n" +
	"\"serving on ADDRESS, token in FILE\" with --tcp. ADDRESS (unix:///PATH or\n" +
	"127.0.0.1:PORT) is what follows \"serving on \" up to \", token in \" or the end of\n" +
	"the line; FILE is an absolute path. Whatever else is printed (a line per\n" +
	"--location now) comes after it and may change.\n"

func (a *app) serve(ctx context.Context, args []string) int {
	fs, o := a.serveCommandFlags()
	return a.runServer(ctx, fs, o, args, nil)
}

// runServer parses the flags, listens, activates the --location Locations and serves
// until ctx ends. dev passes hook to watch every activated Location.
func (a *app) runServer(ctx context.Context, fs *flag.FlagSet, o *serveOptions, args []string,
	hook func(o *serveOptions, logger hclog.Logger, buildCache string) func(*location.Location) func()) int {
	name := strings.TrimPrefix(fs.Name(), "toolhost ")
	positional, code, ok := a.parse(fs, args)
	if !ok {
		return code
	}
	if len(positional) > 0 {
		return a.usageError(fs, "unexpected arguments %q", positional)
	}
	if o.tcp == "" && o.tokenFile != "" {
		return a.usageError(fs, "--token-file goes with --tcp")
	}
	if hook != nil && len(o.locations) == 0 {
		return a.usageError(fs, "missing --location DIR")
	}
	if o.tcp != "" && o.socket != "" {
		return a.usageError(fs, "--socket and --tcp exclude each other")
	}
	level := hclog.Warn
	if o.verbose {
		level = hclog.Debug
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "toolhost", Output: a.stderr, Level: level})
	fail := func(err error) int {
		a.errorf("toolhost %s: %v", name, err)
		return ExitFailure
	}

	// Listen first: a wrong address should fail before any plugin builds.
	var (
		lis       net.Listener
		token     string
		tokenFile string
		where     string
		err       error
	)
	if o.tcp != "" {
		if lis, err = server.ListenTCP(o.tcp, logger); err != nil {
			if errors.Is(err, server.ErrNotLoopback) {
				return a.usageError(fs, "%v", err)
			}
			return fail(err)
		}
		tokenFile = o.tokenFile
		if tokenFile == "" {
			tokenFile = server.DefaultTokenPath(os.Getenv)
		}
		if tokenFile, token, err = writeToken(tokenFile); err != nil {
			lis.Close()
			return fail(err)
		}
		defer removeToken(tokenFile, token)
		where = fmt.Sprintf("%s, token in %s", lis.Addr(), tokenFile)
	} else {
		path := o.socket
		if path == "" {
			path = server.DefaultSocketPath(os.Getenv)
		}
		if lis, err = server.ListenUnix(path, logger); err != nil {
			return fail(err)
		}
		where = "unix://" + lis.Addr().String()
	}

	tel, stopTelemetry, err := a.startTelemetry(ctx, o.metrics != "", logger)
	if err != nil {
		lis.Close()
		return fail(err)
	}
	defer func() {
		if err := stopTelemetry(); err != nil {
			for _, err := range joined(err) {
				a.errorf("toolhost %s: %v", name, err)
			}
		}
	}()
	if o.metrics != "" {
		addr, stop, err := serveMetrics(o.metrics, tel, logger)
		if err != nil {
			lis.Close()
			if errors.Is(err, server.ErrNotLoopback) {
				return a.usageError(fs, "%v", err)
			}
			return fail(err)
		}
		defer stop()
		o.metrics = addr.String()
	}
	reg, err := openObservedRegistry(tel)
	if err != nil {
		lis.Close()
		return fail(err)
	}
	locOpts := location.Options{Logger: logger, WatchConfig: true, ObservePermission: tel.ObservePermission()}
	var onActivate func(*location.Location) func()
	if hook != nil {
		cache, err := location.BuildCacheDir("", os.Environ())
		if err != nil {
			lis.Close()
			return fail(err)
		}
		locOpts.BuildCache = cache
		onActivate = hook(o, logger, cache)
	}
	onActivate = watchWith(tel, onActivate)

	root := scope.New(context.WithoutCancel(ctx))
	defer func() {
		closeCtx, cancel := a.closeContext(ctx)
		defer cancel()
		if err := root.Close(closeCtx); err != nil {
			a.errorf("toolhost %s: %v", name, err)
		}
	}()
	srv, err := server.New(root, server.Options{Registry: reg, Location: locOpts, Logger: logger, Token: token, OnActivate: onActivate})
	if err != nil {
		lis.Close()
		return fail(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	shutdown := func() error {
		closeCtx, cancel := a.closeContext(ctx)
		defer cancel()
		err := srv.Shutdown(closeCtx)
		return errors.Join(err, <-served)
	}

	var summaries []string
	for _, dir := range o.locations {
		loc, _, err := srv.Activate(ctx, dir)
		if err != nil {
			_ = shutdown()
			if ctx.Err() != nil {
				a.errorf("interrupted")
				return ExitInterrupted
			}
			return fail(err)
		}
		q, _ := loc.Prepare()
		n := 0
		if q != nil {
			n = len(q.Definitions())
		}
		summaries = append(summaries, fmt.Sprintf("location %s: %d tools, %d plugins\n", loc.ID(), n, len(loc.Plugins())))
	}
	fmt.Fprintf(a.stdout, "serving on %s\n", where)
	if o.metrics != "" {
		fmt.Fprintf(a.stdout, "metrics on http://%s/metrics\n", o.metrics)
	}
	for _, line := range summaries {
		io.WriteString(a.stdout, line)
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		served <- err // for shutdown's receive
	}
	if err := shutdown(); err != nil {
		return fail(err)
	}
	return ExitOK
}

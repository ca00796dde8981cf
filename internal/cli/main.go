package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// shutdownSignals interrupt Run: SIGINT, SIGTERM, and SIGHUP (the terminal or the
// session that ran the command has gone). SIGQUIT keeps Go's default, a goroutine
// dump and exit status 2, for debugging: the plugins die with the process (their
// parent-death signal), and serve's socket is left, which the next serve replaces.
var shutdownSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// Main runs the toolhost command with the process's arguments and standard streams
// and exits with its status. A shutdown signal (SIGINT, SIGTERM, SIGHUP) interrupts
// it; a second one kills it at once (its plugins die with it); and if Run has not
// returned closeTimeout+exitMargin after the first, Main exits with ExitInterrupted
// anyway, so that shutdown is bounded as a whole. A stdout or stderr whose reader has
// gone does not end it: writes to them fail (EPIPE) and are dropped, so serve keeps
// serving with nobody reading its logs, and mcp's stdio transport sees its client
// gone as a failed write. It is the whole main of cmd/toolhost and cmd/host, and
// never returns.
func Main() {
	// Notified, SIGPIPE no longer kills the process on a write to fd 1 or 2 (the Go
	// runtime's default); the channel is never read, so the signal is dropped.
	// Notify, unlike Ignore, is not inherited by the plugins the host starts.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, shutdownSignals...)
	ctx, interrupt := context.WithCancel(context.Background())
	go func() {
		sig := <-signals
		// The signals' default action, death, is back before the shutdown begins,
		// so that a second signal, whenever it comes, kills the process.
		signal.Reset(shutdownSignals...)
		interrupt()
		time.AfterFunc(closeTimeout+exitMargin, func() {
			fmt.Fprintf(os.Stderr, "toolhost: shutdown did not end within %v of %v; exiting\n", closeTimeout+exitMargin, sig)
			os.Exit(ExitInterrupted)
		})
	}()
	os.Exit(Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

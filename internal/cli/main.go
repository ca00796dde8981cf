package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Main runs the toolhost command with the process's arguments and standard streams
// and exits with its status; SIGINT and SIGTERM interrupt it, and a second signal
// kills it at once (its plugins die with it). It is the whole main of cmd/toolhost
// and cmd/host, and never returns.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	os.Exit(Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Command toolhost lists and calls the tools of a Location; see internal/cli. Build it
// as bin/toolhost: go build -o bin/toolhost ./cmd/host.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolhost/toolhost/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, the next one kills at once (plugins die with us).
	context.AfterFunc(ctx, stop)
	os.Exit(cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

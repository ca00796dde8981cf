package sdk

import (
	"context"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// LogLevelEnv, when set in a plugin's environment (its "env" in the Location
// config), is the lowest level its Logger writes: trace, debug, info (the default),
// warn or error.
const LogLevelEnv = "TOOLHOST_PLUGIN_LOG_LEVEL"

// Logger returns the logger for a plugin's activation and tools: an hclog logger
// named after the binary that writes JSON lines to standard error. The host reads
// them and writes each to its own log at its level, with its fields and the
// plugin's name (`toolhost call --verbose`, serve and dev show them; under
// `toolhost mcp` the client gets them as log messages). Use it rather than the log
// package or fmt.Fprintln(os.Stderr): the host keeps only the tail of plain lines on
// standard error (shown when the plugin fails), without a level.
//
// ctx may carry another logger (WithLogger), which Logger returns instead: a host
// that runs tools in its own process installs its own. Safe for concurrent use;
// every call without one returns the same logger.
func Logger(ctx context.Context) hclog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(hclog.Logger); ok {
		return l
	}
	return processLogger()
}

// WithLogger returns a context whose Logger is l.
func WithLogger(ctx context.Context, l hclog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

type loggerKey struct{}

// processLogger is the plugin process's logger, which Serve logs with too.
var processLogger = sync.OnceValue(func() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       filepath.Base(os.Args[0]),
		Output:     os.Stderr,
		JSONFormat: true,
		Level:      hclog.LevelFromString(os.Getenv(LogLevelEnv)),
	})
})

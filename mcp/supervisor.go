package mcp

import (
	"context"

	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/supervise"
)

// Supervisor owns the generations of one MCP server in one Location: it starts the
// first, restarts after crashes with backoff under Config.Budget, replaces the
// serving one on Reload or Restart (draining its calls), and stops the current one
// when its scope closes. While the server restarts its tools stay advertised
// (registry.Hold): a call waits for the next generation up to the start timeout plus
// the longest backoff. See package supervise for the rules it follows.
type Supervisor = supervise.Supervisor[Config, *Instance]

// Supervise starts the server's first generation in a child scope of parent and
// watches it (supervise.Start). A failed first start is returned as a *StartError.
func Supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target) (*Supervisor, error) {
	return supervise.Start(ctx, parent, program(target), cfg)
}

// Keep is Supervise for a Location that degrades rather than fails (supervise.Keep):
// a failed first start (a *StartError with the server's stderr) is kept as the last
// error and retried under the budget.
func Keep(ctx context.Context, parent *scope.Scope, cfg Config, target Target) (*Supervisor, error) {
	return supervise.Keep(ctx, parent, program(target), cfg)
}

// program starts generations of an MCP server into its target for its Supervisor
// (supervise.Program); the budget is the config's.
type program Target

func (p program) Start(ctx context.Context, parent *scope.Scope, cfg Config, gen uint64) (*Instance, error) {
	return Start(ctx, parent, cfg, Target(p), gen)
}

func (p program) Prepare(cfg Config) (Config, supervise.Settings) {
	cfg = cfg.withDefaults()
	return cfg, supervise.Settings{
		Kind: "mcp", Name: cfg.Name, Noun: "MCP server", Registry: p.Registry, Location: p.Location,
		StartTimeout: cfg.StartTimeout, StopGrace: cfg.StopGrace, Budget: cfg.Budget, Logger: cfg.Logger,
	}
}

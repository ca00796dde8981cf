package plugins

import (
	"context"

	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/supervise"
)

// Supervisor owns the generations of one plugin in one Location: it starts the
// first, restarts after crashes with backoff under a budget, replaces the serving
// one on Reload (draining its calls), and stops the current one when its scope
// closes. See package supervise for the rules it follows.
type Supervisor = supervise.Supervisor[Config, *Instance]

// Supervise starts the plugin's first generation in a child scope of parent and
// watches it (supervise.Start). A failed first start is returned as a *StartError.
func Supervise(ctx context.Context, parent *scope.Scope, cfg Config, target Target, budget supervise.Budget) (*Supervisor, error) {
	return supervise.Start(ctx, parent, program{target, budget}, cfg, target.hold())
}

// Keep is Supervise for a Location that degrades rather than fails (supervise.Keep):
// a failed first start (a *StartError with the plugin's stderr) is kept as the last
// error and retried under the budget.
func Keep(ctx context.Context, parent *scope.Scope, cfg Config, target Target, budget supervise.Budget) (*Supervisor, error) {
	return supervise.Keep(ctx, parent, program{target, budget}, cfg, target.hold())
}

// program starts generations of a plugin for its Supervisor.
type program struct {
	target Target
	budget supervise.Budget
}

func (p program) Prepare(cfg Config) (Config, supervise.Settings) {
	cfg = cfg.withDefaults()
	return cfg, supervise.Settings{Kind: "plugin", Name: cfg.Name, Noun: "plugin",
		StartTimeout: cfg.StartTimeout, StopGrace: cfg.StopGrace, Budget: p.budget, Logger: cfg.Logger}
}

func (p program) Start(ctx context.Context, parent *scope.Scope, cfg Config, gen uint64) (*Instance, error) {
	return Start(ctx, parent, cfg, p.target, gen)
}

func (t Target) hold() supervise.Target {
	return supervise.Target{Registry: t.Registry, Location: t.Location}
}

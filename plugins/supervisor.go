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
	return supervise.Start(ctx, parent, program{target, budget}, cfg)
}

// Keep is Supervise for a Location that degrades rather than fails (supervise.Keep):
// a failed first start (a *StartError with the plugin's stderr) is kept as the last
// error and retried under the budget.
func Keep(ctx context.Context, parent *scope.Scope, cfg Config, target Target, budget supervise.Budget) (*Supervisor, error) {
	return supervise.Keep(ctx, parent, program{target, budget}, cfg)
}

// program starts generations of a plugin for its Supervisor (supervise.Program).
type program struct {
	Target
	budget supervise.Budget
}

func (p program) Prepare(cfg Config) (Config, supervise.Settings) {
	cfg = cfg.withDefaults()
	set := supervise.Settings{Kind: "plugin", Noun: "plugin", Budget: p.budget, Registry: p.Registry, Location: p.Location}
	set.Name, set.StartTimeout, set.StopGrace, set.Logger = cfg.Name, cfg.StartTimeout, cfg.StopGrace, cfg.Logger
	return cfg, set
}

func (p program) Start(ctx context.Context, parent *scope.Scope, cfg Config, gen uint64) (*Instance, error) {
	return Start(ctx, parent, cfg, p.Target, gen)
}

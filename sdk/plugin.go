package sdk

import (
	"context"
	"encoding/json"
)

// Plugin is what a plugin binary serves with [Serve]. The host starts one process per
// Location activation, and Activate runs once in it.
type Plugin interface {
	// Activate receives the Location and the Tools capability, and registers the
	// plugin's tools. It should return promptly; the host bounds it by the start
	// timeout. tools stays usable after Activate returns, for registrations made at
	// run time, until the host closes the plugin's scope (the process then exits).
	//
	// A host that launches the plugin usually has it activate as it starts, before
	// it serves, which saves the launch a round trip: then what Activate writes to
	// os.Stdout goes to standard error. A plugin given the Location's services, which
	// need the connection, is activated once it serves.
	Activate(ctx context.Context, loc Location, tools Tools) error
}

// ActivateFunc adapts a function to [Plugin].
type ActivateFunc func(ctx context.Context, loc Location, tools Tools) error

// Activate calls f.
func (f ActivateFunc) Activate(ctx context.Context, loc Location, tools Tools) error {
	return f(ctx, loc, tools)
}

var _ Plugin = ActivateFunc(nil)

// Location describes the workspace a plugin is activated for.
type Location struct {
	// Directory is the Location's canonical absolute directory.
	Directory string
	// WorkspaceID is the optional workspace id from the Location config.
	WorkspaceID string
	// Options is the plugin's "options" object from the Location config (JSON), or nil.
	Options json.RawMessage
	// Services are the Location's FileSystem and Permission services, for plugins the
	// Location config marks trusted; nil for untrusted plugins.
	Services *Services
}

// Tools is the narrow capability a plugin receives: it can register tools into its
// own scope and close its own registrations, nothing else.
type Tools interface {
	// Register adds a batch of tools, keyed by authored name, atomically: on error
	// nothing was registered and the error names the offending tool. During
	// Activate, the batches go to the host with the activation's answer (one round
	// trip for the whole activation), so Register only checks the batch locally and
	// a batch the host refuses fails the activation, naming the tool. Later calls
	// reach the host at once.
	Register(ctx context.Context, tools map[string]Tool) (Registration, error)
}

// Registration is one registered batch.
type Registration interface {
	// Close removes the batch's tools; earlier registrations of the same names
	// reappear. It is idempotent.
	Close(ctx context.Context) error
}

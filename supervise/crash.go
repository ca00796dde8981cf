package supervise

import (
	"fmt"

	"github.com/toolhost/toolhost/internal/stderrtail"
)

// CrashError reports a supervised program that ended on its own: a plugin or an MCP
// server whose process exited, or whose session ended, while the host still used
// it. A Program's Generation returns it from Crash; the in-flight calls of that
// generation fail with it (as operational errors), and the Supervisor restarts the
// program within its Budget. Find it with errors.As.
type CrashError struct {
	// Kind names what the program is, for people: "plugin", "MCP server".
	Kind string
	// Name is the program's source name.
	Name string
	// Generation is the generation that ended.
	Generation uint64
	// Status says how it ended ("exit status 2", "signal: killed", "session closed").
	Status string
	// Stderr is the tail of what the program wrote to standard error, if known.
	Stderr string
}

func (e *CrashError) Error() string {
	msg := fmt.Sprintf("%s %q (generation %d) ended unexpectedly: %s; the host restarts it within its crash budget (toolhost status shows its state)",
		e.Kind, e.Name, e.Generation, e.Status)
	return stderrtail.Quote(msg, e.Kind, e.Stderr)
}

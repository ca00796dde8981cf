package mcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/loglimit"
	"github.com/toolhost/toolhost/internal/stderrtail"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// DefaultMaxMessageBytes is the default cap on one message from a server.
const DefaultMaxMessageBytes = 64 << 20

// DefaultMaxHeldBytes is what a server may make the host hold besides one message
// of the largest size (Config.MaxHeldBytes).
const DefaultMaxHeldBytes = 64 << 20

// Config describes one MCP server of one Location.
type Config struct {
	// Name is the server's name in the Location config. It prefixes its tools' names
	// ("<server>_<tool>") and names the source of its registrations.
	Name string
	// Remote holds how to reach a remote server (see remote.go); when its URL is
	// set, Command, Args, Env, Dir and StopGrace's process part do not apply.
	Remote
	// Command is the program: an absolute path, or a bare name looked up on the PATH
	// that Env gives (never the host's PATH).
	Command string
	// Args are the program's arguments.
	Args []string
	// Env is the server's whole environment: the host's is never inherited. To run a
	// bare command such as "node", it must set PATH.
	Env map[string]string
	// Dir is the working directory; "" means the host's current directory.
	Dir string
	// Sandbox confines the server (Sandbox.Confine) and caps its resources. The
	// server's process tree is always contained (Contain is forced on): it ends with
	// the server, even when the host is SIGKILLed. Name defaults to the server's.
	Sandbox sandbox.Spec
	// Timeout bounds each tool call. A call that runs out of it is cancelled on the
	// server and settles as a tool failure saying it timed out. Default
	// DefaultCallTimeout: a server that never answers holds no call for longer.
	Timeout time.Duration
	// StartTimeout bounds launching, the MCP initialization and the first tool
	// listing; it also bounds each later re-listing. Default 30s.
	StartTimeout time.Duration
	// StopGrace is how long a stopping server gets to exit after its stdin is closed
	// (half of it) and after SIGTERM (the other half) before its process group is
	// killed. Default 2s.
	StopGrace time.Duration
	// MaxMessageBytes caps one message from the server. A larger message is read to
	// its end and discarded; a call whose response it was fails with a
	// *MessageTooLargeError. Default DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxHeldBytes bounds the bytes of the server's messages the host holds at
	// once: responses until their request is answered, requests of the server's
	// until the host answers them, notifications while they are handled (see
	// gate). A message past it is refused with a *BudgetError. Default
	// MaxMessageBytes plus DefaultMaxHeldBytes.
	MaxHeldBytes int64
	// Asks bounds the server's elicitation/create and sampling/createMessage
	// requests: how many wait for the person at once, and how often they come
	// (asks.go). Zero fields mean the defaults.
	Asks AskLimits
	// Budget limits restarts after crashes.
	Budget supervise.Budget
	// Authorize, if set, is called before each call is forwarded to the server, with
	// the tool's registered name; a non-nil error is returned as the call's result,
	// unchanged, and the server is not called. MCP servers are untrusted: the host
	// asserts permission here.
	Authorize func(ctx context.Context, tool string, inv sdk.Invocation) error
	// Overrides are the registered names ("<server>_<tool>") the server may take over
	// from another source of its Location (registry.Batch.Overrides).
	Overrides []string
	// Limits bound what each generation of the server holds (registry.Batch.Limits);
	// a tool past them is skipped with a warning.
	Limits registry.SourceLimits
	// Logger receives the session's logs and the server's stderr (at debug level).
	// Default: discard.
	Logger hclog.Logger

	// notReadingGrace, when set (by tests: export_test.go), replaces the constant
	// of that name.
	notReadingGrace time.Duration
}

// DefaultCallTimeout is a tool call's time limit when Config.Timeout is unset, as
// a plugin's (plugins.Config.CallTimeout).
const DefaultCallTimeout = 10 * time.Minute

func (c Config) withDefaults() Config {
	if c.notReadingGrace <= 0 {
		c.notReadingGrace = notReadingGrace
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultCallTimeout
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 2 * time.Second
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxHeldBytes <= 0 {
		c.MaxHeldBytes = int64(c.MaxMessageBytes) + DefaultMaxHeldBytes
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Asks = c.Asks.withDefaults()
	c.Budget = c.Budget.WithDefaults()
	return c
}

// Target is where a server's tools go.
type Target struct {
	Registry *registry.Registry
	// Location is the registry placement (the Location id).
	Location string
}

// StartError reports a server that could not be started, initialized or listed.
// Stderr holds the tail of what the server wrote to stderr, which usually says why.
// URL is a remote server's URL, with userinfo and query values redacted.
type StartError struct {
	Server string
	URL    string
	Err    error
	Stderr string
}

func (e *StartError) Error() string {
	msg := fmt.Sprintf("mcp: start server %q: %s", e.Server, serverText(e.Err))
	if e.URL != "" {
		msg = fmt.Sprintf("mcp: start server %q at %s: %s", e.Server, e.URL, serverText(e.Err))
	}
	return stderrtail.Quote(msg, "server", e.Stderr)
}

func (e *StartError) Unwrap() error { return e.Err }

// MessageTooLargeError reports a message from a server over Config.MaxMessageBytes.
// The message was read to its end and discarded; the session goes on. A call whose
// response it was fails with this error (an operational error, never a tool result).
type MessageTooLargeError struct {
	Server string
	// Size is the message's size in bytes (of a remote server's JSON reply, what
	// the host read of it: it reads no further); Limit is the cap in force.
	Size, Limit int64
}

func (e *MessageTooLargeError) Error() string {
	return fmt.Sprintf("mcp: server %q sent a message of %d bytes, over the %d-byte message cap; it was discarded (raise the cap to accept it)", e.Server, e.Size, e.Limit)
}

// BudgetError reports a message from a server that would have made the host hold
// more of the server's messages at once than Config.MaxHeldBytes. The message was
// refused: a response fails its request with this error (an operational error,
// never a tool result); a request of the server's is answered with it; a
// notification is dropped. The session goes on.
type BudgetError struct {
	Server string
	// What says what was refused ("the response to a request").
	What string
	// Size is the message's size; Held what the host held of the server's messages
	// already; Limit the budget.
	Size, Held, Limit int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("mcp: server %q: %s of %d bytes would make the host hold %d bytes the server sent, over its limit max_held_bytes of %d; the host refused it (raise max_held_bytes if its messages are this large)",
		e.Server, e.What, e.Size, e.Held+e.Size, e.Limit)
}

// NotReadingError reports a stdio server that does not read what the host writes:
// Queued answers of the host's to its requests waited to be written, and none was
// for Waited. The host closed the connection: the calls in flight fail with it
// (inside a *ConnectionError), and the server ends as a crash, restarted under its
// Budget.
type NotReadingError struct {
	Server string
	Queued int
	Waited time.Duration
}

func (e *NotReadingError) Error() string {
	return fmt.Sprintf("mcp: server %q does not read what the host writes: %d answers to its requests waited %s to be written, so the host closed the connection (a server must read its stdin while it sends requests)", e.Server, e.Queued, e.Waited)
}

// StdinStalledError reports a server that stopped reading its stdin part way
// through a message of the host's: the call that wrote it ended, the host went
// on writing the rest for Waited, and the server read none of it, so the host
// closed the connection (nothing could follow half a message).
type StdinStalledError struct {
	Server        string
	Written, Size int // bytes of the message written, of its whole
	Waited        time.Duration
}

func (e *StdinStalledError) Error() string {
	return fmt.Sprintf("mcp: server %q stopped reading its stdin: %d of a message's %d bytes were written and it read no more for %s, so the host closed the connection (a server must keep reading its stdin)", e.Server, e.Written, e.Size, e.Waited)
}

// ConnectionError reports a call that could not complete because the session with
// the server ended (the server exited or closed its stdout).
type ConnectionError struct {
	Server string
	Tool   string
	Err    error
}

func (e *ConnectionError) Error() string {
	return fmt.Sprintf("mcp: server %q: call %q: connection lost: %v", e.Server, e.Tool, e.Err)
}

func (e *ConnectionError) Unwrap() error { return e.Err }

// CallError reports a JSON-RPC error (or another protocol failure) the server
// answered a call with. It is an operational error: a tool's own failures come as
// isError results. Its text is cut to loglimit.MaxText bytes (the server writes
// it), and an Err whose text is longer is replaced by one of the cut text.
type CallError struct {
	Server string
	Tool   string
	Err    error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("mcp: server %q: call %q: %s", e.Server, e.Tool, serverText(e.Err))
}

// serverText is err's text cut to loglimit.MaxText bytes: a server writes it (a
// JSON-RPC error's message, up to the message cap), and it goes to logs, runners
// and terminals.
func serverText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return loglimit.Cut(err.Error())
}

// shortened returns err, or, when its text is longer than loglimit.MaxText, an
// error of its cut text, so that what the server wrote is not held on.
func shortened(err error) error {
	if err == nil || len(err.Error()) <= loglimit.MaxText {
		return err
	}
	return errors.New(serverText(err))
}

func (e *CallError) Unwrap() error { return e.Err }

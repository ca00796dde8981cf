package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/termtext"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

type callOptions struct {
	remoteOptions
	location string
	json     bool
	verbose  bool
	session  string
	agent    string
	message  string
	callID   string
}

func (a *app) callFlags() (*flag.FlagSet, *callOptions) {
	o := &callOptions{}
	fs := a.newFlagSet("call", "(--location DIR | --socket ADDRESS [--location DIR]) [flags] NAME [JSON|-]",
		"activates the Location at DIR, settles one call of the tool NAME with the JSON\n"+
			"input (\"-\" reads it from stdin; absent means {}), prints the settlement and\n"+
			"deactivates the Location. Progress goes to stderr as \"progress: DONE/TOTAL MESSAGE\".\n"+
			"Flags may also follow NAME and JSON.\n\n"+
			"With --socket the call is settled by a running toolhost serve or dev instead (so\n"+
			"it sees what that server serves, hot reloads included), and the Location stays\n"+
			"active there.\n\n"+
			"A permission ask is put to the person at the terminal when stdin is one;\n"+
			"otherwise it is denied (a model-visible tool failure, exit status 1; how to\n"+
			"allow it goes to stderr).\n\n"+
			"--json prints the settlement: {\"name\", \"tool_call_id\", \"outcome\", \"content\":\n"+
			"[{\"type\", \"text\", \"mime_type\", \"data\" (base64)}], \"structured\", \"problems\":\n"+
			"[{\"pointer\", \"message\"}], \"managed_paths\"}; empty fields are omitted. outcome is\n"+
			"completed, tool_failure, unknown, invalid_input, invalid_output or unavailable.\n")
	fs.StringVar(&o.location, "location", "", "the Location `directory` (required without --socket)")
	fs.StringVar(&o.socket, "socket", "", remoteFlagHelp)
	fs.StringVar(&o.tokenFile, "token-file", "", "with --socket 127.0.0.1:PORT, the `file` holding serve's token")
	fs.BoolVar(&o.json, "json", false, "print the settlement as JSON")
	fs.BoolVar(&o.verbose, "verbose", false, "show plugin and host logs (otherwise only warnings and errors)")
	fs.StringVar(&o.session, "session", "", "the session `id` (default: generated)")
	fs.StringVar(&o.agent, "agent", "", "the agent `name` (default: toolhost)")
	fs.StringVar(&o.message, "message", "", "the assistant message `id` (default: generated)")
	fs.StringVar(&o.callID, "call-id", "", "the tool call `id` (default: generated)")
	return fs, o
}

func (a *app) call(ctx context.Context, args []string) int {
	fs, o := a.callFlags()
	positional, code, ok := a.parse(fs, args)
	if !ok {
		return code
	}
	switch {
	case o.location == "" && o.socket == "":
		return a.usageError(fs, "missing --location DIR (or --socket ADDRESS)")
	case o.tokenFile != "" && o.socket == "":
		return a.usageError(fs, "--token-file goes with --socket")
	case len(positional) == 0:
		return a.usageError(fs, "missing the tool NAME")
	case len(positional) > 2:
		return a.usageError(fs, "unexpected arguments %q after the input", positional[2:])
	}
	name := positional[0]
	var input []byte
	switch {
	case len(positional) == 1:
		input = []byte("{}")
	case positional[1] == "-":
		data, err := io.ReadAll(a.stdin)
		if err != nil {
			a.errorf("toolhost call: read input from stdin: %v", err)
			return ExitFailure
		}
		input = data
	default:
		input = []byte(positional[1])
	}
	inv := sdk.Invocation{
		SessionID:          orGenerated(o.session, "session_"),
		Agent:              o.agent,
		AssistantMessageID: orGenerated(o.message, "msg_"),
		ToolCallID:         orGenerated(o.callID, "call_"),
	}
	if inv.Agent == "" {
		inv.Agent = "toolhost"
	}

	if o.socket != "" {
		return a.withRemote(ctx, "call", &o.remoteOptions, o.location, func(c *client.Client, loc client.Location) int {
			// A person calls by name: a tool the rules deny is called too, so that
			// the denial, and how to allow it, is what they see.
			req, err := c.PrepareRequest(ctx, loc.ID, "", client.AllTools())
			if err != nil {
				return a.remoteError(ctx, "call", o.socket, err)
			}
			defer c.ReleaseRequest(context.WithoutCancel(ctx), req.ID)
			stop, err := a.forwardAsks(ctx, c, loc.ID)
			if err != nil {
				return a.remoteError(ctx, "call", o.socket, err)
			}
			defer stop()
			settlement, err := c.Settle(ctx, req.ID, client.Call{Name: name, Input: input, Invocation: inv}, a.printProgress)
			return a.settled(o, name, settlement, err)
		})
	}
	return a.withLocation(ctx, "call", o.location, o.verbose, func(s *session) int {
		q, err := s.loc.Prepare(registry.OfferAll()) // as above
		if err != nil {
			a.errorf("toolhost call: %v", err)
			return ExitFailure
		}
		settlement, err := q.Settle(ctx, registry.Call{
			Name:       name,
			Input:      input,
			Invocation: inv,
			Progress:   a.printProgress,
		})
		return a.settled(o, name, settlement, err)
	})
}

// settled prints a call's result and returns the exit code.
func (a *app) settled(o *callOptions, name string, settlement *registry.Settlement, err error) int {
	switch {
	case errors.Is(err, context.Canceled):
		a.errorf("interrupted")
		return ExitInterrupted
	case err != nil:
		a.errorf("toolhost call: %s: %v", name, err)
		return ExitFailure
	}
	if settlement.Hint != "" {
		// For the person, not the model: stderr, outside the settlement.
		a.errorf("toolhost call: %s", settlement.Hint)
	}
	if o.json {
		if code := a.printJSON("call", settlement); code != ExitOK {
			return code
		}
	} else {
		a.printSettlement(settlement)
	}
	if settlement.IsError() {
		return ExitToolError
	}
	return ExitOK
}

func orGenerated(id, prefix string) string {
	if id != "" {
		return id
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return prefix + hex.EncodeToString(b[:])
}

// printProgress writes one progress event as "progress: 3/10 message".
func (a *app) printProgress(p sdk.Progress) {
	var b strings.Builder
	b.WriteString("progress: ")
	b.WriteString(strconv.FormatFloat(p.Progress, 'f', -1, 64))
	if p.Total > 0 {
		b.WriteByte('/')
		b.WriteString(strconv.FormatFloat(p.Total, 'f', -1, 64))
	}
	if p.Message != "" {
		b.WriteByte(' ')
		b.WriteString(p.Message)
	}
	b.WriteByte('\n')
	io.WriteString(a.stderr, b.String())
}

// printSettlement writes the human form: the content (an error prefixed with its
// outcome) — or, when there is none, the structured output indented — then the
// managed paths, inert on a terminal (termtext). --json shows both, exactly.
func (a *app) printSettlement(s *registry.Settlement) {
	var b bytes.Buffer
	if s.IsError() {
		fmt.Fprintf(&b, "%s: ", s.Outcome)
	}
	for _, p := range s.Content {
		switch p.Type {
		case sdk.PartText:
			b.WriteString(p.Text)
		case sdk.PartMedia:
			fmt.Fprintf(&b, "[media %s, %d bytes]", p.MIMEType, len(p.Data))
		default:
			fmt.Fprintf(&b, "[%s part]", p.Type)
		}
		if b.Len() > 0 && b.Bytes()[b.Len()-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	if len(s.Content) == 0 && len(s.Structured) > 0 {
		if err := json.Indent(&b, s.Structured, "", "  "); err != nil {
			b.Write(s.Structured)
		}
		b.WriteByte('\n')
	}
	for _, p := range s.ManagedPaths {
		fmt.Fprintf(&b, "full output: %s\n", p)
	}
	io.WriteString(a.stdout, termtext.Inert(b.String())) // --json prints it exactly
}

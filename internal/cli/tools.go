package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/termtext"
	"github.com/toolhost/toolhost/provider"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/supervise"
)

type toolsOptions struct {
	remoteOptions
	location string
	json     bool
	verbose  bool
	provider string
	all      bool
}

func (a *app) toolsFlags() (*flag.FlagSet, *toolsOptions) {
	o := &toolsOptions{}
	fs := a.newFlagSet("tools", "(--location DIR | --socket ADDRESS [--location DIR]) [--all] [--json] [--provider NAME] [--verbose]",
		"activates the Location at DIR, lists the definitions of its tools sorted by name,\n"+
			"and deactivates it. It lists what a model is offered: a tool the Location's\n"+
			"permission rules deny outright (for every resource) is left out; --all lists\n"+
			"every tool. Sources that do not serve (a plugin or MCP server that\n"+
			"failed to start and is retried, a manifest tool whose command cannot run) are\n"+
			"listed after the tools, with why, and the exit status is then 4.\n"+
			"With --socket it lists what a running toolhost serve or dev serves instead, and\n"+
			"the Location stays active there.\n\n"+
			"--json prints {\"location\": ID, \"tools\": [{\"name\", \"description\",\n"+
			"\"input_schema\", \"output_schema\"}...]}: the definitions exactly as advertised.\n\n"+
			"--provider openai|anthropic|gemini checks every definition against that\n"+
			"provider's limits (and, for gemini, prints the adapted input schemas); each\n"+
			"incompatible tool is named with its problems (--json: \"problems\": {NAME:\n"+
			"[{\"pointer\", \"message\"}]}) and the exit status is 1.\n")
	fs.StringVar(&o.location, "location", "", "the Location `directory` (required without --socket)")
	fs.StringVar(&o.socket, "socket", "", remoteFlagHelp)
	fs.StringVar(&o.tokenFile, "token-file", "", "with --socket 127.0.0.1:PORT, the `file` holding serve's token")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&o.all, "all", false, "list every tool, those the permission rules deny outright included")
	fs.BoolVar(&o.verbose, "verbose", false, "show plugin and host logs (otherwise only warnings and errors)")
	fs.StringVar(&o.provider, "provider", "", "check the definitions for a provider `profile`: openai, anthropic or gemini")
	return fs, o
}

func (a *app) tools(ctx context.Context, args []string) int {
	fs, o := a.toolsFlags()
	positional, code, ok := a.parse(fs, args)
	if !ok {
		return code
	}
	if len(positional) > 0 {
		return a.usageError(fs, "unexpected arguments %q", positional)
	}
	if o.location == "" && o.socket == "" {
		return a.usageError(fs, "missing --location DIR (or --socket ADDRESS)")
	}
	if o.tokenFile != "" && o.socket == "" {
		return a.usageError(fs, "--token-file goes with --socket")
	}
	profile, err := provider.Parse(o.provider)
	if err != nil {
		return a.usageError(fs, "%v", err)
	}
	if o.socket != "" {
		return a.withRemote(ctx, "tools", &o.remoteOptions, o.location, func(c *client.Client, loc client.Location) int {
			var opts []client.PrepareOption
			if o.all {
				opts = append(opts, client.AllTools())
			}
			req, err := c.PrepareRequest(ctx, loc.ID, o.provider, opts...)
			if err != nil {
				return a.remoteError(ctx, "tools", o.socket, err)
			}
			_ = c.ReleaseRequest(ctx, req.ID)
			var problems map[string][]provider.Problem
			for _, p := range req.Problems {
				if problems == nil {
					problems = map[string][]provider.Problem{}
				}
				problems[p.Tool] = append(problems[p.Tool], provider.Problem{Pointer: p.Pointer, Message: p.Message})
			}
			srcs, err := c.ListSources(ctx, loc.ID)
			if err != nil {
				return a.remoteError(ctx, "tools", o.socket, err)
			}
			var notServing []sourceJSON
			for _, s := range srcs {
				if s.State != "running" {
					notServing = append(notServing, sourceJSON{ID: s.ID, State: s.State, Error: s.Error})
				}
			}
			return a.listTools(o, profile, loc.ID, req.Definitions, problems, notServing)
		})
	}
	return a.withLocation(ctx, "tools", o.location, o.verbose, func(s *session) int {
		var opts []registry.PrepareOption
		if o.all {
			opts = append(opts, registry.OfferAll())
		}
		q, err := s.loc.Prepare(opts...)
		if err != nil {
			a.errorf("toolhost tools: %v", err)
			return ExitFailure
		}
		defs, problems := checkProvider(profile, q.Definitions())
		var notServing []sourceJSON
		for _, st := range s.loc.Sources() {
			if st.State != supervise.Running {
				j := sourceJSON{ID: st.ID, State: string(st.State)}
				if st.Err != nil {
					j.Error = st.Err.Error()
				}
				notServing = append(notServing, j)
			}
		}
		return a.listTools(o, profile, s.loc.ID(), defs, problems, notServing)
	})
}

// sourceJSON is a source that does not serve, as tools reports it.
type sourceJSON struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// listTools prints the definitions (a table, or JSON) and the sources that do not
// serve, and returns the exit code: ExitToolError for provider problems, else
// ExitPartial when some source does not serve.
func (a *app) listTools(o *toolsOptions, profile provider.Profile, loc string, defs []registry.Definition, problems map[string][]provider.Problem, notServing []sourceJSON) int {
	code := ExitOK
	switch {
	case len(problems) > 0:
		code = ExitToolError
	case len(notServing) > 0:
		code = ExitPartial
	}
	if o.json {
		if c := a.printJSON("tools", toolsJSON{Location: loc, Tools: defs, Problems: problems, NotServing: notServing}); c != ExitOK {
			return c
		}
		return code
	}
	a.printToolTable(defs, nil)
	for _, d := range defs {
		for _, p := range problems[d.Name] {
			fmt.Fprintf(a.stdout, "%s: not compatible with %s: %s\n", d.Name, profile, termtext.Inert(p.String()))
		}
	}
	for _, s := range notServing {
		if s.Error != "" {
			fmt.Fprintf(a.stdout, "%s: %s: %s\n", termtext.Line(s.ID), termtext.Line(s.State), indentLines(termtext.Inert(s.Error)))
		} else {
			fmt.Fprintf(a.stdout, "%s: %s\n", termtext.Line(s.ID), termtext.Line(s.State))
		}
	}
	return code
}

// checkProvider checks defs against a provider profile: it returns the definitions
// with their input schemas as that provider is sent them, and the problems by name.
func checkProvider(p provider.Profile, defs []registry.Definition) ([]registry.Definition, map[string][]provider.Problem) {
	if p == provider.None {
		return defs, nil
	}
	out := make([]registry.Definition, len(defs))
	problems := map[string][]provider.Problem{}
	for i, d := range defs {
		schema, ps := provider.Check(p, provider.Tool{Name: d.Name, Description: d.Description, InputSchema: d.InputSchema})
		d.InputSchema = schema
		out[i] = d
		if len(ps) > 0 {
			problems[d.Name] = ps
		}
	}
	return out, problems
}

// toolsJSON is the --json output of tools.
type toolsJSON struct {
	Location string                        `json:"location"`
	Tools    []registry.Definition         `json:"tools"`
	Problems map[string][]provider.Problem `json:"problems,omitempty"`
	// NotServing are the sources that do not serve (exit status 4).
	NotServing []sourceJSON `json:"not_serving,omitempty"`
}

func (a *app) printToolTable(defs []registry.Definition, notRunning []string) {
	if len(defs) == 0 {
		fmt.Fprintln(a.stdout, "no tools")
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDESCRIPTION")
		for _, d := range defs {
			first, _, _ := strings.Cut(strings.TrimSpace(d.Description), "\n")
			fmt.Fprintf(tw, "%s\t%s\n", termtext.Line(d.Name), termtext.Line(strings.TrimSpace(first)))
		}
		tw.Flush()
	}
	for _, line := range notRunning {
		fmt.Fprintln(a.stdout, line)
	}
}

// printJSON writes v as indented JSON, HTML characters unescaped.
func (a *app) printJSON(cmd string, v any) int {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		a.errorf("toolhost %s: write JSON: %v", cmd, err)
		return ExitFailure
	}
	return ExitOK
}

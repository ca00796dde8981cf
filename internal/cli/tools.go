package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
)

type toolsOptions struct {
	location string
	json     bool
	verbose  bool
}

func (a *app) toolsFlags() (*flag.FlagSet, *toolsOptions) {
	o := &toolsOptions{}
	fs := a.newFlagSet("tools", "--location DIR [--json] [--verbose]",
		"activates the Location at DIR, lists the definitions of its tools sorted by name,\n"+
			"and deactivates it. Plugins that are not running are listed after the tools.\n\n"+
			"--json prints {\"location\": ID, \"tools\": [{\"name\", \"description\",\n"+
			"\"input_schema\", \"output_schema\"}...]}: the definitions exactly as advertised.\n")
	fs.StringVar(&o.location, "location", "", "the Location `directory` (required)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&o.verbose, "verbose", false, "show plugin and host logs (otherwise only warnings and errors)")
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
	if o.location == "" {
		return a.usageError(fs, "missing --location DIR")
	}
	return a.withLocation(ctx, "tools", o.location, o.verbose, func(s *session) int {
		q, err := s.loc.Prepare()
		if err != nil {
			a.errorf("toolhost tools: %v", err)
			return ExitFailure
		}
		if o.json {
			return a.printJSON("tools", toolsJSON{Location: s.loc.ID(), Tools: q.Definitions()})
		}
		a.printToolTable(q.Definitions(), s.loc.Plugins())
		return ExitOK
	})
}

// toolsJSON is the --json output of tools.
type toolsJSON struct {
	Location string                `json:"location"`
	Tools    []registry.Definition `json:"tools"`
}

func (a *app) printToolTable(defs []registry.Definition, sups []*plugins.Supervisor) {
	if len(defs) == 0 {
		fmt.Fprintln(a.stdout, "no tools")
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tDESCRIPTION")
		for _, d := range defs {
			first, _, _ := strings.Cut(strings.TrimSpace(d.Description), "\n")
			fmt.Fprintf(tw, "%s\t%s\n", d.Name, strings.TrimSpace(first))
		}
		tw.Flush()
	}
	for _, sup := range sups {
		if st, err := sup.State(); st != plugins.Running {
			if err != nil {
				fmt.Fprintf(a.stdout, "plugin %s: %s: %v\n", sup.Name(), st, err)
			} else {
				fmt.Fprintf(a.stdout, "plugin %s: %s\n", sup.Name(), st)
			}
		}
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

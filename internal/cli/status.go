package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/termtext"
)

type statusOptions struct {
	remoteOptions
	location string
	json     bool
}

func (a *app) statusFlags() (*flag.FlagSet, *statusOptions) {
	o := &statusOptions{}
	fs := a.newFlagSet("status", "--socket ADDRESS [--location DIR] [--json]",
		"prints the health of every source (built-ins, plugins, MCP servers, manifest\n"+
			"tools) of the Locations active on a running toolhost serve or dev, or of the\n"+
			"one at DIR (which must be active there): state, generation, pid, containment,\n"+
			"restarts, the layers that hold its process, last error and the tail of its\n"+
			"stderr.\n\n"+
			"Exit status 0 when every source runs, 4 when some do not.\n")
	fs.StringVar(&o.socket, "socket", "", "the running toolhost serve or dev's `address` (unix socket path, or 127.0.0.1:PORT with --token-file)")
	fs.StringVar(&o.tokenFile, "token-file", "", "with --socket 127.0.0.1:PORT, the `file` holding serve's token")
	fs.StringVar(&o.location, "location", "", "only the Location at `directory`")
	fs.BoolVar(&o.json, "json", false, "print JSON: [{\"location\": ID, \"sources\": [...]}]")
	return fs, o
}

func (a *app) status(ctx context.Context, args []string) int {
	fs, o := a.statusFlags()
	positional, code, ok := a.parse(fs, args)
	if !ok {
		return code
	}
	if len(positional) > 0 {
		return a.usageError(fs, "unexpected arguments %q", positional)
	}
	if o.socket == "" {
		return a.usageError(fs, "missing --socket ADDRESS")
	}
	return a.dialRemote(ctx, "status", &o.remoteOptions, func(c *client.Client) int {
		locs, err := c.ListLocations(ctx)
		if err != nil {
			return a.remoteError(ctx, "status", o.socket, err)
		}
		var want string
		if o.location != "" {
			if want, err = filepath.Abs(o.location); err != nil {
				a.errorf("toolhost status: %v", err)
				return ExitFailure
			}
		}
		type locSources struct {
			Location string          `json:"location"`
			Sources  []client.Source `json:"sources"`
		}
		var out []locSources
		for _, l := range locs {
			if want != "" && l.ID != want && l.ID != canonical(want) {
				continue
			}
			srcs, err := c.ListSources(ctx, l.ID)
			if err != nil {
				return a.remoteError(ctx, "status", o.socket, err)
			}
			out = append(out, locSources{l.ID, srcs})
		}
		if want != "" && len(out) == 0 {
			a.errorf("toolhost status: the Location at %s is not active on %s", want, o.socket)
			return ExitFailure
		}
		code := ExitOK
		for _, l := range out {
			for _, s := range l.Sources {
				if s.State != "running" {
					code = ExitPartial
				}
			}
		}
		if o.json {
			if c := a.printJSON("status", out); c != ExitOK {
				return c
			}
			return code
		}
		if len(out) == 0 {
			fmt.Fprintln(a.stdout, "no active Locations")
		}
		for i, l := range out {
			if i > 0 {
				fmt.Fprintln(a.stdout)
			}
			fmt.Fprintf(a.stdout, "%s\n", termtext.Line(l.Location))
			a.printSources(l.Sources, true)
		}
		return code
	})
}

// printSources prints a table of sources and, for those that do not run (or all with
// details), their last error and stderr tail, inert on a terminal (termtext).
func (a *app) printSources(srcs []client.Source, all bool) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTATE\tGEN\tPID\tCONTAINMENT\tRESTARTS")
	for _, s := range srcs {
		if !all && s.State == "running" {
			continue
		}
		cont := s.Containment
		if s.Confined {
			cont += "+landlock"
		}
		if cont == "" {
			cont = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\n", termtext.Line(s.ID), termtext.Line(s.State), s.Generation, s.PID, termtext.Line(cont), s.Restarts)
	}
	tw.Flush()
	for _, s := range srcs {
		if (all || s.State != "running") && len(s.Layers) > 0 {
			fmt.Fprintf(a.stdout, "%s layers: %s\n", termtext.Line(s.ID), termtext.Line(strings.Join(s.Layers, "; ")))
		}
	}
	for _, s := range srcs {
		if s.Error == "" {
			continue
		}
		fmt.Fprintf(a.stdout, "%s: %s\n", termtext.Line(s.ID), indentLines(termtext.Inert(s.Error)))
		if tail := strings.TrimSpace(s.StderrTail); tail != "" && !strings.Contains(s.Error, tail) {
			fmt.Fprintf(a.stdout, "  stderr (last lines):\n    %s\n", strings.ReplaceAll(termtext.Inert(lastLinesOf(tail, 10)), "\n", "\n    "))
		}
	}
}

func indentLines(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ") }

func lastLinesOf(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func canonical(dir string) string {
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		return d
	}
	return dir
}

type restartOptions struct {
	remoteOptions
	location string
}

func (a *app) restartFlags() (*flag.FlagSet, *restartOptions) {
	o := &restartOptions{}
	fs := a.newFlagSet("restart", "--socket ADDRESS [--location DIR] NAME",
		"restarts one source of a Location active on a running toolhost serve or dev,\n"+
			"without touching the rest of the Location and with a fresh restart budget:\n"+
			"NAME is kind:name (plugin:text, mcp:memory, manifest:shout) or a bare name\n"+
			"only one source has. A plugin given as Go source is built again. Without\n"+
			"--location the server's only active Location is used. Prints the source's\n"+
			"status; exit status 0 when it serves again, 2 when it did not come back.\n")
	fs.StringVar(&o.socket, "socket", "", "the running toolhost serve or dev's `address` (unix socket path, or 127.0.0.1:PORT with --token-file)")
	fs.StringVar(&o.tokenFile, "token-file", "", "with --socket 127.0.0.1:PORT, the `file` holding serve's token")
	fs.StringVar(&o.location, "location", "", "the Location `directory` (it must be active there)")
	return fs, o
}

func (a *app) restart(ctx context.Context, args []string) int {
	fs, o := a.restartFlags()
	positional, code, ok := a.parse(fs, args)
	if !ok {
		return code
	}
	if len(positional) != 1 {
		return a.usageError(fs, "want one source NAME, got %q", positional)
	}
	if o.socket == "" {
		return a.usageError(fs, "missing --socket ADDRESS")
	}
	return a.withRemote(ctx, "restart", &o.remoteOptions, o.location, func(c *client.Client, loc client.Location) int {
		src, err := c.RestartSource(ctx, loc.ID, positional[0])
		if err != nil {
			return a.remoteError(ctx, "restart", o.socket, err)
		}
		a.printSources([]client.Source{src}, true)
		return ExitOK
	})
}

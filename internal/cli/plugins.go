package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/toolhost/toolhost/internal/termtext"
	"github.com/toolhost/toolhost/location"
)

const pluginsUsage = `usage: toolhost plugins <command> [--location DIR] ...

manages the plugins a Location takes from Go modules ("module" and "version" in a
plugin entry) and their lock file, .toolhost/plugins.lock.json: the exact version,
its h1: hash and the go version of each, which every activation fetches and checks.

commands:
  lock     [--location DIR]          resolve and lock every module plugin not locked yet
                                     (or whose "module" or "version" changed)
  upgrade  [--location DIR] [NAME...] resolve NAME's version query again (all without NAME)
  verify   [--location DIR]          fetch every locked module and check its hash (exit 1
                                     if one differs or a module plugin is not locked)
  list     [--location DIR] [--json] each plugin's kind, source, version, hash and state:
                                     for a module, locked, unlocked or stale (the config
                                     changed since), and built when its binary is cached

The go command fetches modules, so GOPROXY, GOSUMDB, GOPRIVATE, GONOSUMDB and GOFLAGS
apply as for go install. --location defaults to the current directory.
`

func (a *app) plugins(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) == 0 {
			a.errorf("%s", pluginsUsage)
			return ExitUsage
		}
		fmt.Fprint(a.stdout, pluginsUsage)
		return ExitOK
	}
	sub, rest := args[0], args[1:]
	fs := flag.NewFlagSet("toolhost plugins "+sub, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), pluginsUsage) }
	dir := fs.String("location", ".", "the Location `directory`")
	asJSON := fs.Bool("json", false, "list: print JSON")
	positional, code, ok := a.parse(fs, rest)
	if !ok {
		return code
	}
	if sub != "upgrade" && len(positional) > 0 {
		return a.usageError(fs, "unexpected arguments %q", positional)
	}
	id, err := location.Canonicalize(*dir)
	if err != nil {
		a.errorf("toolhost plugins %s: %v", sub, err)
		return ExitFailure
	}
	cfg, err := location.LoadConfig(id)
	if err != nil {
		a.errorf("toolhost plugins %s: %v", sub, err)
		return ExitFailure
	}
	switch sub {
	case "lock":
		return a.pluginsLock(ctx, id, cfg, location.LockOptions{})
	case "upgrade":
		return a.pluginsLock(ctx, id, cfg, location.LockOptions{Upgrade: positional, All: len(positional) == 0})
	case "verify":
		return a.pluginsVerify(ctx, id, cfg)
	case "list":
		return a.pluginsList(ctx, id, cfg, *asJSON)
	default:
		a.errorf("toolhost plugins: unknown command %q\n\n%s", sub, pluginsUsage)
		return ExitUsage
	}
}

func (a *app) pluginsLock(ctx context.Context, id string, cfg *location.Config, opts location.LockOptions) int {
	lock, resolved, err := location.LockModules(ctx, id, cfg, opts)
	if err != nil {
		a.errorf("toolhost plugins: %v", err)
		if ctx.Err() != nil {
			return ExitInterrupted
		}
		return ExitFailure
	}
	for _, name := range resolved {
		m := lock.Plugins[name]
		fmt.Fprintln(a.stdout, termtext.Line(fmt.Sprintf("%s: %s@%s %s", name, m.Module, m.Version, m.Hash)))
	}
	if len(resolved) == 0 {
		fmt.Fprintln(a.stdout, "every module plugin is locked")
	}
	return ExitOK
}

func (a *app) pluginsVerify(ctx context.Context, id string, cfg *location.Config) int {
	lock, err := location.ReadLock(id)
	if err != nil {
		a.errorf("toolhost plugins verify: %v", err)
		return ExitFailure
	}
	code := ExitOK
	for _, pc := range cfg.Plugins {
		if pc.Module == "" {
			continue
		}
		m, ok := lock.Plugins[pc.Name]
		switch {
		case !ok:
			a.errorf("%s: not locked: run `toolhost plugins lock`", pc.Name)
			code = ExitToolError
			continue
		case m.Package != pc.Module || m.Query != pc.Version:
			a.errorf("%s: locked for %s@%s, configured %s@%s: run `toolhost plugins lock`", pc.Name, m.Package, m.Query, pc.Module, pc.Version)
			code = ExitToolError
			continue
		}
		if err := location.VerifyModule(ctx, os.Environ(), "", pc.Name, m); err != nil {
			a.errorf("%v", err)
			switch {
			case ctx.Err() != nil:
				return ExitInterrupted
			case errors.Is(err, location.ErrModuleHash):
				code = max(code, ExitToolError)
			default:
				code = ExitFailure
			}
			continue
		}
		fmt.Fprintln(a.stdout, termtext.Line(fmt.Sprintf("%s: %s@%s %s verified", pc.Name, m.Module, m.Version, m.Hash)))
	}
	return code
}

// pluginListing is one plugin in `toolhost plugins list --json`.
type pluginListing struct {
	Name string `json:"name"`
	// Kind is "path", "source" or "module".
	Kind   string `json:"kind"`
	Source string `json:"source"`
	// Query is the config's "version"; Version and Hash what is locked (modules) or
	// Hash the sha256 pin (paths).
	Query   string `json:"query,omitempty"`
	Version string `json:"version,omitempty"`
	Hash    string `json:"hash,omitempty"`
	// Lock is "locked", "unlocked" or "stale" (the config changed since) for modules.
	Lock string `json:"lock,omitempty"`
	// Built says whether the locked module's binary is in the build cache, so an
	// activation starts it without fetching or building.
	Built *bool `json:"built,omitempty"`
}

func (a *app) pluginsList(ctx context.Context, id string, cfg *location.Config, asJSON bool) int {
	lock, err := location.ReadLock(id)
	if err != nil {
		a.errorf("toolhost plugins list: %v", err)
		return ExitFailure
	}
	cache, _ := location.BuildCacheDir("", os.Environ())
	list := []pluginListing{}
	for _, pc := range cfg.Plugins {
		p := pluginListing{Name: pc.Name}
		switch {
		case pc.Module != "":
			p.Kind, p.Source, p.Query, p.Lock = "module", pc.Module, pc.Version, "unlocked"
			if m, ok := lock.Plugins[pc.Name]; ok {
				p.Version, p.Hash, p.Lock = m.Version, m.Hash, "locked"
				if m.Package != pc.Module || m.Query != pc.Version {
					p.Lock = "stale"
				}
				built := location.ModuleBuilt(ctx, os.Environ(), cache, pc.Name, m)
				p.Built = &built
			}
		case pc.Source != "":
			p.Kind, p.Source = "source", pc.Source
		default:
			p.Kind, p.Source, p.Hash = "path", pc.Path, pc.SHA256
		}
		list = append(list, p)
	}
	if asJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"location": id, "plugins": list})
		return ExitOK
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSOURCE\tVERSION\tHASH\tSTATE")
	for _, p := range list {
		version := p.Version
		if p.Query != "" && p.Query != p.Version {
			version = fmt.Sprintf("%s (%s)", orDash(p.Version), p.Query)
		}
		state := p.Lock
		if p.Built != nil && *p.Built {
			state += ", built"
		}
		fmt.Fprintln(tw, strings.Join([]string{termtext.Line(p.Name), termtext.Line(p.Kind), termtext.Line(p.Source), termtext.Line(orDash(version)), termtext.Line(orDash(p.Hash)), termtext.Line(orDash(state))}, "\t"))
	}
	_ = tw.Flush()
	return ExitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/devwatch"
	"github.com/toolhost/toolhost/location"
)

func (a *app) devFlags() (*flag.FlagSet, *serveOptions) {
	fs, o := a.serveFlags("dev", "--location DIR [--debounce DURATION] "+serveSynopsis,
		"serve (see toolhost help serve) plus hot reload: the plugins of every active Location\n"+
			"are watched. A plugin given as Go source is rebuilt when a file under its source\n"+
			"directory changes (hidden directories, testdata, editor temporaries and tests\n"+
			"ignored), into the content-addressed build cache; a plugin given as a binary is\n"+
			"reloaded when the binary changes. A save starts the build at once; a change during\n"+
			"the build cancels it, and it starts over after a quiet period (--debounce; a binary\n"+
			"plugin always waits for it). Then the new generation starts and registers its\n"+
			"tools, then the old one is drained and stopped:\n"+
			"calls captured on it run on the new one when the tool's contract is unchanged and\n"+
			"settle unavailable when it changed. A failed build or start leaves the old\n"+
			"generation serving. Each reload prints one line on stderr: the plugin, what\n"+
			"changed, and how long build, start and swap took (then, on failure, the compiler\n"+
			"output or the start error).\n\n"+servingLineHelp)
	fs.DurationVar(&o.debounce, "debounce", devwatch.DefaultDebounce, "quiet `period` that ends a burst of changes")
	return fs, o
}

func (a *app) dev(ctx context.Context, args []string) int {
	fs, o := a.devFlags()
	return a.runServer(ctx, fs, o, args, func(o *serveOptions, logger hclog.Logger, cache string) func(*location.Location) func() {
		return func(loc *location.Location) func() {
			w, err := devwatch.Watch(context.WithoutCancel(ctx), loc, devwatch.Options{
				BuildCache: cache,
				Debounce:   o.debounce,
				Logger:     logger,
				Report:     func(ev devwatch.Event) { io.WriteString(a.stderr, ev.String()+"\n") },
			})
			if err != nil {
				a.errorf("toolhost dev: %s: not watching: %v", loc.ID(), err)
				return nil
			}
			fmt.Fprintf(a.stderr, "watching the plugins of %s\n", loc.ID())
			return func() { w.Close() }
		}
	})
}

// Command echo is the plugin the location tests activate: a typed "echo" tool that
// also reports which process and Location served it, and a "wait" tool that reports
// progress and then blocks until its call is cancelled.
//
// Its options add tools in a second batch: "names" lists tools answering
// "plugin NAME", "count" adds that many tools t0, t1, …; "marker" is a file "wait"
// creates when its call is cancelled, so a test can see the plugin saw it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/toolhost/toolhost/sdk"
)

type echoInput struct {
	Text string `json:"text" jsonschema:"description=The text to echo."`
}

type echoOutput struct {
	Text      string `json:"text"`
	PID       int    `json:"pid"`
	PIDNS     string `json:"pid_ns"` // its PID namespace, where PID is its own view
	Directory string `json:"directory"`
	Workspace string `json:"workspace_id"` // the workspace id it was activated with
}

type waitInput struct{}

type options struct {
	Names  []string `json:"names"`
	Count  int      `json:"count"`
	Marker string   `json:"marker"`
}

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		var opts options
		if len(loc.Options) > 0 {
			if err := json.Unmarshal(loc.Options, &opts); err != nil {
				return err
			}
		}
		_, err := tools.Register(ctx, map[string]sdk.Tool{
			"echo": sdk.NewTool("Echo the text back.\nAlso reports the serving process.",
				func(_ context.Context, _ sdk.Invocation, in echoInput) (echoOutput, error) {
					ns, _ := os.Readlink("/proc/self/ns/pid")
					return echoOutput{Text: in.Text, PID: hostPID(), PIDNS: ns, Directory: loc.Directory, Workspace: loc.WorkspaceID}, nil
				}),
			"wait": sdk.NewTool("Report progress, then wait until cancelled.",
				func(ctx context.Context, _ sdk.Invocation, _ waitInput) (string, error) {
					sdk.ReportProgress(ctx, sdk.Progress{Progress: 1, Total: 2, Message: "waiting"})
					<-ctx.Done()
					if opts.Marker != "" {
						_ = os.WriteFile(opts.Marker, []byte(context.Cause(ctx).Error()), 0o600)
					}
					return "", context.Cause(ctx)
				}),
		})
		if err != nil || len(opts.Names) == 0 && opts.Count == 0 {
			return err
		}
		extra := map[string]sdk.Tool{}
		for _, name := range opts.Names {
			extra[name] = sdk.NewTool("Answers with its name.", func(context.Context, sdk.Invocation, struct {
				Path string `json:"path,omitempty"`
			}) (string, error) {
				return "plugin " + name, nil
			})
		}
		for i := range opts.Count {
			extra[fmt.Sprintf("t%d", i)] = sdk.NewTool("A numbered tool.", func(context.Context, sdk.Invocation, struct{}) (string, error) {
				return "numbered", nil
			})
		}
		_, err = tools.Register(ctx, extra)
		return err
	}))
}

// hostPID is this process's pid as the host sees it where /proc is the host's
// (/proc/self names it even inside the sandbox's PID namespace); in a world of
// its own, whose /proc is its namespace's, its pid there.
func hostPID() int {
	link, err := os.Readlink("/proc/self")
	if pid, err2 := strconv.Atoi(link); err == nil && err2 == nil {
		return pid
	}
	return os.Getpid()
}

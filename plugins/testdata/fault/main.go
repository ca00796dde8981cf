// Command fault is a test plugin whose misbehaviour is chosen by its environment
// (process-level faults) and activation options (tool-level faults).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/toolhost/toolhost/sdk"
)

type options struct {
	Mode string `json:"mode"`
}

type echoIn struct {
	Text string `json:"text"`
}

type sizeIn struct {
	Bytes int `json:"bytes"`
}

// hostPID is this process's pid as the host sees it where /proc is the host's
// (/proc/self names it even inside the sandbox's PID namespace). In a world of its
// own, whose /proc is its PID namespace's, the host's view is not to be had: it
// is -(namespace inode * 100000 + its pid there), which the tests translate.
func hostPID() int {
	link, err := os.Readlink("/proc/self")
	pid, err2 := strconv.Atoi(link)
	if err != nil || err2 != nil {
		return os.Getpid()
	}
	if pid == os.Getpid() && os.Getenv("TOOLHOST_HOST_PID") == "0" {
		ns, _ := os.Readlink("/proc/self/ns/pid")
		var inode int
		if _, err := fmt.Sscanf(ns, "pid:[%d]", &inode); err == nil {
			return -(inode*100000 + pid)
		}
	}
	return pid
}

func main() {
	switch os.Getenv("FAULT") {
	case "child":
		fmt.Println(hostPID())
		time.Sleep(1000 * time.Second)
		return
	case "stdout_noise":
		fmt.Println("hello from a plugin that prints before the handshake")
	case "wrong_handshake":
		fmt.Fprintln(os.Stderr, "fault: speaking the wrong protocol")
		fmt.Println("1|99|unix|/nonexistent|grpc|")
		time.Sleep(time.Minute)
		return
	case "never_answer":
		fmt.Fprintln(os.Stderr, "fault: never answering")
		time.Sleep(time.Hour)
		return
	case "exit_early":
		fmt.Fprintln(os.Stderr, "fault: cannot open database: permission denied")
		os.Exit(3)
	case "fake_activation":
		// An activation line of its own before the sdk's: the host takes the first.
		fmt.Println("toolhost-activation ok !!not base64!!")
	}
	sdk.Serve(sdk.ActivateFunc(activate))
	if os.Getenv("FAULT") == "linger" {
		// Ignores the host's request to stop: only the kill ends it.
		time.Sleep(time.Hour)
	}
}

func activate(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
	var opts options
	if len(loc.Options) > 0 {
		if err := json.Unmarshal(loc.Options, &opts); err != nil {
			return err
		}
	}
	switch opts.Mode {
	case "bad_schema":
		_, err := tools.Register(ctx, map[string]sdk.Tool{"broken": {InputSchema: json.RawMessage(`{"type": 7}`), Execute: echo().Execute}})
		return err
	case "bad_name":
		_, err := tools.Register(ctx, map[string]sdk.Tool{"9lives": echo()})
		return err
	case "hang_activate":
		time.Sleep(time.Hour)
	case "fail_activate":
		return fmt.Errorf("missing API key")
	case "chatty_activate":
		// Standard output carries the handshake: the sdk sends this to stderr.
		fmt.Println("fault: activating, chattily")
	case "exit_activate":
		// Straight to fd 2, as a log or a panic writes: go-plugin has redirected
		// os.Stderr over the connection, and that stream ends with the process.
		fmt.Fprintln(os.NewFile(2, "stderr"), "fault: cannot open the cache database")
		os.Exit(4)
	}
	_, err := tools.Register(ctx, map[string]sdk.Tool{
		"echo": echo(),
		"location": sdk.NewTool("reports the Location", func(context.Context, sdk.Invocation, struct{}) (string, error) {
			return loc.Directory + "|" + os.Getenv("PLUGIN_SECRET") + "|" + os.Getenv("HOST_ONLY"), nil
		}),
		"whoami": sdk.NewTool("returns the pid", func(context.Context, sdk.Invocation, struct{}) (int, error) { return hostPID(), nil }),
		"big": sdk.NewTool("returns n bytes of text", func(_ context.Context, _ sdk.Invocation, in sizeIn) (string, error) {
			line := strings.Repeat("x", 99) + "\n"
			return strings.Repeat(line, in.Bytes/100) + strings.Repeat("y", in.Bytes%100), nil
		}),
		"wait": sdk.NewTool("waits for cancellation", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
			os.WriteFile(os.Getenv("FAULT_MARK")+".started", nil, 0o600)
			<-ctx.Done()
			fmt.Fprintln(os.Stderr, "wait: cancelled")
			os.WriteFile(os.Getenv("FAULT_MARK"), []byte("cancelled"), 0o600)
			return "", ctx.Err()
		}),
		"stubborn": sdk.NewTool("ignores cancellation", func(context.Context, sdk.Invocation, struct{}) (string, error) {
			time.Sleep(time.Hour)
			return "", nil
		}),
		"crash": sdk.NewTool("exits mid-call", func(context.Context, sdk.Invocation, struct{}) (string, error) {
			fmt.Fprintln(os.Stderr, "crash: about to exit")
			os.Exit(7)
			return "", nil
		}),
		"spawn": sdk.NewTool("starts a child process and returns its pid", func(context.Context, sdk.Invocation, struct{}) (int, error) {
			// Itself as a child that reports its host pid.
			self, err := os.Executable()
			if err != nil {
				return 0, err
			}
			cmd := exec.Command(self)
			cmd.Env = []string{"FAULT=child", "TOOLHOST_HOST_PID=" + os.Getenv("TOOLHOST_HOST_PID")}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // out of the plugin's group
			out, err := cmd.StdoutPipe()
			if err != nil {
				return 0, err
			}
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			var pid int
			_, err = fmt.Fscan(out, &pid)
			return pid, err
		}),
		// shaped has a structured result and a projection: its result crosses as
		// events, not as a lone output.
		"shaped": {
			Description: "returns a structured result and projects it",
			InputSchema: json.RawMessage(`{"type":"object"}`),
			Execute: func(context.Context, sdk.Invocation, json.RawMessage) (sdk.Output, error) {
				return sdk.Output{JSON: json.RawMessage(`{"n":1,"more":"x"}`), Structured: json.RawMessage(`{"n":1}`)}, nil
			},
			Project: func(_, output json.RawMessage) []sdk.Part { return []sdk.Part{sdk.Text("projected " + string(output))} },
		},
		"headers": sdk.NewTool("lists the call's header keys", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			return strings.Join(slices.Sorted(maps.Keys(md)), ","), nil
		}),
		"panic": sdk.NewTool("panics", func(context.Context, sdk.Invocation, struct{}) (string, error) { panic("kaboom") }),
		"fail": sdk.NewTool("fails", func(context.Context, sdk.Invocation, struct{}) (string, error) {
			return "", sdk.Failf("disk quota exceeded")
		}),
		"progress": sdk.NewTool("reports progress", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
			for i := 1; i <= 3; i++ {
				sdk.ReportProgress(ctx, sdk.Progress{Progress: float64(i), Total: 3, Message: fmt.Sprint("step ", i)})
			}
			return "done", nil
		}),
	})
	if err != nil {
		return err
	}
	// override registers a second batch whose echo overrides the first, and closes
	// it when called again.
	var override sdk.Registration
	_, err = tools.Register(ctx, map[string]sdk.Tool{
		"toggle": sdk.NewTool("toggles an override of echo", func(ctx context.Context, _ sdk.Invocation, _ struct{}) (string, error) {
			if override != nil {
				err := override.Close(ctx)
				override = nil
				return "closed", err
			}
			r, err := tools.Register(ctx, map[string]sdk.Tool{"echo": sdk.NewTool("shouts", func(_ context.Context, _ sdk.Invocation, in echoIn) (string, error) {
				return strings.ToUpper(in.Text), nil
			})})
			override = r
			return "registered", err
		}),
	})
	return err
}

func echo() sdk.Tool {
	return sdk.NewTool("echoes", func(_ context.Context, _ sdk.Invocation, in echoIn) (string, error) { return in.Text, nil })
}

// Command runner is a small session runner: it drives `toolhost serve` through the
// Go client the way an agent runtime does, and prints what happens.
//
// It starts `toolhost serve` on a private socket (or uses the server at --address),
// activates the example workspace, prepares a Request, then settles four calls at
// once, as a model turn with parallel tool calls would:
//
//   - upper: completes at once;
//   - countdown: reports progress, and the runner cancels it mid-countdown
//     (CancelCall), so it ends as an interruption;
//   - feature_toggle: the workspace's rule for it is "ask", so the call waits for a
//     person; the runner watches asks (WatchAsks) and answers "once" (AnswerAsk), and
//     the call completes;
//   - find with a bad pattern: a tool failure the model would see.
//
// Run it from the repository root after `make build`:
//
//	go run ./examples/runner --toolhost bin/toolhost
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/sdk"
)

func main() {
	toolhost := flag.String("toolhost", "toolhost", "the toolhost `binary` to start serve with")
	address := flag.String("address", "", "use the serve API at `address` (a unix socket path or 127.0.0.1:PORT) instead of starting one")
	tokenFile := flag.String("token-file", "", "with a TCP --address, the `file` holding the token")
	workspace := flag.String("workspace", "examples/workspace", "the workspace `directory` to activate")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *toolhost, *address, *tokenFile, *workspace); err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, toolhost, address, tokenFile, workspace string) error {
	token := ""
	if tokenFile != "" {
		data, err := os.ReadFile(tokenFile)
		if err != nil {
			return err
		}
		token = strings.TrimSpace(string(data))
	}
	if address == "" {
		srv, addr, err := startServe(toolhost)
		if err != nil {
			return err
		}
		defer srv.stop()
		address = addr
	}
	dir, err := filepath.Abs(workspace)
	if err != nil {
		return err
	}

	c, err := client.Dial(ctx, address, token)
	if err != nil {
		return err
	}
	defer c.Close()

	say("activating %s (plugins are built on first use)", dir)
	loc, _, err := c.ActivateLocation(ctx, dir)
	if err != nil {
		return err
	}
	for _, p := range loc.Plugins {
		say("  plugin %s: %s, generation %d, pid %d", p.Name, p.State, p.Generation, p.PID)
	}
	req, err := c.PrepareRequest(ctx, loc.ID, "anthropic")
	if err != nil {
		return err
	}
	names := make([]string, len(req.Definitions))
	for i, d := range req.Definitions {
		names[i] = d.Name
	}
	say("prepared %s: %d tools (%s), %d compatibility problems for anthropic", req.ID, len(names), strings.Join(names, ", "), len(req.Problems))

	// Watch asks before settling: an ask raised while nobody watches is denied at once
	// (the model sees only that permission was denied; the hint says how to allow it).
	watch, err := c.WatchAsks(ctx, loc.ID)
	if err != nil {
		return err
	}
	defer watch.Close()
	go answerAsks(ctx, c, watch)

	calls := []struct {
		name, input string
	}{
		{"upper", `{"text": "hello from the runner"}`},
		{"countdown", `{"seconds": 10, "step_ms": 100}`},
		{"feature_toggle", `{"enabled": true}`},
		{"find", `{"text": "x", "pattern": "("}`},
	}
	var wg sync.WaitGroup
	for i, call := range calls {
		id := fmt.Sprintf("call_%d", i+1)
		wg.Go(func() {
			inv := sdk.Invocation{SessionID: "session_1", Agent: "runner", AssistantMessageID: "msg_1", ToolCallID: id}
			// Only the countdown's progress is wanted: the other calls settle in one
			// unary round trip (Settle with a nil progress function).
			var progress func(sdk.Progress)
			if call.name == "countdown" {
				progress = func(p sdk.Progress) {
					say("%s %s: progress %v/%v %s", id, call.name, p.Progress, p.Total, p.Message)
					// Cancel the countdown mid-way, as a runner does when the user stops it.
					if p.Progress != 3 {
						return
					}
					say("%s %s: cancelling", id, call.name)
					if err := c.CancelCall(ctx, req.ID, id); err != nil {
						say("%s %s: cancel failed: %v", id, call.name, err)
					}
				}
			}
			s, err := c.Settle(ctx, req.ID, client.Call{Name: call.name, Input: json.RawMessage(call.input), Invocation: inv}, progress)
			var cerr *client.CallError
			switch {
			case errors.Is(err, context.Canceled):
				say("%s %s: interrupted (%v)", id, call.name, err)
			case errors.As(err, &cerr):
				say("%s %s: %s error: %s", id, call.name, cerr.Kind, cerr.Message)
			case err != nil:
				say("%s %s: failed: %v", id, call.name, err)
			default:
				say("%s %s: %s: %s", id, call.name, s.Outcome, s.Text())
			}
		})
	}
	wg.Wait()

	// The toggle registered beta tools at run time: a new Request sees them.
	req2, err := c.PrepareRequest(ctx, loc.ID, "")
	if err != nil {
		return err
	}
	for _, d := range req2.Definitions {
		if strings.HasPrefix(d.Name, "beta_") {
			say("a new Request now offers %s", d.Name)
		}
	}
	if err := c.ReleaseRequest(ctx, req.ID); err != nil {
		return err
	}
	return c.ReleaseRequest(ctx, req2.ID)
}

// answerAsks answers every ask "once", as a person approving each request would.
func answerAsks(ctx context.Context, c *client.Client, watch *client.AskWatch) {
	for {
		ev, err := watch.Next()
		if err != nil {
			return
		}
		if ev.Asked == nil {
			continue
		}
		r := ev.Asked.Request
		say("%s %s: permission asked for %q on %v; answering once", r.Source.CallID, r.Source.Tool, r.Action, r.Resources)
		if err := c.AnswerAsk(ctx, ev.Asked.ID, permission.Answer{Reply: permission.Once}); err != nil {
			say("answering %s failed: %v", ev.Asked.ID, err)
		}
	}
}

var sayMu sync.Mutex

func say(format string, args ...any) {
	sayMu.Lock()
	defer sayMu.Unlock()
	fmt.Printf(format+"\n", args...)
}

// serveProcess is a `toolhost serve` the runner started.
type serveProcess struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
}

// startServe starts `toolhost serve` on a socket in a private temporary directory
// and returns once it prints where it listens: its first line of output, "serving on
// ADDRESS".
func startServe(toolhost string) (*serveProcess, string, error) {
	dir, err := os.MkdirTemp("", "runner-")
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(toolhost, "serve", "--socket", filepath.Join(dir, "toolhost.sock"))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("start %s serve: %w", toolhost, err)
	}
	p := &serveProcess{cmd: cmd, dir: dir, done: make(chan struct{})}
	lines := bufio.NewScanner(out)
	addr := ""
	if lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "serving on "); ok {
			addr, _, _ = strings.Cut(rest, ", token in ")
		}
	}
	go func() {
		io.Copy(io.Discard, out)
		cmd.Wait()
		close(p.done)
	}()
	if addr == "" {
		p.stop()
		return nil, "", fmt.Errorf("%s serve exited before listening", toolhost)
	}
	say("started toolhost serve (pid %d) on %s", cmd.Process.Pid, addr)
	return p, addr, nil
}

// stop ends serve the way a service manager does, with SIGTERM, and waits for it.
func (p *serveProcess) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	os.RemoveAll(p.dir)
	say("toolhost serve stopped (%v)", p.cmd.ProcessState)
}

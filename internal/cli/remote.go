package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/permission"
)

// remoteOptions are the flags call and tools take to work against a running serve
// or dev instead of activating the Location themselves.
type remoteOptions struct {
	socket    string
	tokenFile string
}

const remoteFlagHelp = "work against the running toolhost serve or dev at `address`: its unix socket\n" +
	"path (what serve printed after \"serving on \"), or 127.0.0.1:PORT with --token-file.\n" +
	"--location is then activated there unless it is active already (it stays active\n" +
	"after the command); without --location the server's only active Location is used"

// withRemote connects to the server at o.socket, finds or activates the Location at
// dir there (or takes the only active one when dir is empty), runs fn with a Client
// whose handle is closed afterwards, and returns fn's exit code.
func (a *app) withRemote(ctx context.Context, cmd string, o *remoteOptions, dir string, fn func(*client.Client, client.Location) int) int {
	return a.dialRemote(ctx, cmd, o, func(c *client.Client) int { return a.onRemote(ctx, cmd, o, c, dir, fn) })
}

// dialRemote connects to the server at o.socket and runs fn with the Client, closed
// afterwards.
func (a *app) dialRemote(ctx context.Context, cmd string, o *remoteOptions, fn func(*client.Client) int) int {
	token := ""
	if o.tokenFile != "" {
		data, err := os.ReadFile(o.tokenFile)
		if err != nil {
			a.errorf("toolhost %s: read the token: %v", cmd, err)
			return ExitFailure
		}
		token = strings.TrimSpace(string(data))
	}
	c, err := client.Dial(ctx, o.socket, token)
	if err != nil {
		a.errorf("toolhost %s: %v", cmd, err)
		return ExitFailure
	}
	defer c.Close()
	return fn(c)
}

func (a *app) onRemote(ctx context.Context, cmd string, o *remoteOptions, c *client.Client, dir string, fn func(*client.Client, client.Location) int) int {
	fail := func(format string, args ...any) int {
		a.errorf("toolhost %s: %s", cmd, fmt.Sprintf(format, args...))
		return ExitFailure
	}
	var loc client.Location
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fail("%v", err)
		}
		loc, _, err = c.ActivateLocation(ctx, abs)
		if err != nil {
			return a.remoteError(ctx, cmd, o.socket, err)
		}
	} else {
		locs, err := c.ListLocations(ctx)
		if err != nil {
			return a.remoteError(ctx, cmd, o.socket, err)
		}
		switch len(locs) {
		case 0:
			return fail("no Location is active on %s: name one with --location DIR", o.socket)
		case 1:
			loc = locs[0]
		default:
			ids := make([]string, len(locs))
			for i, l := range locs {
				ids[i] = l.ID
			}
			return fail("%d Locations are active on %s (%s): choose one with --location DIR", len(locs), o.socket, strings.Join(ids, ", "))
		}
	}
	return fn(c, loc)
}

// remoteError reports a failed call to the server and returns the exit code.
func (a *app) remoteError(ctx context.Context, cmd, socket string, err error) int {
	switch {
	case ctx.Err() != nil:
		a.errorf("interrupted")
		return ExitInterrupted
	case errors.Is(err, client.ErrUnavailable):
		a.errorf("toolhost %s: no toolhost serve or dev answers on %s (%s): start one, or check the address", cmd, socket, unreachable(ctx, socket))
	default:
		a.errorf("toolhost %s: %v", cmd, err)
	}
	return ExitFailure
}

// unreachable says why nothing answers at socket, in the operating system's words
// ("connection refused", "no such file or directory"), asking it again directly:
// gRPC's status for it quotes its transport's internals.
func unreachable(ctx context.Context, socket string) string {
	network, addr := "tcp", socket
	if strings.HasPrefix(socket, "/") || strings.HasPrefix(socket, "unix:") {
		network, addr = "unix", strings.TrimPrefix(strings.TrimPrefix(socket, "unix://"), "unix:")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		conn.Close()
		return "something listens there but does not answer as toolhost, or it is shutting down"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// forwardAsks answers the asks of c's calls in loc through a.asker (the person at
// the terminal) until ctx ends. Without an asker nobody watches, so the server
// denies each ask (see WatchAsks in serve.proto), as a local call does.
func (a *app) forwardAsks(ctx context.Context, c *client.Client, loc string) (stop func(), err error) {
	if a.asker == nil {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	watch, err := c.WatchAsks(ctx, loc)
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := watch.Next()
			if err != nil {
				return
			}
			if ev.Asked == nil {
				continue
			}
			ans, err := a.asker.Ask(ctx, ev.Asked.ID, ev.Asked.Request)
			if err != nil {
				// No answer could be read: decline, which ends the call as an
				// interruption.
				ans = permission.Answer{Reply: permission.Reject}
			}
			_ = c.AnswerAsk(ctx, ev.Asked.ID, ans)
		}
	}()
	return func() {
		cancel()
		watch.Close()
		<-done
	}, nil
}

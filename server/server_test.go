//go:build unix

package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/server"
)

// pluginBin is testdata/plugin, built once.
var pluginBin string

func TestMain(m *testing.M) {
	if os.Getenv("SERVER_TEST_DIAL") != "" {
		dialAsHelper()
		return
	}
	hosttest.Main(m, map[string]*string{"./testdata/plugin": &pluginBin})
}

// rules allows every tool but guarded, which asks.
const rules = `[{"action": "*", "resource": "*", "effect": "allow"}, {"action": "guarded", "resource": "*", "effect": "ask"}]`

// workspace makes a Location running the test plugin and returns its directory.
func workspace(t *testing.T) string {
	t.Helper()
	dir, err := location.Canonicalize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "stop_grace": "2s", "grants": ["ask", "sample"]}], "permission": %s}`, pluginBin, rules)
	if err := os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, location.ConfigPath), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fixture is a Server on a unix socket, shut down (and checked for leftover plugin
// processes) by the test's cleanup.
type fixture struct {
	srv    *server.Server
	socket string
	root   *scope.Scope
}

func start(t *testing.T, edit func(*server.Options)) *fixture {
	t.Helper()
	reg := hosttest.Registry(t, registry.Options{})
	opts := server.Options{Registry: reg, Location: location.Options{StateDir: t.TempDir()}}
	if edit != nil {
		edit(&opts)
	}
	root := scope.New(context.Background())
	srv, err := server.New(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	sockDir, err := os.MkdirTemp("", "srv")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, socket: filepath.Join(sockDir, "s.sock"), root: root}
	l, err := server.ListenUnix(f.socket, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		var pids []int
		for _, loc := range srv.Locations() {
			for _, sup := range loc.Plugins() {
				pids = append(pids, sup.Current().PID())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		root.Close(ctx)
		os.RemoveAll(sockDir)
		for _, pid := range pids {
			if !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				t.Errorf("plugin process %d survived the shutdown", pid)
			}
		}
	})
	return f
}

func (f *fixture) dial(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), "unix://"+f.socket, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// activate activates a fresh workspace and prepares a Request on it.
func (f *fixture) activate(t *testing.T, c *client.Client) (client.Location, *client.Request) {
	t.Helper()
	loc, already, err := c.ActivateLocation(t.Context(), workspace(t))
	if err != nil || already {
		t.Fatalf("activate: %v (already %v)", err, already)
	}
	req, err := c.PrepareRequest(t.Context(), loc.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	return loc, req
}

func inv(t *testing.T, id string) sdk.Invocation {
	return sdk.Invocation{SessionID: "s-" + t.Name(), Agent: "tester", AssistantMessageID: "m1", ToolCallID: id}
}

func TestSettleStreamsProgressThenTheSettlement(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	_, req := f.activate(t, c)
	var got []string
	s, err := c.Settle(t.Context(), req.ID, client.Call{Name: "progress", Input: json.RawMessage(`{"n":3}`), Invocation: inv(t, "c1")},
		func(p sdk.Progress) { got = append(got, fmt.Sprintf("%v/%v %s", p.Progress, p.Total, p.Message)) })
	if err != nil {
		t.Fatal(err)
	}
	if s.Outcome != registry.Completed || s.Text() != "done" || s.ToolCallID != "c1" || s.Name != "progress" {
		t.Fatalf("settlement %+v", s)
	}
	if strings.Join(got, ",") != "1/3 step 1,2/3 step 2,3/3 step 3" {
		t.Fatalf("progress %q", got)
	}
	t.Run("ModelVisibleOutcomesAreSettlements", func(t *testing.T) {
		for name, want := range map[string]registry.Outcome{"nope": registry.Unknown, "echo": registry.InvalidInput} {
			s, err := c.Settle(t.Context(), req.ID, client.Call{Name: name, Input: json.RawMessage(`{"txt":1}`), Invocation: inv(t, "c-"+name)}, nil)
			if err != nil || s.Outcome != want {
				t.Errorf("%s: %+v, %v; want %s", name, s, err, want)
			}
		}
	})
	t.Run("ToolCallIDRequired", func(t *testing.T) {
		_, err := c.Settle(t.Context(), req.ID, client.Call{Name: "echo"}, nil)
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("err %v, want ErrInvalidArgument", err)
		}
	})
	t.Run("ListLocations", func(t *testing.T) {
		locs, err := c.ListLocations(t.Context())
		if err != nil || len(locs) != 1 || len(locs[0].Plugins) != 1 {
			t.Fatalf("%+v, %v", locs, err)
		}
		p := locs[0].Plugins[0]
		if p.Name != "test" || p.State != "running" || p.Generation != 1 || p.PID == 0 {
			t.Errorf("plugin status %+v", p)
		}
		names := map[string]bool{}
		for _, tool := range locs[0].Tools {
			names[tool.Name] = true
		}
		if !names["echo"] || !names["block"] {
			t.Errorf("tools %+v", locs[0].Tools)
		}
	})
}

// blockUntilRunning starts the block tool and returns once it reported progress.
func blockUntilRunning(t *testing.T, ctx context.Context, c *client.Client, reqID, callID string) <-chan error {
	t.Helper()
	started := make(chan struct{})
	errc := make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := c.Settle(ctx, reqID, client.Call{Name: "block", Invocation: inv(t, callID)}, func(sdk.Progress) { once.Do(func() { close(started) }) })
		errc <- err
	}()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("block ended before it started: %v", err)
	}
	return errc
}

func TestCancellation(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	_, req := f.activate(t, c)
	t.Run("CancelCall", func(t *testing.T) {
		errc := blockUntilRunning(t, t.Context(), c, req.ID, "c1")
		if err := c.CancelCall(t.Context(), req.ID, "c1"); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		var cerr *client.CallError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &cerr) || cerr.Kind != client.Interrupted || !strings.Contains(cerr.Message, "CancelCall") {
			t.Fatalf("err %v, want an interruption by CancelCall", err)
		}
		if err := c.CancelCall(t.Context(), req.ID, "c1"); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("cancelling a finished call: %v, want ErrNotFound", err)
		}
	})
	t.Run("ClientContext", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		errc := blockUntilRunning(t, ctx, c, req.ID, "c2")
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		// The server ends the call too: the id is free again, and nothing is in flight.
		proctest.Until(t, func() bool { return inFlight(f) == 0 })
	})
	t.Run("DuplicateCallID", func(t *testing.T) {
		errc := blockUntilRunning(t, t.Context(), c, req.ID, "c3")
		_, err := c.Settle(t.Context(), req.ID, client.Call{Name: "echo", Invocation: inv(t, "c3")}, nil)
		if err == nil || !strings.Contains(err.Error(), "already in flight") {
			t.Errorf("a second call with the same id: %v", err)
		}
		c.CancelCall(t.Context(), req.ID, "c3")
		<-errc
	})
}

func inFlight(f *fixture) int {
	n := 0
	for _, loc := range f.srv.Locations() {
		for _, sup := range loc.Plugins() {
			n += sup.Current().InFlight()
		}
	}
	return n
}

func TestRequestsBelongToTheirConnection(t *testing.T) {
	f := start(t, nil)
	a, b := f.dial(t), f.dial(t)
	loc, req := f.activate(t, a)
	errc := blockUntilRunning(t, t.Context(), a, req.ID, "c1")

	if _, err := b.Settle(t.Context(), req.ID, client.Call{Name: "echo", Input: json.RawMessage(`{"text":"x"}`), Invocation: inv(t, "b1")}, nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another client's Settle: %v, want ErrNotFound", err)
	}
	if err := b.CancelCall(t.Context(), req.ID, "c1"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another client's CancelCall: %v, want ErrNotFound", err)
	}
	if err := b.ReleaseRequest(t.Context(), req.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another client's ReleaseRequest: %v, want ErrNotFound", err)
	}
	// The owner still has it all.
	if s, err := a.Settle(t.Context(), req.ID, client.Call{Name: "echo", Input: json.RawMessage(`{"text":"mine"}`), Invocation: inv(t, "a2")}, nil); err != nil || s.Text() != "mine" {
		t.Fatalf("owner's Settle: %+v, %v", s, err)
	}
	if err := a.CancelCall(t.Context(), req.ID, "c1"); err != nil {
		t.Fatal(err)
	}
	<-errc
	if err := a.ReleaseRequest(t.Context(), req.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseRequest(t.Context(), req.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("released twice: %v", err)
	}

	t.Run("ClosingTheConnectionEndsItsCalls", func(t *testing.T) {
		c, err := client.Dial(t.Context(), "unix://"+f.socket, "")
		if err != nil {
			t.Fatal(err)
		}
		req, err := c.PrepareRequest(t.Context(), loc.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		errc := blockUntilRunning(t, t.Context(), c, req.ID, "c9")
		c.Close()
		<-errc
		proctest.Until(t, func() bool { return inFlight(f) == 0 })
	})
}

func TestPermissionAsks(t *testing.T) {
	f := start(t, nil)
	a, b := f.dial(t), f.dial(t)
	loc, req := f.activate(t, a)

	t.Run("NobodyWatchingIsADeny", func(t *testing.T) {
		s, err := a.Settle(t.Context(), req.ID, client.Call{Name: "guarded", Invocation: inv(t, "n1")}, nil)
		if err != nil || s.Outcome != "tool_failure" || !strings.Contains(s.Text(), "permission denied") {
			t.Fatalf("settle %+v, %v; want a deny", s, err)
		}
		if strings.Contains(s.Text(), "config") || strings.Contains(s.Text(), `"effect"`) {
			t.Errorf("the model-visible deny %q says how to allow it", s.Text())
		}
		if !strings.Contains(s.Hint, "config.json") || !strings.Contains(s.Hint, `{"action":"guarded","resource":"*","effect":"allow"}`) {
			t.Errorf("runner hint %q does not say how to allow it in the config", s.Hint)
		}
	})

	watchA, err := a.WatchAsks(t.Context(), loc.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer watchA.Close()
	watchB, err := b.WatchAsks(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer watchB.Close()
	bEvents := make(chan client.AskEvent, 16)
	go func() {
		for {
			ev, err := watchB.Next()
			if err != nil {
				close(bEvents)
				return
			}
			bEvents <- ev
		}
	}()

	settle := func(id string) <-chan result {
		out := make(chan result, 1)
		go func() {
			s, err := a.Settle(t.Context(), req.ID, client.Call{Name: "guarded", Invocation: inv(t, id)}, nil)
			out <- result{s, err}
		}()
		return out
	}
	next := func() *client.Ask {
		t.Helper()
		for {
			ev, err := watchA.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Asked != nil {
				return ev.Asked
			}
		}
	}

	t.Run("Once", func(t *testing.T) {
		res := settle("p1")
		ask := next()
		r := ask.Request
		if ask.LocationID != loc.ID || r.Action != "guarded" || r.Source.CallID != "p1" || r.Source.Tool != "guarded" || r.SessionID != "s-TestPermissionAsks" || r.Agent != "tester" {
			t.Fatalf("ask %+v", ask)
		}
		if err := b.AnswerAsk(t.Context(), ask.ID, permission.Answer{Reply: permission.Once}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("another client answered: %v, want ErrNotFound", err)
		}
		if err := a.AnswerAsk(t.Context(), ask.ID, permission.Answer{Reply: permission.Once}); err != nil {
			t.Fatal(err)
		}
		if got := <-res; got.err != nil || got.s.Text() != "granted" {
			t.Fatalf("after once: %+v, %v", got.s, got.err)
		}
		if err := a.AnswerAsk(t.Context(), ask.ID, permission.Answer{Reply: permission.Once}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("answered twice: %v", err)
		}
	})
	t.Run("RejectWithMessage", func(t *testing.T) {
		res := settle("p2")
		ask := next()
		if err := a.AnswerAsk(t.Context(), ask.ID, permission.Answer{Reply: permission.Reject, Message: "not on Fridays"}); err != nil {
			t.Fatal(err)
		}
		got := <-res
		if got.err != nil || got.s.Outcome != registry.ToolFailed || !strings.Contains(got.s.Text(), "not on Fridays") {
			t.Fatalf("after reject: %+v, %v", got.s, got.err)
		}
	})
	t.Run("RejectWithoutMessageInterrupts", func(t *testing.T) {
		res := settle("p3")
		ask := next()
		if err := a.AnswerAsk(t.Context(), ask.ID, permission.Answer{Reply: permission.Reject}); err != nil {
			t.Fatal(err)
		}
		if got := <-res; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("after a bare reject: %+v, %v; want an interruption", got.s, got.err)
		}
	})
	t.Run("CancelledCallResolvesItsAsk", func(t *testing.T) {
		res := settle("p4")
		ask := next()
		if err := a.CancelCall(t.Context(), req.ID, "p4"); err != nil {
			t.Fatal(err)
		}
		if got := <-res; !errors.Is(got.err, context.Canceled) {
			t.Fatalf("cancelled while asking: %v", got.err)
		}
		for {
			ev, err := watchA.Next()
			if err != nil {
				t.Fatal(err)
			}
			if ev.Resolved == ask.ID {
				break
			}
		}
	})
	watchB.Close()
	for ev := range bEvents {
		if ev.Asked != nil {
			t.Errorf("client b saw client a's ask %+v", ev.Asked)
		}
	}
}

type result struct {
	s   *registry.Settlement
	err error
}

func TestPrepareWithProvider(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	loc, _ := f.activate(t, c)
	req, err := c.PrepareRequest(t.Context(), loc.ID, "gemini")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range req.Definitions {
		if strings.Contains(string(d.InputSchema), "additionalProperties") {
			t.Errorf("%s: gemini schema not adapted: %s", d.Name, d.InputSchema)
		}
	}
	if _, err := c.PrepareRequest(t.Context(), loc.ID, "llama"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("unknown provider: %v", err)
	}
	if _, err := c.PrepareRequest(t.Context(), "/nonexistent", ""); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("unknown location: %v", err)
	}
}

func TestActivation(t *testing.T) {
	f := start(t, nil)
	a, b := f.dial(t), f.dial(t)
	dir := workspace(t)
	var wg sync.WaitGroup
	res := make([]bool, 2)
	ids := make([]string, 2)
	for i, c := range []*client.Client{a, b} {
		wg.Go(func() {
			loc, already, err := c.ActivateLocation(t.Context(), dir)
			if err != nil {
				t.Error(err)
			}
			res[i], ids[i] = already, loc.ID
		})
	}
	wg.Wait()
	if res[0] == res[1] || ids[0] != dir || ids[1] != dir {
		t.Fatalf("two concurrent activations: already %v, ids %q", res, ids)
	}
	req, err := a.PrepareRequest(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	pid := f.srv.Locations()[0].Plugins()[0].Current().PID()
	if err := b.DeactivateLocation(t.Context(), dir); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		t.Error("plugin survived deactivation")
	}
	s, err := a.Settle(t.Context(), req.ID, client.Call{Name: "echo", Input: json.RawMessage(`{"text":"x"}`), Invocation: inv(t, "c1")}, nil)
	if err != nil || s.Outcome != registry.Unavailable {
		t.Fatalf("settling on a deactivated Location: %+v, %v; want unavailable", s, err)
	}
	if err := a.DeactivateLocation(t.Context(), dir); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("deactivating twice: %v", err)
	}
	t.Run("Failures", func(t *testing.T) {
		if _, _, err := a.ActivateLocation(t.Context(), "relative/dir"); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("relative directory: %v", err)
		}
		bad := t.TempDir()
		os.MkdirAll(filepath.Join(bad, ".toolhost"), 0o755)
		os.WriteFile(filepath.Join(bad, location.ConfigPath), []byte(`{"plugins": [{"name": "x"}]}`), 0o644)
		if _, _, err := a.ActivateLocation(t.Context(), bad); !errors.Is(err, client.ErrActivation) || !strings.Contains(err.Error(), "/plugins/0") {
			t.Errorf("bad config: %v", err)
		}
	})
}

func TestShutdownInterruptsCalls(t *testing.T) {
	f := start(t, nil)
	c := f.dial(t)
	loc, req := f.activate(t, c)
	watch, err := c.WatchAsks(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	errc := blockUntilRunning(t, t.Context(), c, req.ID, "c1")
	pid := f.srv.Locations()[0].Plugins()[0].Current().PID()
	if err := f.srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	var cerr *client.CallError
	if !errors.As(err, &cerr) || cerr.Kind != client.Interrupted || !strings.Contains(cerr.Message, "shutting down") {
		t.Fatalf("call in flight at shutdown: %v, want an interrupted event", err)
	}
	if _, err := watch.Next(); err == nil {
		t.Fatal("the watch outlived the shutdown")
	}
	if !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		t.Fatal("plugin survived the shutdown")
	}
	if _, err := c.PrepareRequest(t.Context(), loc.ID, ""); err == nil {
		t.Fatal("the server still answers after shutdown")
	}
}

func TestToken(t *testing.T) {
	token, err := server.NewToken()
	if err != nil || len(token) != 64 {
		t.Fatalf("token %q, %v", token, err)
	}
	f := start(t, func(o *server.Options) { o.Token = token })
	l, err := server.ListenTCP("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	go f.srv.Serve(l)
	addr := l.Addr().String()
	for _, tt := range []struct {
		name, token string
		err         error
	}{
		{"Missing", "", client.ErrUnauthenticated},
		{"Wrong", strings.Repeat("0", 64), client.ErrUnauthenticated},
		{"Prefix", token[:32], client.ErrUnauthenticated},
		{"Right", token, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := client.Dial(t.Context(), addr, tt.token)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.ListLocations(t.Context()); !errors.Is(err, tt.err) && !(tt.err == nil && err == nil) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
		})
	}
}

func TestListenTCPIsLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "example.com:0"} {
		if l, err := server.ListenTCP(addr, nil); !errors.Is(err, server.ErrNotLoopback) {
			if l != nil {
				l.Close()
			}
			t.Errorf("ListenTCP(%q): %v, want ErrNotLoopback", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		l, err := server.ListenTCP(addr, nil)
		if err != nil {
			t.Errorf("ListenTCP(%q): %v", addr, err)
			continue
		}
		l.Close()
	}
}

func TestListenUnix(t *testing.T) {
	dir, err := os.MkdirTemp("", "lu")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "s.sock")
	l, err := server.ListenUnix(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v (%v), want 0600", fi.Mode(), err)
	}
	t.Run("LiveSocketRefused", func(t *testing.T) {
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}()
		if l2, err := server.ListenUnix(path, nil); err == nil || !strings.Contains(err.Error(), "another server") {
			if l2 != nil {
				l2.Close()
			}
			t.Fatalf("second listener: %v", err)
		}
	})
	l.Close()
	t.Run("StaleSocketReplaced", func(t *testing.T) {
		stale, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		stale.(*net.UnixListener).SetUnlinkOnClose(false)
		stale.Close()
		l, err := server.ListenUnix(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
	})
	t.Run("NotASocket", func(t *testing.T) {
		os.WriteFile(path, []byte("precious"), 0o600)
		defer os.Remove(path)
		if _, err := server.ListenUnix(path, nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("SharedDirectoryRefused", func(t *testing.T) {
		shared := filepath.Join(dir, "shared")
		os.Mkdir(shared, 0o777)
		os.Chmod(shared, 0o777)
		if _, err := server.ListenUnix(filepath.Join(shared, "s.sock"), nil); err == nil || !strings.Contains(err.Error(), "writable by others") {
			t.Fatalf("err %v", err)
		}
		if err := server.WriteTokenFile(filepath.Join(shared, "token"), "x"); err == nil {
			t.Fatal("wrote a token into a shared directory")
		}
	})
	t.Run("TokenFileIsPrivate", func(t *testing.T) {
		p := filepath.Join(dir, "token")
		if err := server.WriteTokenFile(p, "abc"); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		data, _ := os.ReadFile(p)
		if err != nil || fi.Mode().Perm() != 0o600 || string(data) != "abc" {
			t.Fatalf("token file mode %v, data %q, %v", fi.Mode(), data, err)
		}
	})
	t.Run("OtherUsersRefused", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to run a peer as another user")
		}
		open := filepath.Join(dir, "open")
		os.Mkdir(open, 0o755)
		os.Chmod(open, 0o755)
		os.Chmod(dir, 0o755)
		path := filepath.Join(open, "s.sock")
		f := start(t, nil)
		l, err := server.ListenUnix(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		go f.srv.Serve(l)
		helper := filepath.Join(open, "helper")
		if data, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(helper, data, 0o755) != nil {
			t.Fatalf("copy the test binary: %v", err)
		}
		// Mode 0600: another user cannot even connect.
		if out, err := dialAs(t, helper, path); err == nil || !strings.Contains(out, "permission denied") {
			t.Fatalf("another user dialled the 0600 socket: %v\n%s", err, out)
		}
		// Even through a socket opened up by mistake, the peer check refuses them.
		os.Chmod(path, 0o666)
		if out, err := dialAs(t, helper, path); err == nil || !strings.Contains(out, "unavailable") {
			t.Fatalf("another user called through an open socket: %v\n%s", err, out)
		}
	})
}

func TestSourceProcessesAreRefused(t *testing.T) {
	f := start(t, nil)
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := server.ListenUnix(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	go f.srv.Serve(l)
	self, _ := os.Executable()
	// The same helper, outside and then inside a contained source's tree.
	dial := func(spec sandbox.Spec) (string, error) {
		b, err := sandbox.Command(spec, self, []string{self, "-test.run=^$"}, "/", append(os.Environ(), "SERVER_TEST_DIAL="+path))
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		b.Cmd.Stdout, b.Cmd.Stderr = &out, &out
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		err = b.Wait()
		return strings.ToLower(out.String()), err
	}
	if out, err := dial(sandbox.Spec{Name: "plain"}); err != nil || !strings.Contains(out, "called") {
		t.Fatalf("an uncontained process was refused: %v\n%s", err, out)
	}
	for _, mode := range []sandbox.Mode{sandbox.ModeNamespace, sandbox.ModeSubreaper} {
		if out, err := dial(sandbox.Spec{Name: "hostile", Contain: true, Mode: mode}); err == nil || !strings.Contains(out, "unavailable") {
			t.Fatalf("%s: a source's process called the serve API: %v\n%s", mode, err, out)
		}
	}
}

// dialAs runs helper (a copy of this test binary) as user nobody to call
// ListLocations on path.
func dialAs(t *testing.T, helper, path string) (string, error) {
	cmd := exec.CommandContext(t.Context(), helper, "-test.run=^$")
	cmd.Env = append(os.Environ(), "SERVER_TEST_DIAL="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	return strings.ToLower(string(out)), err
}

func dialAsHelper() {
	path := os.Getenv("SERVER_TEST_DIAL")
	if c, err := net.Dial("unix", path); err != nil {
		fmt.Println(err)
		os.Exit(1)
	} else {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "unix://"+path, "")
	if err == nil {
		_, err = c.ListLocations(ctx)
	}
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("called")
}

func TestTCPNeedsAToken(t *testing.T) {
	f := start(t, nil)
	l, err := server.ListenTCP("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Serve(l); !errors.Is(err, server.ErrTokenRequired) {
		t.Fatalf("Serve on TCP without a token: %v", err)
	}
}

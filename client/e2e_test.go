//go:build unix

package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

// These tests run the real toolhost binary (`toolhost serve`, `toolhost dev`) as a
// separate process and talk to it with the client.

var (
	toolhostBin string
	pluginV1    string // testdata/plugin built with version v1
	pluginV2    string // the same with version v2
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "client-test-")
	if err != nil {
		panic(err)
	}
	toolhostBin = filepath.Join(dir, "toolhost")
	pluginV1 = filepath.Join(dir, "plugin-v1")
	pluginV2 = filepath.Join(dir, "plugin-v2")
	builds := [][]string{
		{"-o", toolhostBin, "../cmd/host"},
		{"-o", pluginV1, "-ldflags", "-X main.version=v1", "./testdata/plugin"},
		{"-o", pluginV2, "-ldflags", "-X main.version=v2", "./testdata/plugin"},
	}
	for _, args := range builds {
		if out, err := exec.Command("go", append([]string{"build"}, args...)...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %v: %v\n%s", args, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// workspace makes a Location whose plugin "test" is the binary at bin; every tool
// is allowed but guarded, which asks.
func workspace(t *testing.T, bin string) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "stop_grace": "2s"}],
		"permission": [{"action": "*", "resource": "*", "effect": "allow"}, {"action": "guarded", "resource": "*", "effect": "ask"}]}`, bin)
	os.MkdirAll(filepath.Join(dir, ".toolhost"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, ".toolhost", "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// proc is a running toolhost serve or dev.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string // what follows "serving on "
	token  string // the token file's path, for TCP
	stderr *testio.SyncBuffer
	done   chan struct{}
}

// run starts toolhost with args and waits until it serves. The test's cleanup
// stops it (SIGTERM) if it still runs.
func run(t *testing.T, args ...string) *proc {
	t.Helper()
	data := t.TempDir()
	cmd := exec.Command(toolhostBin, args...)
	cmd.Env = append(os.Environ(), "TOOLHOST_OUTPUT_DIR="+filepath.Join(data, "out"), "XDG_DATA_HOME="+filepath.Join(data, "share"))
	p := &proc{t: t, cmd: cmd, stderr: &testio.SyncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "serving on "); ok {
			p.addr, p.token, _ = strings.Cut(rest, ", token in ")
			break
		}
	}
	go func() {
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		close(p.done)
	}()
	if p.addr == "" {
		<-p.done
		t.Fatalf("toolhost %v did not serve: %v\n%s", args, cmd.ProcessState, p.stderr)
	}
	t.Cleanup(func() { p.stop() })
	return p
}

// stop sends SIGTERM and waits for the exit.
func (p *proc) stop() *os.ProcessState {
	select {
	case <-p.done:
		return p.cmd.ProcessState
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("toolhost did not stop within a minute of SIGTERM\n%s", p.stderr)
	}
	return p.cmd.ProcessState
}

func (p *proc) dial(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.Dial(t.Context(), p.addr, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

func inv(id string) sdk.Invocation {
	return sdk.Invocation{SessionID: "s1", Agent: "e2e", AssistantMessageID: "m1", ToolCallID: id}
}

// settleBlock starts the block tool and returns once it runs.
func settleBlock(t *testing.T, ctx context.Context, c *client.Client, req, id string) <-chan error {
	t.Helper()
	started := make(chan struct{})
	errc := make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := c.Settle(ctx, req, client.Call{Name: "block", Invocation: inv(id)}, func(sdk.Progress) { once.Do(func() { close(started) }) })
		errc <- err
	}()
	select {
	case <-started:
	case err := <-errc:
		t.Fatalf("block ended early: %v", err)
	}
	return errc
}

func TestServeOverUnixSocket(t *testing.T) {
	ws := workspace(t, pluginV1)
	sockDir, _ := os.MkdirTemp("", "e2e")
	defer os.RemoveAll(sockDir)
	socket := filepath.Join(sockDir, "toolhost.sock")
	p := run(t, "serve", "--socket", socket, "--location", ws)
	if p.addr != "unix://"+socket {
		t.Fatalf("serving on %q", p.addr)
	}
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket %v, %v: want a socket with mode 0600", fi.Mode(), err)
	}
	a, b := p.dial(t, ""), p.dial(t, "")
	locs, err := a.ListLocations(t.Context())
	if err != nil || len(locs) != 1 || locs[0].ID != ws {
		t.Fatalf("locations %+v, %v", locs, err)
	}
	pid := locs[0].Plugins[0].PID
	req, err := a.PrepareRequest(t.Context(), ws, "openai")
	if err != nil {
		t.Fatal(err)
	}
	s, err := a.Settle(t.Context(), req.ID, client.Call{Name: "echo", Input: json.RawMessage(`{"text":"over the socket"}`), Invocation: inv("c1")}, nil)
	if err != nil || s.Outcome != registry.Completed || s.Text() != "over the socket" {
		t.Fatalf("echo: %+v, %v", s, err)
	}

	t.Run("AnotherClientCannotTouchTheRequest", func(t *testing.T) {
		errc := settleBlock(t, t.Context(), a, req.ID, "c2")
		if _, err := b.Settle(t.Context(), req.ID, client.Call{Name: "echo", Invocation: inv("b1")}, nil); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("b settles a's Request: %v", err)
		}
		if err := b.CancelCall(t.Context(), req.ID, "c2"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("b cancels a's call: %v", err)
		}
		if err := b.ReleaseRequest(t.Context(), req.ID); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("b releases a's Request: %v", err)
		}
		a.CancelCall(t.Context(), req.ID, "c2")
		<-errc
	})
	t.Run("CancelCallInterrupts", func(t *testing.T) {
		errc := settleBlock(t, t.Context(), a, req.ID, "c3")
		if err := a.CancelCall(t.Context(), req.ID, "c3"); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		var cerr *client.CallError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &cerr) || cerr.Kind != client.Interrupted {
			t.Fatalf("err %v, want an interrupted event", err)
		}
	})
	t.Run("ContextCancelInterrupts", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		errc := settleBlock(t, ctx, a, req.ID, "c4")
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
		// The server ended the call: the id is free again.
		proctest.Until(t, func() bool {
			err := a.CancelCall(t.Context(), req.ID, "c4")
			if err != nil && !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("cancel an ended call: %v, want ErrNotFound", err)
			}
			return err != nil
		})
	})
	t.Run("PermissionAskAnsweredThroughTheAPI", func(t *testing.T) {
		watch, err := a.WatchAsks(t.Context(), ws)
		if err != nil {
			t.Fatal(err)
		}
		defer watch.Close()
		done := make(chan result, 1)
		go func() {
			s, err := a.Settle(t.Context(), req.ID, client.Call{Name: "guarded", Invocation: inv("c5")}, nil)
			done <- result{s, err}
		}()
		ev, err := watch.Next()
		if err != nil || ev.Asked == nil || ev.Asked.Request.Action != "guarded" || ev.Asked.Request.Source.CallID != "c5" {
			t.Fatalf("ask event %+v, %v", ev, err)
		}
		if err := b.AnswerAsk(t.Context(), ev.Asked.ID, permission.Answer{Reply: permission.Once}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("b answered a's ask: %v", err)
		}
		if err := a.AnswerAsk(t.Context(), ev.Asked.ID, permission.Answer{Reply: permission.Once}); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.err != nil || r.s.Text() != "granted" {
			t.Fatalf("guarded after once: %+v, %v", r.s, r.err)
		}
	})
	t.Run("SIGTERMInterruptsAndLeavesNoProcess", func(t *testing.T) {
		errc := settleBlock(t, t.Context(), a, req.ID, "c6")
		st := p.stop()
		err := <-errc
		var cerr *client.CallError
		if !errors.As(err, &cerr) || cerr.Kind != client.Interrupted || !strings.Contains(cerr.Message, "shutting down") {
			t.Errorf("call in flight at SIGTERM: %v, want an interrupted event", err)
		}
		if !st.Success() {
			t.Errorf("serve exited with %v\n%s", st, p.stderr)
		}
		if !gone(pid) {
			t.Errorf("plugin process %d survived serve", pid)
		}
		if _, err := os.Stat(socket); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left behind: %v", err)
		}
	})
}

type result struct {
	s   *registry.Settlement
	err error
}

func TestServeOverTCPNeedsTheToken(t *testing.T) {
	dir, _ := os.MkdirTemp("", "e2e")
	defer os.RemoveAll(dir)
	tokenFile := filepath.Join(dir, "token")
	p := run(t, "serve", "--tcp", "127.0.0.1:0", "--token-file", tokenFile)
	if !regexp.MustCompile(`^127\.0\.0\.1:\d+$`).MatchString(p.addr) || p.token != tokenFile {
		t.Fatalf("serving on %q, token in %q", p.addr, p.token)
	}
	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v, %v; want 0600", fi.Mode(), err)
	}
	data, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(data))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(token) {
		t.Fatalf("token %q is not 32 random bytes in hex", token)
	}
	for _, tt := range []struct {
		name, token string
		ok          bool
	}{{"Missing", "", false}, {"Wrong", strings.Repeat("ab", 32), false}, {"Right", token, true}} {
		t.Run(tt.name, func(t *testing.T) {
			c := p.dial(t, tt.token)
			_, err := c.ListLocations(t.Context())
			if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, client.ErrUnauthenticated)) {
				t.Fatalf("err %v", err)
			}
		})
	}
	if st := p.stop(); !st.Success() {
		t.Errorf("serve exited with %v\n%s", st, p.stderr)
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("token file left behind: %v", err)
	}
}

func TestServeRefusesTCPBeyondLoopback(t *testing.T) {
	dir, _ := os.MkdirTemp("", "e2e")
	defer os.RemoveAll(dir)
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0"} {
		cmd := exec.Command(toolhostBin, "serve", "--tcp", addr, "--token-file", filepath.Join(dir, "token"))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 64 || !strings.Contains(string(out), "loopback") {
			t.Errorf("serve --tcp %s: %v\n%s", addr, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "token")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a refused serve wrote a token")
	}
}

func TestDevReloadsAChangedBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "plugin")
	copyFile(t, pluginV1, bin)
	ws := workspace(t, bin)
	sockDir, _ := os.MkdirTemp("", "e2e")
	defer os.RemoveAll(sockDir)
	p := run(t, "dev", "--location", ws, "--socket", filepath.Join(sockDir, "s.sock"), "--debounce", "50ms")
	c := p.dial(t, "")
	req, err := c.PrepareRequest(t.Context(), ws, "")
	if err != nil {
		t.Fatal(err)
	}
	version := func() string {
		s, err := c.Settle(t.Context(), req.ID, client.Call{Name: "version", Invocation: inv("v")}, nil)
		if err != nil || s.Outcome != registry.Completed {
			t.Fatalf("version: %+v, %v", s, err)
		}
		return s.Text()
	}
	if v := version(); v != "v1" {
		t.Fatalf("version %q", v)
	}
	locs, _ := c.ListLocations(t.Context())
	old := locs[0].Plugins[0].PID

	copyFile(t, pluginV2, bin)
	proctest.Until(t, func() bool { return strings.Contains(p.stderr.String(), "reload test:") })
	line := p.stderr.String()
	if !regexp.MustCompile(`reload test: plugin changed; start generation 2 [^;]+; swap out generation 1 [^;]+; same contract`).MatchString(line) {
		t.Fatalf("no reload line:\n%s", line)
	}
	// The Request prepared before the reload runs on the new generation.
	if v := version(); v != "v2" {
		t.Fatalf("after the reload the captured Request runs %q", v)
	}
	if !gone(old) {
		t.Error("the old generation's process survived the swap")
	}
	if st := p.stop(); !st.Success() {
		t.Errorf("dev exited with %v\n%s", st, p.stderr)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".new", data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".new", dst); err != nil {
		t.Fatal(err)
	}
}

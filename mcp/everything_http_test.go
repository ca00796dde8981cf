package mcp_test

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/supervise"
)

// startEverythingHTTP runs @modelcontextprotocol/server-everything in its
// streamable HTTP mode on port and waits until it listens. The returned function
// kills it (and waits for it); it is also a cleanup.
func startEverythingHTTP(t *testing.T, path string, port int) (kill func()) {
	t.Helper()
	cmd := exec.Command("node", serverScript("server-everything"), "streamableHttp")
	cmd.Env = []string{"PATH=" + path, "PORT=" + strconv.Itoa(port)}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				close(ready)
				break
			}
		}
		for sc.Scan() {
		}
	}()
	done := false
	kill = func() {
		if done {
			return
		}
		done = true
		cmd.Process.Kill()
		cmd.Wait()
	}
	t.Cleanup(kill)
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("server-everything did not start listening within 30s")
	}
	return kill
}

func freePort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}

func TestEverythingStreamableHTTP(t *testing.T) {
	h := newHost(t)
	port := freePort(t)
	kill := startEverythingHTTP(t, h.path, port)
	sup := h.supervise(h.remote("everything", "http://127.0.0.1:"+strconv.Itoa(port)+"/mcp", func(c *mcp.Config) {
		c.Transport = mcp.TransportStreamable
		c.Budget = supervise.Budget{Crashes: 10, Window: time.Minute, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}
	}))
	first := sup.Current()
	if s := mustSettle(t, h, "everything_echo", `{"message":"over http"}`); s.Text() != "Echo: over http" {
		t.Errorf("echo: %q", s.Text())
	}
	if !h.names()["everything_get-tiny-image"] {
		t.Errorf("tools: %v", h.names())
	}

	// Killed and started again mid-session: the stream cannot be resumed (the new
	// process knows no session), so the generation ends and a new one connects.
	kill()
	startEverythingHTTP(t, h.path, port)
	hosttest.UntilChanged(t, sup.Changed, func() bool { // a new generation runs
		st, _ := sup.State()
		return st == supervise.Running && sup.Current() != first
	})
	if s := mustSettle(t, h, "everything_echo", `{"message":"again"}`); s.Text() != "Echo: again" {
		t.Errorf("echo after restart: %q", s.Text())
	}
}

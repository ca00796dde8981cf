package mcp_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// nodeDir holds the pinned npm packages (npm ci --prefix mcp/testdata/node).
var nodeDir = func() string {
	dir, err := filepath.Abs(filepath.Join("testdata", "node"))
	if err != nil {
		panic(err)
	}
	return dir
}()

// requireNode returns the node binary's directory, for the servers' PATH. Without
// node or the installed packages the test is skipped, except under CI, where it
// fails: CI must not skip these silently.
func requireNode(t testing.TB) string {
	t.Helper()
	missing := func(what string) {
		msg := what + "; install the pinned MCP servers with: npm ci --prefix mcp/testdata/node"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
		}
		t.Skip(msg)
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol")); err != nil {
		missing("mcp/testdata/node/node_modules is missing")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not on PATH")
	}
	return filepath.Dir(node)
}

// serverScript returns the entry point of an installed server package.
func serverScript(pkg string) string {
	return filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")
}

// host is one registry and Location placement with a root scope, closed at the end
// of the test, which then checks that no server process group is left.
type host struct {
	t    *testing.T
	reg  *registry.Registry
	root *scope.Scope
	loc  string
	path string // PATH for node servers

	mu   sync.Mutex
	pids []int
	logs *testio.SyncBuffer
}

func newHost(t *testing.T) *host {
	t.Helper()
	h := newBareHost(t)
	h.path = requireNode(t)
	return h
}

// newBareHost is newHost for servers that need no node (remote servers in Go).
func newBareHost(t *testing.T) *host {
	t.Helper()
	h := &host{t: t, logs: &testio.SyncBuffer{}}
	t.Cleanup(func() { // after the host's own cleanups: its servers are stopped
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, pid := range h.pids {
			proctest.AssertGroupGone(t, pid)
		}
	})
	hh := hosttest.NewHost(t, registry.Options{})
	h.reg, h.root, h.loc = hh.Registry, hh.Root, hh.Location
	return h
}

// config returns a Config for a node server script with args.
func (h *host) config(name, script string, args ...string) mcp.Config {
	return mcp.Config{
		Name:      name,
		Command:   "node",
		Args:      append([]string{script}, args...),
		Env:       map[string]string{"PATH": h.path},
		StopGrace: time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: name, Level: hclog.Debug, Output: h.logs,
		}),
	}
}

// supervise starts a server and records its process group for the final check.
func (h *host) supervise(cfg mcp.Config) *mcp.Supervisor {
	h.t.Helper()
	s, err := mcp.Supervise(h.t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc})
	if err != nil {
		h.t.Fatal(err)
	}
	h.track(s.Current())
	return s
}

func (h *host) track(inst *mcp.Instance) {
	if inst.PID() == 0 {
		return // remote: no process
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pids = append(h.pids, inst.PID())
}

// settle prepares a Request and settles one call on it.
func (h *host) settle(ctx context.Context, name, input string) (*registry.Settlement, error) {
	q, err := h.reg.Prepare(h.loc)
	if err != nil {
		return nil, err
	}
	return q.Settle(ctx, registry.Call{Name: name, Input: []byte(input), Invocation: sdk.Invocation{ToolCallID: "call-1"}})
}

// mustSettle settles a call that must complete.
func mustSettle(t *testing.T, h *host, name, input string) *registry.Settlement {
	t.Helper()
	s, err := h.settle(t.Context(), name, input)
	if err != nil {
		t.Fatalf("settle %s: %v", name, err)
	}
	if s.Outcome != registry.Completed {
		t.Fatalf("settle %s: outcome %s: %s", name, s.Outcome, s.Text())
	}
	return s
}

// names returns the names advertised now. Safe to call from any goroutine.
func (h *host) names() map[string]bool {
	out := map[string]bool{}
	q, err := h.reg.Prepare(h.loc)
	if err != nil {
		h.t.Error(err)
		return out
	}
	for _, d := range q.Definitions() {
		out[d.Name] = true
	}
	return out
}

// waitListed waits until inst has applied a listing for which cond holds.
func waitListed(t *testing.T, inst *mcp.Instance, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for {
		_, next := inst.Listed()
		if cond() {
			return
		}
		select {
		case <-next:
		case <-deadline.C:
			t.Fatalf("condition not met after 15s of listings; tools: %v", inst.Tools())
		}
	}
}

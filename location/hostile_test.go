package location_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/server"
)

// everythingServer returns the pinned MCP server's command line and a PATH with
// node, or skips (fails under CI) when they are missing.
func everythingServer(t testing.TB) (script, path string) {
	script, _ = filepath.Abs("../mcp/testdata/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(script); serr != nil || err != nil {
		msg := "node or the pinned MCP servers are missing; install them with: make test-deps"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return script, filepath.Dir(node) + ":/usr/bin:/bin"
}

// hostileConfig is a Location config with the hostile plugin (untrusted), a
// well-behaved plugin, the pinned MCP server and a manifest tool. mcpPrefix and
// toolPrefix run before the MCP server and in the manifest command (to leave
// processes behind).
func hostileConfig(bin, script, path, mcpPrefix, toolCmd string) obj {
	return obj{
		"plugins": []obj{
			// max_held_bytes: its 100 MiB outputs are over the default budget (82 MiB);
			// retained, they fill the quota.
			{"name": "hostile", "path": bin, "call_timeout": "2m", "sandbox": obj{"memory": "1GiB", "processes": 64}, "max_held_bytes": 128 << 20},
			{"name": "hostile-hang", "path": bin, "call_timeout": "1s", "options": obj{"prefix": "h_"}},
			echoPlugin("echo"),
		},
		"mcp_servers": []obj{{"name": "everything", "command": "sh", "args": []string{"-c", mcpPrefix + "exec node " + script},
			"env": obj{"PATH": path}}},
		"tools": []obj{{"name": "shout", "description": "Upper-cases stdin.", "input_schema": obj{"type": "object"},
			"command": []string{"sh", "-c", toolCmd}, "env": obj{"PATH": path}, "timeout": "1h"}},
		"tool_output": obj{"quota_bytes": 250 << 20},
		"permission":  allowAll,
	}
}

// wellBehaved checks that the Location's well-behaved sources still work.
func wellBehaved(t *testing.T, l *location.Location) {
	t.Helper()
	for _, c := range []struct{ name, input, want string }{
		{"echo", `{"text":"still here"}`, "still here"},
		{"shout", `{"a":"b"}`, `{"A":"B"}`},
		{"everything_echo", `{"message":"hi"}`, "hi"},
	} {
		s, err := settleIn(t, l, c.name, c.input)
		if err != nil || s.Outcome != registry.Completed || !strings.Contains(s.Text()+string(s.Structured), c.want) {
			t.Errorf("well-behaved %s: %v, %v", c.name, s, err)
		}
	}
}

func TestHostilePlugin(t *testing.T) {
	bin := buildHostile(t)
	script, path := everythingServer(t)
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock: an untrusted plugin runs unconfined")
	}
	e := newEnv(t)
	e.opts.SocketDir = t.TempDir()

	// Another Location, with its own secret and plugin sockets.
	other := workspace(t, pluginsConfig(echoPlugin("echo")))
	os.WriteFile(filepath.Join(other, "secret.txt"), []byte("secret of the other Location"), 0o600)
	lo := e.activate(t, other)

	// A serve socket (refusing source processes) and a TCP listener.
	serveLogs := &testio.SyncBuffer{}
	sockDir, _ := os.MkdirTemp("", "hostile-serve-")
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	serveSock := filepath.Join(sockDir, server.SocketName)
	ul, err := server.ListenUnix(serveSock, hclog.New(&hclog.LoggerOptions{Output: serveLogs}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close() })
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	for _, l := range []net.Listener{ul, tl} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("SERVED!!!"))
				c.Close()
			}
		}()
	}

	// The Location under attack, beside a secret outside it.
	parent := canonicalDir(t, t.TempDir())
	os.WriteFile(filepath.Join(parent, "secret-outside.txt"), []byte("outside"), 0o600)
	dir := filepath.Join(parent, "ws")
	os.Mkdir(dir, 0o755)
	setConfig(t, dir, hostileConfig(bin, script, path, "", "tr a-z A-Z"))
	os.WriteFile(filepath.Join(dir, "secret.txt"), []byte("secret"), 0o600)
	l := e.activate(t, dir)
	wellBehaved(t, l)

	var hostilePID, echoPID int
	for _, p := range l.Plugins() {
		inst := p.Current()
		if mode, confined := inst.Containment(); p.Name() == "hostile" && !confined {
			t.Fatalf("the untrusted plugin is not confined (containment %s)", mode)
		}
		if p.Name() == "hostile" {
			hostilePID = inst.PID()
		} else {
			echoPID = inst.PID()
		}
	}
	call := func(t *testing.T, tool string, input any) (*registry.Settlement, error) {
		t.Helper()
		in, _ := json.Marshal(input)
		return settleIn(t, l, tool, string(in))
	}

	t.Run("ACallThatNeverEndsTimesOut", func(t *testing.T) {
		// Before the attack, which also calls the hostile-hang plugin's own server.
		s, err := call(t, "h_hang", obj{})
		if err != nil || s.Outcome != registry.ToolFailed || !strings.Contains(s.Text(), "timeout of 1s") {
			t.Fatalf("hang: %v, %v", s, err)
		}
		t.Log(s.Text())
	})
	t.Run("FilesSocketsAndSignalsAreDenied", func(t *testing.T) {
		unix := append([]string{serveSock}, sockets(t, e.opts.SocketDir)...)
		signals := []int{os.Getpid(), echoPID, lo.Plugins()[0].Current().PID(), l.MCPServers()[0].Current().PID()}
		s, err := call(t, "attack", obj{
			"read":   []string{filepath.Join(other, "secret.txt"), filepath.Join(parent, "secret-outside.txt"), filepath.Join(dir, "secret.txt")},
			"write":  []string{parent, other, dir},
			"tcp":    tl.Addr().String(),
			"unix":   unix,
			"signal": signals,
		})
		if err != nil || s.Outcome != registry.Completed {
			t.Fatalf("attack: %v, %v", s, err)
		}
		var r map[string]string
		if err := json.Unmarshal(s.Structured, &r); err != nil {
			t.Fatal(err)
		}
		attempts := slices.Sorted(maps.Keys(r))
		for _, k := range attempts {
			t.Logf("%-60s %s", k, r[k])
			if !strings.HasPrefix(r[k], "denied: ") && !strings.HasPrefix(r[k], "refused: ") {
				t.Errorf("%s: %s", k, r[k])
			}
		}
		for _, want := range append([]string{"read /etc/hostname", "read ../secret-outside.txt", "tcp dial " + tl.Addr().String() + " (mptcp true)", "tcp listen 127.0.0.1:47123", "udp dial 127.0.0.1:53", "find sockets in /proc/net/unix"}, prefixed("connect ", unix)...) {
			if _, ok := r[want]; !ok {
				t.Errorf("no attempt %q", want)
			}
		}
		for _, pid := range signals {
			if _, ok := r[fmt.Sprint("signal ", pid)]; !ok {
				t.Errorf("no attempt to signal %d", pid)
			}
		}
		// In a world of its own the serve socket does not exist for the plugin;
		// without one its seccomp filter refuses connect(2); elsewhere (the
		// filter off) the server refuses its connection and names it.
		if got := r["connect "+serveSock]; strings.Contains(got, "no such file or directory") {
			t.Logf("the serve socket is not in the plugin's world: %s", got)
		} else if strings.Contains(got, "connect: permission denied") && sandbox.RefusesConnect(sandbox.Spec{Contain: true, Confine: &sandbox.Confinement{}}) {
			t.Logf("the plugin's filter refuses connect(2): %s", got)
		} else if logs := serveLogs.String(); !strings.Contains(logs, "refused a connection from a tool source's process") || !strings.Contains(logs, "source=hostile") {
			t.Errorf("the serve socket's log %q does not name the refused source", logs)
		}
	})
	t.Run("TakingReadIsRefusedNamingTheBuiltin", func(t *testing.T) {
		s, err := call(t, "register", obj{"names": []string{"read"}})
		if err != nil || !strings.HasPrefix(s.Text(), "refused") || !strings.Contains(s.Text(), "belongs to builtin") {
			t.Fatalf("register read: %v, %v", s, err)
		}
		t.Log(s.Text())
	})
	t.Run("TenThousandToolsAreRefused", func(t *testing.T) {
		s, err := call(t, "register", obj{"count": 10000})
		if err != nil || !strings.HasPrefix(s.Text(), "refused") || !strings.Contains(s.Text(), "max_tools") {
			t.Fatalf("register 10000: %v, %v", s, err)
		}
		t.Log(s.Text())
	})
	t.Run("RepeatedHugeOutputsHitTheQuota", func(t *testing.T) {
		for i := range 3 {
			s, err := call(t, "flood", obj{"mib": 100})
			if i < 2 {
				if err != nil || len(s.ManagedPaths) != 1 {
					t.Fatalf("flood %d: %v, %v; want it retained", i, s, err)
				}
				continue
			}
			if s != nil || !errors.Is(err, registry.ErrQuotaExceeded) || !strings.Contains(err.Error(), fmt.Sprint(250<<20)) {
				t.Fatalf("flood %d: %v, %v; want the quota exceeded", i, s, err)
			}
			t.Log(err)
		}
	})
	t.Run("AForkBombStopsAtTheProcessesCap", func(t *testing.T) {
		if os.Geteuid() == 0 && !sandbox.PidsCgroupAvailable() {
			t.Skip("root without a pids cgroup: the processes cap does not hold here")
		}
		s, err := call(t, "forkbomb", obj{})
		if err != nil {
			// Refused a thread of its own, its runtime may die instead: then of that
			// refusal, with the limits named.
			if !strings.Contains(err.Error(), "processes 64") || !strings.Contains(err.Error(), "failed to create new OS thread") {
				t.Fatalf("forkbomb: %v; want EAGAIN, or its runtime's death for want of a thread with the processes limit named", err)
			}
			t.Log(err)
			return
		}
		got := strings.Trim(s.Text(), `"`)
		var n int
		if _, err := fmt.Sscanf(got, "started %d, then refused", &n); err != nil || n >= 64 || !strings.Contains(got, "resource temporarily unavailable") {
			t.Fatalf("forkbomb: %q; want fewer than 64 processes, then EAGAIN", got)
		}
		t.Log(got)
	})
	t.Run("UnboundedAllocationIsKilledByTheMemoryLimit", func(t *testing.T) {
		marker := proctest.NewMarker()
		if s, err := call(t, "spawn", obj{"marker": marker}); err != nil || s.Outcome != registry.Completed {
			t.Fatalf("spawn: %v, %v", s, err)
		}
		proctest.WaitMarked(t, marker, 3)
		_, err := call(t, "alloc", obj{})
		if err == nil || !strings.Contains(err.Error(), "memory 1GiB (RLIMIT_DATA)") {
			t.Fatalf("alloc: %v; want an error naming the memory limit", err)
		}
		t.Log(err)
		// The plugin's death ended what it left behind.
		proctest.AssertMarkedGone(t, marker)
	})
	t.Run("WellBehavedSourcesKeepWorking", func(t *testing.T) {
		wellBehaved(t, l)
		if proctest.Running(hostilePID) {
			t.Errorf("the hostile plugin's first process %d is still running", hostilePID)
		}
	})
}

func prefixed(p string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p + s
	}
	return out
}

// The leftover processes of each kind of source: the hostile plugin's (a shell's
// background child, a setsid'd one, a double-forked setsid'd one, a sleep in a
// session of its own that ignores SIGTERM, SIGHUP and SIGINT, and a child
// subreaper that ignores them too with the double-forked grandchild it adopted),
// the MCP server command's (a background and a setsid'd child) and an in-flight
// manifest call's (a background child, a setsid'd one, and the command itself).
const leftovers = 6 + 2 + 3

func leftoverConfig(t *testing.T, marker string) string {
	bin := buildHostile(t)
	script, path := everythingServer(t)
	sleep := "sleep " + marker
	return workspace(t, hostileConfig(bin, script, path, sleep+" & setsid "+sleep+" & ",
		sleep+" & setsid "+sleep+" & "+sleep))
}

// leave makes l's sources leave processes marked marker behind, and starts an
// in-flight manifest call.
func leave(ctx context.Context, l *location.Location, marker string) error {
	q, err := l.Prepare()
	if err != nil {
		return err
	}
	if _, err := q.Settle(ctx, registry.Call{Name: "spawn", Input: json.RawMessage(`{"marker":"` + marker + `"}`)}); err != nil {
		return err
	}
	go q.Settle(ctx, registry.Call{Name: "shout", Input: json.RawMessage(`{}`)})
	return nil
}

// editShout edits the manifest tool shout's description in dir's config and
// reloads l, once the processes marked marker that leave makes are all running:
// the call of shout that leave started is then in flight on the old definition,
// which drains while the new one serves.
func editShout(ctx context.Context, l *location.Location, dir, marker string) error {
	for len(proctest.Marked(marker)) < leftovers {
		time.Sleep(10 * time.Millisecond) // a helper process has no test to poll with
	}
	file := filepath.Join(dir, location.ConfigPath)
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	edited := strings.Replace(string(data), "Upper-cases stdin.", "Upper-cases stdin, as edited.", 1)
	if edited == string(data) {
		return errors.New("no shout description to edit in " + file)
	}
	if err := os.WriteFile(file, []byte(edited), 0o644); err != nil {
		return err
	}
	return l.Reload(ctx)
}

// TestSourceTreesEnd: every process a source leaves behind ends when its Location
// is deactivated or its host is SIGKILLed, also while a changed manifest tool's call
// is still draining on its old definition after a reload; in each containment
// mode, and in the namespace mode without a world too (the confined plugin then
// starts from a host thread or a launcher, see the design's Fallback).
func TestSourceTreesEnd(t *testing.T) {
	for _, c := range []struct {
		mode  sandbox.Mode
		world bool
	}{{sandbox.ModeNamespace, true}, {sandbox.ModeNamespace, false}, {sandbox.ModeCgroup, true}, {sandbox.ModeSubreaper, true}} {
		mode, name := c.mode, string(c.mode)
		if !c.world {
			name += "WithoutWorld"
		}
		t.Run(name, func(t *testing.T) {
			if err := sandbox.Supported(mode); err != nil {
				t.Skip(err)
			}
			if !c.world {
				t.Setenv(sandbox.OffEnv, "world") // the helper host inherits it
			}
			for _, drain := range []bool{false, true} {
				name := ""
				if drain {
					name = "DuringDrain"
				}
				t.Run(name+"OnDeactivation", func(t *testing.T) {
					marker := proctest.NewMarker()
					dir := leftoverConfig(t, marker)
					e := newEnv(t)
					e.opts.SandboxMode = sandboxcfg.Mode(mode)
					l := e.activate(t, dir)
					if err := leave(t.Context(), l, marker); err != nil {
						t.Fatal(err)
					}
					proctest.WaitMarked(t, marker, leftovers)
					if drain {
						if err := editShout(t.Context(), l, dir, marker); err != nil {
							t.Fatal(err)
						}
						if n := len(proctest.Marked(marker)); n < leftovers {
							t.Errorf("%d of the %d processes left after the edit of shout: its call in flight was interrupted", n, leftovers)
						}
					}
					for _, m := range l.MCPServers() {
						if got, _ := m.Current().Containment(); got != sandboxcfg.Mode(mode) {
							t.Errorf("MCP server containment %s, want %s", got, mode)
						}
					}
					if err := l.Close(context.Background()); err != nil {
						t.Fatal(err)
					}
					proctest.AssertMarkedGone(t, marker)
				})
				t.Run(name+"AfterHostSIGKILL", func(t *testing.T) {
					marker := proctest.NewMarker()
					dir := leftoverConfig(t, marker)
					self, _ := os.Executable()
					host := exec.Command(self, "-test.run=^$")
					host.Env = append(os.Environ(), "LOCATION_HELPER=host", "LOCATION_DIR="+dir, "LOCATION_MARKER="+marker,
						"LOCATION_MODE="+string(mode), "LOCATION_BUILD_CACHE="+buildCache, fmt.Sprintf("LOCATION_DRAIN=%t", drain))
					out, _ := host.StdoutPipe()
					host.Stderr = os.Stderr
					if err := host.Start(); err != nil {
						t.Fatal(err)
					}
					if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
						host.Process.Kill()
						host.Wait()
						t.Fatalf("host said %q", line)
					}
					proctest.WaitMarked(t, marker, leftovers)
					host.Process.Kill()
					host.Wait()
					proctest.AssertMarkedGone(t, marker)
				})
			}
		})
	}
}

// helperHost is the test binary as a host that activates LOCATION_DIR, leaves
// processes behind (see leave), says "ready" and waits to be SIGKILLed.
func helperHost() {
	fail := func(err error) {
		fmt.Println(err)
		os.Exit(1)
	}
	st, err := registry.OpenStorage(filepath.Join(os.Getenv("LOCATION_DIR"), ".storage"), registry.StorageOptions{})
	if err != nil {
		fail(err)
	}
	reg, err := registry.New(registry.Options{Storage: st})
	if err != nil {
		fail(err)
	}
	root := scope.New(context.Background())
	l, err := location.Activate(context.Background(), root, os.Getenv("LOCATION_DIR"), location.Options{
		Registry: reg, BuildCache: os.Getenv("LOCATION_BUILD_CACHE"), Env: []string{},
		StateDir: filepath.Join(os.Getenv("LOCATION_DIR"), ".state"), SandboxMode: sandboxcfg.Mode(os.Getenv("LOCATION_MODE")),
	})
	if err != nil {
		fail(err)
	}
	if err := leave(context.Background(), l, os.Getenv("LOCATION_MARKER")); err != nil {
		fail(err)
	}
	if os.Getenv("LOCATION_DRAIN") == "true" {
		if err := editShout(context.Background(), l, os.Getenv("LOCATION_DIR"), os.Getenv("LOCATION_MARKER")); err != nil {
			fail(err)
		}
	}
	fmt.Println("ready")
	time.Sleep(time.Hour) // until the test kills it
}

//go:build unix

package plugins_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/proctest"
	isandbox "github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

var faultBinary string

func TestMain(m *testing.M) {
	if os.Getenv("PLUGINS_TEST_HOST") != "" {
		runHostProcess()
		return
	}
	hosttest.Main(m, map[string]*string{"./testdata/fault": &faultBinary})
}

// host is one registry and Location placement with a root scope, closed (and checked
// for leftover processes) at the end of the test.
type host struct {
	t    *testing.T
	reg  *registry.Registry
	root *scope.Scope
	loc  string
	mu   sync.Mutex
	pids []int
}

func newHost(t *testing.T) *host {
	t.Helper()
	h := &host{t: t}
	t.Cleanup(func() { // after the host's own cleanups: its processes are stopped
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, pid := range h.pids {
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("plugin process %d still exists after close (kill 0: %v)", pid, err)
			}
		}
	})
	hh := hosttest.NewHost(t, registry.Options{})
	h.reg, h.root, h.loc = hh.Registry, hh.Root, hh.Location
	return h
}

func (h *host) config(env map[string]string, mode string) plugins.Config {
	cfg := plugins.Config{Name: "fault", Path: faultBinary, Env: env, StartTimeout: 5 * time.Second, StopGrace: 2 * time.Second}
	if mark := env["FAULT_MARK"]; mark != "" {
		// Untrusted plugins are confined: the mark's directory must be granted.
		cfg.Sandbox.Confine = &sandbox.Confinement{Write: []string{filepath.Dir(mark)}}
	}
	if mode != "" {
		cfg.Options = json.RawMessage(fmt.Sprintf(`{"mode":%q}`, mode))
	}
	return cfg
}

func (h *host) target() plugins.Target {
	return plugins.Target{Registry: h.reg, Location: h.loc, Directory: h.loc}
}

func (h *host) supervise(cfg plugins.Config, budget supervise.Budget) (*plugins.Supervisor, error) {
	s, err := plugins.Supervise(context.Background(), h.root, cfg, h.target(), budget)
	if err == nil {
		h.track(s.Current())
	}
	return s, err
}

func (h *host) track(inst *plugins.Instance) {
	h.mu.Lock()
	h.pids = append(h.pids, inst.PID())
	h.mu.Unlock()
}

func (h *host) call(ctx context.Context, name, input string) (*registry.Settlement, error) {
	q, err := h.reg.Prepare(h.loc)
	if err != nil {
		h.t.Fatal(err)
	}
	return q.Settle(ctx, registry.Call{Name: name, Input: json.RawMessage(input), Invocation: sdk.Invocation{ToolCallID: "c1"}})
}

func (h *host) mustCall(name, input string) *registry.Settlement {
	h.t.Helper()
	s, err := h.call(context.Background(), name, input)
	if err != nil {
		h.t.Fatalf("call %s: %v", name, err)
	}
	return s
}

func TestPluginServesTools(t *testing.T) {
	t.Setenv("HOST_ONLY", "leaked")
	h := newHost(t)
	if _, err := h.supervise(h.config(map[string]string{"PLUGIN_SECRET": "s3"}, ""), supervise.Budget{}); err != nil {
		t.Fatal(err)
	}
	if s := h.mustCall("echo", `{"text":"hello"}`); s.Text() != "hello" {
		t.Fatalf("echo = %+v", s)
	}
	t.Run("ExplicitEnvironmentOnly", func(t *testing.T) {
		if got := h.mustCall("location", `{}`).Text(); got != h.loc+"|s3|" {
			t.Fatalf("plugin saw %q, want the Location dir, its own env and none of the host's", got)
		}
	})
	t.Run("HostTokenOncePerConnection", func(t *testing.T) {
		// The host presented its token when the connection opened
		// (pluginpb.ConnTokenVersion), not in every call's header.
		if got := h.mustCall("headers", `{}`).Text(); strings.Contains(got, "toolhost-host-token") || !strings.Contains(got, "content-type") {
			t.Fatalf("the call's header keys are %q", got)
		}
	})
	t.Run("StructuredResultAndProjectionCross", func(t *testing.T) {
		// Not a lone output: the plugin sends it as events, not CallResult.output.
		s := h.mustCall("shaped", `{}`)
		if s.Outcome != registry.Completed || s.Text() != `projected {"n":1,"more":"x"}` || string(s.Structured) != `{"n":1}` {
			t.Fatalf("settlement = %+v, structured %s", s, s.Structured)
		}
	})
	t.Run("ToolFailureCrossesAsStructuredField", func(t *testing.T) {
		s := h.mustCall("fail", `{}`)
		if s.Outcome != registry.ToolFailed || s.Text() != "disk quota exceeded" {
			t.Fatalf("settlement = %+v", s)
		}
	})
	t.Run("PanicIsADefect", func(t *testing.T) {
		_, err := h.call(context.Background(), "panic", `{}`)
		var defect *registry.DefectError
		if !errors.As(err, &defect) || !strings.Contains(fmt.Sprint(defect.Value), "kaboom") || !strings.Contains(string(defect.Stack), "main.") {
			t.Fatalf("err = %v, want a defect with the plugin's panic and stack", err)
		}
		if op := (*registry.OperationalError)(nil); errors.As(err, &op) {
			t.Fatalf("err = %v, want a *registry.DefectError, not an operational error", err)
		}
		if s := h.mustCall("echo", `{"text":"still up"}`); s.Text() != "still up" {
			t.Fatal("plugin did not survive a panicking tool")
		}
	})
	t.Run("AfterHooksRunOnPluginCalls", func(t *testing.T) {
		release, err := h.reg.AddHook(h.loc, func(_ context.Context, call registry.Call, s *registry.Settlement) (*registry.Settlement, error) {
			s.Content = append(s.Content, sdk.Text(" [audited "+call.Name+"]"))
			return s, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if got := h.mustCall("echo", `{"text":"x"}`).Text(); got != "x [audited echo]" {
			t.Fatalf("text = %q, want the hook's addition", got)
		}
	})
	t.Run("ProgressEvents", func(t *testing.T) {
		q, _ := h.reg.Prepare(h.loc)
		var mu sync.Mutex
		var got []string
		s, err := q.Settle(t.Context(), registry.Call{Name: "progress", Progress: func(p sdk.Progress) {
			mu.Lock()
			got = append(got, fmt.Sprintf("%v/%v %s", p.Progress, p.Total, p.Message))
			mu.Unlock()
		}})
		if err != nil || s.Text() != "done" {
			t.Fatal(s, err)
		}
		if strings.Join(got, ",") != "1/3 step 1,2/3 step 2,3/3 step 3" {
			t.Fatalf("progress = %v", got)
		}
	})
	t.Run("RuntimeClosedRegistrationRevealsEarlier", func(t *testing.T) {
		if got := h.mustCall("toggle", `{}`).Text(); got != "registered" {
			t.Fatal(got)
		}
		if got := h.mustCall("echo", `{"text":"hi"}`).Text(); got != "HI" {
			t.Fatalf("override not in effect: %q", got)
		}
		if got := h.mustCall("toggle", `{}`).Text(); got != "closed" {
			t.Fatal(got)
		}
		if got := h.mustCall("echo", `{"text":"hi"}`).Text(); got != "hi" {
			t.Fatalf("closing the override did not reveal the earlier echo: %q", got)
		}
	})
	t.Run("LargeOutputIsStreamedAndBounded", func(t *testing.T) {
		const size = 64 << 20
		s := h.mustCall("big", fmt.Sprintf(`{"bytes":%d}`, size))
		if s.Outcome != registry.Completed || len(s.ManagedPaths) != 1 {
			t.Fatalf("outcome %s, managed %v", s.Outcome, s.ManagedPaths)
		}
		if len(s.Text()) > registry.DefaultLimits().MaxBytes || !strings.Contains(s.Text(), s.ManagedPaths[0]) {
			t.Fatalf("preview of %d bytes does not stay bounded or name the file", len(s.Text()))
		}
		info, err := os.Stat(s.ManagedPaths[0])
		if err != nil || info.Size() != size {
			t.Fatalf("retained file: %v, %v; want %d bytes", info, err, size)
		}
	})
}

// TestOlderSDKPluginServes runs a plugin as an older sdk built it (testdata/oldsdk):
// protocol version 1, the host token in a header on every call, and results as
// events although the host asks for flat results.
func TestOlderSDKPluginServes(t *testing.T) {
	bin := oldSDKBinary(t)
	if isandbox.RefusesConnect(isandbox.Spec{Contain: true, Confine: &isandbox.Confinement{}}) {
		t.Skip("its sandbox would refuse connect(2) here (no world): TestOlderSDKPluginFailsClearlyWithoutAWorld")
	}
	h := newHost(t)
	if _, err := h.supervise(plugins.Config{Name: "oldsdk", Path: bin, StartTimeout: 5 * time.Second, StopGrace: 2 * time.Second}, supervise.Budget{}); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"hello", "again"} {
		if s := h.mustCall("echo", `{"text":"`+text+`"}`); s.Outcome != registry.Completed || s.Text() != "old: "+text {
			t.Fatalf("echo = %+v", s)
		}
	}
}

// oldSDKBinary builds testdata/oldsdk.
func oldSDKBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(filepath.Dir(faultBinary), "oldsdk")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/oldsdk").CombinedOutput(); err != nil {
		t.Fatalf("build oldsdk: %v\n%s", err, out)
	}
	return bin
}

// TestOlderSDKPluginFailsClearlyWithoutAWorld: where a plugin's sandbox refuses
// connect(2) (no world), the host multiplexes its connections to the plugin over
// one, which a plugin built with an older sdk refuses (it checks every
// connection's peer pid): it does not start, and the error names it and says to
// rebuild it.
func TestOlderSDKPluginFailsClearlyWithoutAWorld(t *testing.T) {
	t.Setenv(isandbox.OffEnv, "world")
	if !isandbox.RefusesConnect(isandbox.Spec{Contain: true, Confine: &isandbox.Confinement{}}) {
		t.Skip("no seccomp filter here")
	}
	bin := oldSDKBinary(t)
	h := newHost(t)
	_, err := plugins.Start(context.Background(), h.root, plugins.Config{Name: "oldsdk", Path: bin, StartTimeout: 5 * time.Second, StopGrace: 2 * time.Second}, h.target(), 1)
	var se *plugins.StartError
	if !errors.As(err, &se) || se.Plugin != "oldsdk" || !strings.Contains(err.Error(), "rebuild it with the current sdk") {
		t.Fatalf("start: %v; want a StartError naming oldsdk and saying to rebuild it", err)
	}
	t.Log(err)
}

func TestCancellationReachesThePlugin(t *testing.T) {
	h := newHost(t)
	mark := filepath.Join(t.TempDir(), "mark")
	if _, err := h.supervise(h.config(map[string]string{"FAULT_MARK": mark}, ""), supervise.Budget{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := h.call(ctx, "wait", `{}`)
		errc <- err
	}()
	proctest.Until(t, func() bool { _, err := os.Stat(mark + ".started"); return err == nil })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want an interruption", err)
	}
	proctest.Until(t, func() bool { data, _ := os.ReadFile(mark); return string(data) == "cancelled" })
}

func TestDeactivationInterruptsAndLeavesNoProcess(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 2)
	for _, name := range []string{"wait", "stubborn"} {
		go func() {
			_, err := h.call(context.Background(), name, `{}`)
			errc <- err
		}()
	}
	proctest.Until(t, func() bool { return s.Current().InFlight() == 2 })
	pid := s.Current().PID()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; !errors.Is(err, context.Canceled) || !errors.Is(err, scope.ErrClosed) {
			t.Fatalf("in-flight call ended with %v, want an interruption", err)
		}
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("plugin %d survived its scope (even the stubborn call must not keep it): %v", pid, err)
	}
	q, _ := h.reg.Prepare(h.loc)
	if len(q.Definitions()) != 0 {
		t.Fatalf("tools left after deactivation: %v", q.Definitions())
	}
}

// hostPIDOf translates a pid the fault plugin reported: in a world of its own it
// reports -(PID namespace inode * 100000 + its pid there), which the host finds in
// its own /proc; 0 when no such process is left.
func hostPIDOf(v int) int {
	if v >= 0 {
		return v
	}
	ns, nspid := fmt.Sprintf("pid:[%d]", -v/100000), strconv.Itoa(-v%100000)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if l, _ := os.Readlink("/proc/" + e.Name() + "/ns/pid"); l != ns {
			continue
		}
		status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		for line := range strings.Lines(string(status)) {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" && f[len(f)-1] == nspid {
				pid, _ := strconv.Atoi(e.Name())
				return pid
			}
		}
	}
	return 0
}

// reportedPID is how the fault plugin running as host pid reports its pid (see
// hostPIDOf): pid itself, or its encoding where it runs in a world of its own.
func reportedPID(pid int) int {
	mnt, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if own, _ := os.Readlink("/proc/self/ns/mnt"); mnt == own { // not in a world
		return pid
	}
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	var inode int
	if _, err := fmt.Sscanf(ns, "pid:[%d]", &inode); err != nil {
		return pid
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "NSpid:" {
			nspid, _ := strconv.Atoi(f[len(f)-1])
			return -(inode*100000 + nspid)
		}
	}
	return pid
}

func TestCrashLeavesNoProcess(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	var child int // setsid: out of the plugin's process group
	if err := json.Unmarshal(h.mustCall("spawn", `{}`).Structured, &child); err != nil || child == 0 {
		t.Fatalf("spawn: %v", err)
	}
	child = hostPIDOf(child)
	gen := s.Current()
	h.call(context.Background(), "crash", `{}`)
	<-gen.Done()
	proctest.Until(t, func() bool { return !proctest.Running(child) })
}

func TestStopKillsTheProcessGroupAfterGrace(t *testing.T) {
	h := newHost(t)
	cfg := h.config(map[string]string{"FAULT": "linger", "PATH": os.Getenv("PATH")}, "")
	cfg.StopGrace = 200 * time.Millisecond
	s, err := h.supervise(cfg, supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	if err := json.Unmarshal(h.mustCall("spawn", `{}`).Structured, &child); err != nil || child == 0 {
		t.Fatalf("spawn: %v", err)
	}
	child = hostPIDOf(child)
	pid := s.Current().PID()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("a plugin that ignores the stop request survived its grace: %v", err)
	}
	// The child is not ours to reap, so it may linger as a zombie until init does;
	// what matters is that it was killed: it is no longer running.
	proctest.Until(t, func() bool { return !proctest.Running(child) })
}

func TestCrashRestartsUnderBudget(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{Crashes: 1, MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	first := s.Current()
	_, err = h.call(context.Background(), "crash", `{}`)
	var op *registry.OperationalError
	var crash *supervise.CrashError
	if !errors.As(err, &op) || !errors.As(err, &crash) || crash.Kind != "plugin" || crash.Name != "fault" || !strings.Contains(crash.Status, "exit status 7") {
		t.Fatalf("err = %v, want an operational error naming the plugin and its exit status", err)
	}
	proctest.Until(t, func() bool { return s.Current() != first })
	second := s.Current()
	h.track(second)
	proctest.Until(t, func() bool { st, _ := s.State(); return st == supervise.Running })
	if second.Generation() != first.Generation()+1 {
		t.Fatalf("generation %d after %d", second.Generation(), first.Generation())
	}
	if got := h.mustCall("echo", `{"text":"back"}`).Text(); got != "back" {
		t.Fatalf("restarted plugin answered %q", got)
	}
	// A second crash within the window spends the budget: the plugin stays failed.
	h.call(context.Background(), "crash", `{}`)
	proctest.Until(t, func() bool { st, _ := s.State(); return st == supervise.Failed })
	_, why := s.State()
	if why == nil || !strings.Contains(why.Error(), "not restarting") {
		t.Fatalf("failed state says %v", why)
	}
	if got := h.mustCall("echo", `{}`); got.Outcome != registry.Unknown {
		t.Fatalf("a failed plugin's tools are still advertised: %s", got.Outcome)
	}
}

// TestActivationAtStart: a plugin activates as it starts (the request in its
// environment, the outcome on its standard output), and what it prints to standard
// output while it activates goes to standard error, not into its handshake. A
// request too large for the environment goes with an Activate call instead.
func TestActivationAtStart(t *testing.T) {
	h := newHost(t)
	s, err := h.supervise(h.config(nil, "chatty_activate"), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.mustCall("echo", `{"text":"hi"}`).Text(); got != "hi" {
		t.Fatalf("echo answered %q", got)
	}
	proctest.Until(t, func() bool { return strings.Contains(s.Current().Stderr(), "activating, chattily") })

	// Over pluginpb.MaxStartActivationRequest: the options still arrive whole.
	cfg := h.config(nil, "")
	cfg.Options = json.RawMessage(`{"mode":"fail_activate","pad":"` + strings.Repeat("x", 70<<10) + `"}`)
	if _, err := h.supervise(cfg, supervise.Budget{}); err == nil || !strings.Contains(err.Error(), "its activation failed: missing API key") {
		t.Fatalf("err = %v, want the activation's own failure", err)
	}
}

func TestStartFaults(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		mode string
		cfg  func(*plugins.Config)
		want []string
	}{
		{"WrongHandshake", map[string]string{"FAULT": "wrong_handshake"}, "", nil, []string{"speaking the wrong protocol"}},
		{"StdoutNoiseBeforeHandshake", map[string]string{"FAULT": "stdout_noise"}, "", nil, []string{"hello from a plugin that prints before the handshake"}},
		{"ExitsBeforeHandshake", map[string]string{"FAULT": "exit_early"}, "", nil, []string{"permission denied"}},
		{"NeverAnswers", map[string]string{"FAULT": "never_answer"}, "", func(c *plugins.Config) { c.StartTimeout = 300 * time.Millisecond }, []string{"timeout", "never answering"}},
		{"ActivationHangs", nil, "hang_activate", func(c *plugins.Config) { c.StartTimeout = 300 * time.Millisecond }, []string{"start timeout"}},
		{"ActivationFails", nil, "fail_activate", nil, []string{`plugin "fault" did not start: its activation failed: missing API key`}},
		// Activated as it starts (pluginpb.StartActivationVersion): it exits before its handshake.
		{"ExitsDuringActivation", nil, "exit_activate", nil, []string{"exited before it finished its activation (exit status 4", "cannot open the cache database"}},
		{"MalformedActivationLine", map[string]string{"FAULT": "fake_activation"}, "", nil, []string{"its activation failed: malformed activation line"}},
		{"InvalidSchemaFromPlugin", nil, "bad_schema", nil, []string{`"broken"`, "plugin fault"}},
		{"InvalidNameFromPlugin", nil, "bad_name", nil, []string{`"9lives"`, "plugin fault"}},
		{"ChecksumMismatch", nil, "", func(c *plugins.Config) { c.SHA256 = strings.Repeat("0", 64) }, []string{`plugins: plugin "fault" did not start: checksum mismatch: `, "refusing to start"}},
		{"MissingBinary", nil, "", func(c *plugins.Config) { c.Path = "/nonexistent/plugin" }, []string{"no such file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			cfg := h.config(tt.env, tt.mode)
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			_, err := h.supervise(cfg, supervise.Budget{})
			var serr *plugins.StartError
			if !errors.As(err, &serr) || serr.Plugin != "fault" {
				t.Fatalf("err = %v, want a *StartError naming the plugin", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
			for _, code := range []string{"(Aborted)", "(Unavailable)", "activate: activate"} {
				if strings.Contains(err.Error(), code) {
					t.Errorf("error meant for a person contains %q:\n%v", code, err)
				}
			}
			q, _ := h.reg.Prepare(h.loc)
			if len(q.Definitions()) != 0 {
				t.Fatalf("a failed start left tools: %v", q.Definitions())
			}
		})
	}
	t.Run("ChecksumMatchStarts", func(t *testing.T) {
		h := newHost(t)
		cfg := h.config(nil, "")
		cfg.SHA256 = digest(t, faultBinary)
		if _, err := h.supervise(cfg, supervise.Budget{}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTwoLocationsAreIsolated(t *testing.T) {
	h1, h2 := newHost(t), newHost(t)
	s1, err := h1.supervise(h1.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h2.supervise(h2.config(nil, ""), supervise.Budget{}); err != nil {
		t.Fatal(err)
	}
	pid1, pid2 := h1.mustCall("whoami", `{}`), h2.mustCall("whoami", `{}`)
	if string(pid1.Structured) == string(pid2.Structured) {
		t.Fatal("two Locations share one plugin process")
	}
	h1.mustCall("toggle", `{}`) // override echo in the first Location only
	if got := h2.mustCall("echo", `{"text":"x"}`).Text(); got != "x" {
		t.Fatalf("a registration in one Location changed another: %q", got)
	}
	s1.Close(context.Background())
	if got := h2.mustCall("echo", `{"text":"y"}`).Text(); got != "y" {
		t.Fatal("closing one Location broke the other")
	}
}

// runHostProcess is the test binary re-executed as a host: it starts the plugin named
// by PLUGINS_TEST_HOST, prints the plugin's pid and waits to be killed.
func runHostProcess() {
	st, _ := registry.OpenStorage(os.Getenv("PLUGINS_TEST_STORE"), registry.StorageOptions{})
	reg, _ := registry.New(registry.Options{Storage: st})
	dir := os.Getenv("PLUGINS_TEST_STORE")
	reg.OpenLocation(dir, registry.Limits{})
	s, err := plugins.Supervise(context.Background(), scope.New(context.Background()),
		plugins.Config{Name: "fault", Path: os.Getenv("PLUGINS_TEST_HOST")},
		plugins.Target{Registry: reg, Location: dir, Directory: dir}, supervise.Budget{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(s.Current().PID())
	time.Sleep(time.Hour) // until the test kills it
}

func TestPluginExitsWhenItsHostDies(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "PLUGINS_TEST_HOST="+faultBinary, "PLUGINS_TEST_STORE="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Fscan(out, &pid); err != nil || pid == 0 {
		cmd.Process.Kill()
		t.Fatalf("host did not report its plugin: %v", err)
	}
	if !proctest.Running(pid) {
		t.Fatal("plugin not running under the host")
	}
	cmd.Process.Kill() // SIGKILL: the host gets no chance to stop its plugin
	cmd.Wait()
	proctest.Until(t, func() bool { return !proctest.Running(pid) })
}

func TestDebugModeReattach(t *testing.T) {
	h := newHost(t)
	cmd := exec.Command(faultBinary, "-debug")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var line string
	buf := make([]byte, 4096)
	for !strings.Contains(line, "}'") {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("reading the reattach line: %v (got %q)", err, line)
		}
		line += string(buf[:n])
	}
	value := line[strings.Index(line, pluginpb.ReattachEnv+"='")+len(pluginpb.ReattachEnv)+2:]
	value = value[:strings.Index(value, "'")]
	m, err := pluginpb.ParseReattach(value)
	if err != nil {
		t.Fatal(err)
	}
	rc, ok := m["fault"]
	if !ok || rc.Pid != cmd.Process.Pid {
		t.Fatalf("reattach line %q does not name the fault binary and its pid", value)
	}
	cfg := h.config(nil, "")
	cfg.Reattach = &plugins.Reattach{Pid: rc.Pid, Network: rc.Network, Address: rc.Address}
	// The debug process serves one host after another, each with a fresh activation.
	for attach := range 3 {
		s, err := plugins.Supervise(context.Background(), h.root, cfg, h.target(), supervise.Budget{})
		if err != nil {
			t.Fatalf("attach %d: %v", attach+1, err)
		}
		if got := h.mustCall("echo", `{"text":"debugging"}`).Text(); got != "debugging" {
			t.Fatalf("attach %d: echo through the reattached plugin = %q", attach+1, got)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !proctest.Running(cmd.Process.Pid) {
			t.Fatal("closing a reattached plugin killed a process the host does not own")
		}
	}
}

func TestDefaultSocketDir(t *testing.T) {
	dir := plugins.DefaultSocketDir()
	if want := []string{os.Getenv("XDG_RUNTIME_DIR"), "/dev/shm", os.TempDir()}; !slices.Contains(want, dir) || dir == "" {
		t.Fatalf("DefaultSocketDir() = %q, want one of %q", dir, want)
	}
	// With no SocketDir configured, the plugin's private directory (go-plugin tells
	// the plugin its path in PLUGIN_UNIX_SOCKET_DIR) is made there, and removed when
	// the plugin stops.
	h := newHost(t)
	s, err := h.supervise(h.config(nil, ""), supervise.Budget{})
	if err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.Current().PID()))
	if err != nil {
		t.Fatal(err)
	}
	var private string
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, "PLUGIN_UNIX_SOCKET_DIR="); ok {
			private = v
		}
	}
	if filepath.Dir(private) != dir {
		t.Fatalf("the plugin's socket directory %q is not in %s", private, dir)
	}
	if info, err := os.Stat(private); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v; want mode 0700", private, info, err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(private); !os.IsNotExist(err) {
		t.Errorf("%s is left after the plugin stopped (%v)", private, err)
	}
}

func TestSocketsArePrivate(t *testing.T) {
	h := newHost(t)
	cfg := h.config(nil, "")
	cfg.SocketDir = t.TempDir()
	if _, err := h.supervise(cfg, supervise.Budget{}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(cfg.SocketDir)
	// Multiplexed (its sandbox refuses connect(2)), the host links the plugin's
	// socket into a private directory of its own too.
	want := 1
	if isandbox.RefusesConnect(isandbox.Spec{Contain: true, Confine: &isandbox.Confinement{}}) {
		want = 2
	}
	if err != nil || len(entries) != want {
		t.Fatalf("socket dir holds %v (%v), want %d private directories", entries, err, want)
	}
	var dir string
	for _, e := range entries {
		d := filepath.Join(cfg.SocketDir, e.Name())
		if info, _ := os.Stat(d); info.Mode().Perm() != 0o700 {
			t.Fatalf("%s has mode %v, want 0700", d, info.Mode().Perm())
		}
		if strings.HasPrefix(e.Name(), "plugin-dir") {
			dir = d
		}
	}
	sockets, _ := os.ReadDir(dir)
	var n int
	for _, e := range sockets {
		if e.Type()&os.ModeSocket != 0 {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no sockets in %s: the plugin does not listen in its private directory", dir)
	}
}

func digest(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// TestSocketDirTooLongFailsClearly: a socket directory under which go-plugin's
// socket path would exceed a unix socket address fails the start with a
// *SocketDirError naming the directory, not with bind's "invalid argument" from the
// plugin's stderr.
func TestSocketDirTooLongFailsClearly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 100))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	h := newHost(t)
	cfg := h.config(nil, "")
	cfg.SocketDir = dir
	_, err := plugins.Start(context.Background(), h.root, cfg, h.target(), 1)
	var se *plugins.SocketDirError
	if !errors.As(err, &se) || se.Dir != dir || !strings.Contains(err.Error(), "TMPDIR") {
		t.Fatalf("start: %v; want a SocketDirError naming %s and what to set", err, dir)
	}
	t.Log(err)
}

package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

var fixtureScript = filepath.Join(nodeDir, "fixture.mjs")

const longTool = "a_tool_with_a_name_long_enough_to_need_shortening_by_the_host_0123456789"

// fixture starts testdata/node/fixture.mjs as server "fix".
func fixture(h *host, edit func(*mcp.Config)) *mcp.Supervisor {
	cfg := h.config("fix", fixtureScript)
	if edit != nil {
		edit(&cfg)
	}
	return h.supervise(cfg)
}

func TestFixture(t *testing.T) {
	h := newHost(t)
	s := fixture(h, nil)
	inst := s.Current()

	t.Run("PaginatedDiscoverySkipsTheBadSchema", func(t *testing.T) {
		names := h.names()
		for _, want := range []string{"fix_echo", "fix_mixed", "fix_pid", "fix_change_echo"} {
			if !names[want] {
				t.Errorf("%s not registered (the listing has several pages); have %v", want, names)
			}
		}
		if names["fix_bad_schema"] {
			t.Error("fix_bad_schema registered despite a schema that does not compile")
		}
		warnings := inst.Warnings()
		if len(warnings) != 1 || !strings.Contains(warnings[0].Error(), `tool "bad_schema" skipped`) {
			t.Errorf("warnings = %v, want one naming bad_schema", warnings)
		}
	})

	t.Run("LongNameIsShortenedAndCalledByItsOriginal", func(t *testing.T) {
		name, err := mcp.ToolName("fix", longTool)
		if err != nil {
			t.Fatal(err)
		}
		if len(name) != 64 || inst.Tools()[name] != longTool {
			t.Fatalf("registered %q → %q; want 64 characters naming %s", name, inst.Tools()[name], longTool)
		}
		if st := mustSettle(t, h, name, `{}`); st.Text() != longTool {
			t.Errorf("server was called as %q, want the original name", st.Text())
		}
	})

	t.Run("EmptyArgumentsAreAnObject", func(t *testing.T) {
		for _, in := range []string{"", "{}", " {} "} {
			if st := mustSettle(t, h, "fix_empty", in); st.Text() != "{}" {
				t.Errorf("input %q reached the server as %s, want {}", in, st.Text())
			}
		}
	})

	t.Run("EveryContentType", func(t *testing.T) {
		st := mustSettle(t, h, "fix_mixed", `{}`)
		want := []sdk.Part{
			sdk.Text("first"),
			sdk.Text("[resource link] report: file:///tmp/report.txt (text/plain, 42 bytes) — the report"),
			sdk.Text("[resource mem://note (text/plain)]\nembedded note"),
			sdk.Media("application/octet-stream", []byte{1, 2, 3}),
			sdk.Media("audio/wav", []byte("RIFF")),
		}
		got, _ := json.Marshal(st.Content)
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) {
			t.Errorf("content =\n%s\nwant\n%s", got, exp)
		}
		if string(st.Structured) != "null" {
			t.Errorf("structured = %s, want null (the content is not duplicated)", st.Structured)
		}
	})

	t.Run("IsErrorJoinsItsText", func(t *testing.T) {
		st, err := h.settle(t.Context(), "fix_fail", `{}`)
		if err != nil || st.Outcome != registry.ToolFailed || st.Text() != "it went wrong\ntwice" {
			t.Errorf("settle = %+v, %v; want a tool failure with the joined text", st, err)
		}
	})

	t.Run("StructuredContentAgainstOutputSchema", func(t *testing.T) {
		st, err := h.settle(t.Context(), "fix_wrong_structured", `{}`)
		if err != nil || st.Outcome != registry.InvalidOutput {
			t.Errorf("settle = %+v, %v; want invalid_output", st, err)
		}
	})

	t.Run("ListChangeReplacesInPlace", func(t *testing.T) {
		// Another source of the Location overrides fix_echo, as its config allows,
		// after the server registered it.
		release, err := h.reg.Register(registry.Batch{
			Location:  h.loc,
			Source:    registry.Source{Kind: "plugin", Name: "override"},
			Overrides: []string{"fix_echo"},
			Tools: map[string]sdk.Tool{"fix_echo": {
				InputSchema: json.RawMessage(`{"type":"object"}`),
				Execute: func(context.Context, sdk.Invocation, json.RawMessage) (sdk.Output, error) {
					return sdk.Output{JSON: json.RawMessage(`"override"`)}, nil
				},
			}},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer release()

		// Watch that fix_echo never disappears while the set is replaced, and that
		// calls running meanwhile always reach the override.
		stop := make(chan struct{})
		var missing, wrong atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if !h.names()["fix_echo"] {
					missing.Add(1)
				}
			}
		})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if st, err := h.settle(t.Context(), "fix_echo", `{"message":"m"}`); err != nil || st.Text() != "override" {
					wrong.Add(1)
				}
			}
		})

		n, _ := inst.Listed()
		mustSettle(t, h, "fix_add_tool", `{}`)
		waitListed(t, inst, func() bool { m, _ := inst.Listed(); return m > n && h.names()["fix_extra"] })
		if st := mustSettle(t, h, "fix_echo", `{"message":"m"}`); st.Text() != "override" {
			t.Errorf("after an unrelated change fix_echo answers %q; the later override must keep winning", st.Text())
		}

		// A tool the server changed takes its old registration's slot: the later
		// override still wins.
		n, _ = inst.Listed()
		mustSettle(t, h, "fix_change_echo", `{}`)
		waitListed(t, inst, func() bool { m, _ := inst.Listed(); return m > n })
		if st := mustSettle(t, h, "fix_echo", `{"message":"m"}`); st.Text() != "override" {
			t.Errorf("after the server changed echo, fix_echo answers %q; the later override must keep winning", st.Text())
		}
		close(stop)
		wg.Wait()
		if missing.Load() != 0 {
			t.Errorf("fix_echo was missing from %d Requests during the replacement", missing.Load())
		}
		if wrong.Load() != 0 {
			t.Errorf("%d calls of fix_echo during the list changes did not reach the override", wrong.Load())
		}

		// Once the override closes, the server's changed echo is revealed.
		release()
		if st := mustSettle(t, h, "fix_echo", `{"message":"m"}`); st.Text() == "override" {
			t.Errorf("after the override closed, fix_echo answers %q, want the server's changed echo", st.Text())
		}
	})
}

func TestListingLimits(t *testing.T) {
	for _, tc := range []struct{ name, mode, warning string }{
		{"RepeatedCursor", "loop", `repeated cursor "p0"`},
		{"PageCap", "endless", "cap of 100 pages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			s := fixture(h, func(c *mcp.Config) { c.Env["FIXTURE_CURSOR"] = tc.mode; c.Env["FIXTURE_PAGE_SIZE"] = "1" })
			warnings := s.Current().Warnings()
			if len(warnings) == 0 || !strings.Contains(warnings[0].Error(), tc.warning) {
				t.Errorf("warnings = %v, want %q", warnings, tc.warning)
			}
			if !h.names()["fix_echo"] {
				t.Error("the pages read before the stop were not registered")
			}
		})
	}
}

func TestCrashRestart(t *testing.T) {
	h := newHost(t)
	s := fixture(h, func(c *mcp.Config) {
		c.Budget = supervise.Budget{Crashes: 1, MinBackoff: 500 * time.Millisecond}
	})
	first := s.Current()
	stale, err := h.reg.Prepare(h.loc) // captured before the crash

	// A call in flight when the server dies fails operationally, not as an interruption.
	errc := make(chan error, 1)
	go func() {
		_, err := h.settle(t.Context(), "fix_sleep", `{"ms":60000}`)
		errc <- err
	}()
	proctest.Until(t, func() bool { return first.InFlight() == 1 })
	changed := s.Changed()
	if _, err := h.settle(t.Context(), "fix_exit", `{}`); err == nil {
		t.Error("the call that crashed the server succeeded")
	}
	err = <-errc
	var op *registry.OperationalError
	if !errors.As(err, &op) || errors.Is(err, context.Canceled) {
		t.Errorf("in-flight call: err = %v, want an operational error", err)
	}

	// Its tools stay advertised while it restarts (calls wait for the successor)...
	<-first.Scope().Done()
	if names := h.names(); !names["fix_echo"] {
		t.Error("fix_echo not advertised while the server restarts")
	}
	<-changed
	if st, _ := s.State(); st != supervise.Restarting {
		t.Errorf("state = %s, want restarting", st)
	}
	proctest.AssertGroupGone(t, first.PID())

	// ...and come back with the next generation.
	for s.Current() == first {
		<-s.Changed()
	}
	second := s.Current()
	h.track(second)
	if st, _ := s.State(); st != supervise.Running || second.Generation() != 2 {
		t.Fatalf("state = %s, generation %d; want running generation 2", st, second.Generation())
	}
	if st := mustSettle(t, h, "fix_echo", `{"message":"again"}`); st.Text() != "echo: again" {
		t.Errorf("text = %q", st.Text())
	}
	// A Request prepared before the crash runs on the new generation: same contract.
	st, err := stale.Settle(t.Context(), registry.Call{Name: "fix_echo", Input: []byte(`{"message":"old"}`)})
	if err != nil || st.Text() != "echo: old" {
		t.Errorf("stale Request: %v, %v; want it served by generation 2", st, err)
	}

	// A second crash spends the budget of one.
	_, _ = h.settle(t.Context(), "fix_exit", `{}`)
	for {
		if st, _ := s.State(); st == supervise.Failed {
			break
		}
		<-s.Changed()
	}
	if _, err := s.State(); err == nil || !strings.Contains(err.Error(), "not restarting") {
		t.Errorf("failed state error = %v", err)
	}
	if h.names()["fix_echo"] {
		t.Error("tools of a failed server still registered")
	}
}

func TestCallTimeout(t *testing.T) {
	h := newHost(t)
	fixture(h, func(c *mcp.Config) { c.Timeout = 300 * time.Millisecond })
	st, err := h.settle(t.Context(), "fix_sleep", `{"ms":10000}`)
	if err != nil || st.Outcome != registry.ToolFailed || !strings.Contains(st.Text(), "timeout of 300ms") {
		t.Fatalf("settle = %+v, %v; want a tool failure naming the timeout", st, err)
	}
	proctest.Until(t, func() bool { return h.logs.Contains("sent notifications/cancelled") })
	// The server saw the cancellation (it logs it on stderr, which the host logs).
	proctest.Until(t, func() bool { return h.logs.Contains("aborted by the client") })
}

func TestAuthorize(t *testing.T) {
	errDenied := errors.New("denied by policy")
	var asked []string
	var mu sync.Mutex
	h := newHost(t)
	fixture(h, func(c *mcp.Config) {
		c.Authorize = func(_ context.Context, tool string, inv sdk.Invocation) error {
			mu.Lock()
			asked = append(asked, tool+"/"+inv.ToolCallID)
			mu.Unlock()
			switch tool {
			case "fix_echo":
				return errDenied
			case "fix_pid":
				return &sdk.ToolFailure{Message: "the user said no"}
			}
			return nil
		}
	})
	if _, err := h.settle(t.Context(), "fix_echo", `{"message":"x"}`); !errors.Is(err, errDenied) {
		t.Errorf("denied call: err = %v, want the hook's error", err)
	}
	st, err := h.settle(t.Context(), "fix_pid", `{}`)
	if err != nil || st.Outcome != registry.ToolFailed || st.Text() != "the user said no" {
		t.Errorf("rejected call: %+v, %v", st, err)
	}
	mustSettle(t, h, "fix_empty", `{}`)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(asked, ",") != "fix_echo/call-1,fix_pid/call-1,fix_empty/call-1" {
		t.Errorf("asked = %v", asked)
	}
}

func TestWrapperProcessGroupIsKilled(t *testing.T) {
	h := newHost(t)
	// sh stays the parent of node (two commands: no exec), like npx's wrapper.
	s := h.supervise(mcp.Config{
		Name: "fix", Command: "/bin/sh", Args: []string{"-c", "node " + fixtureScript + "; exit 0"},
		Env: map[string]string{"PATH": h.path}, StopGrace: time.Second,
	})
	pid := proctest.Program(s.Current().PID()) // the wrapper, under the sandbox launcher
	if n := len(proctest.GroupMembers(pid)); n != 2 {
		t.Fatalf("process group has %d live members, want sh and node", n)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	proctest.AssertGroupGone(t, pid)
}

func TestStartErrors(t *testing.T) {
	h := newHost(t)
	start := func(cfg mcp.Config) error {
		_, err := mcp.Supervise(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc})
		return err
	}
	t.Run("BareCommandNeedsPATH", func(t *testing.T) {
		err := start(mcp.Config{Name: "x", Command: "node", Args: []string{fixtureScript}})
		var serr *mcp.StartError
		if !errors.As(err, &serr) || !strings.Contains(err.Error(), "sets no PATH") {
			t.Errorf("err = %v, want a StartError about PATH", err)
		}
	})
	t.Run("StderrExplainsAnExit", func(t *testing.T) {
		err := start(mcp.Config{
			Name: "x", Command: "node", Args: []string{"-e", "console.error('config file missing'); process.exit(3)"},
			Env: map[string]string{"PATH": h.path},
		})
		if err == nil || !strings.Contains(err.Error(), "config file missing") || !strings.Contains(err.Error(), "exit status 3") {
			t.Errorf("err = %v, want the exit status and stderr", err)
		}
	})
	t.Run("StartTimeout", func(t *testing.T) {
		err := start(mcp.Config{
			Name: "x", Command: "node", Args: []string{"-e", "setInterval(() => {}, 1000)"},
			Env: map[string]string{"PATH": h.path}, StartTimeout: 300 * time.Millisecond, StopGrace: 200 * time.Millisecond,
		})
		if err == nil || !strings.Contains(err.Error(), "start timeout (300ms)") {
			t.Errorf("err = %v, want the start timeout", err)
		}
	})
}

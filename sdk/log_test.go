package sdk_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// loggingPluginEnv makes this test binary serve a plugin whose tool logs.
const loggingPluginEnv = "SDK_TEST_LOGGING_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(loggingPluginEnv) != "" {
		sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, _ sdk.Location, tools sdk.Tools) error {
			sdk.Logger(ctx).Debug("activating", "tools", 1)
			_, err := tools.Register(ctx, map[string]sdk.Tool{
				"note": sdk.NewTool("Logs its text.", func(ctx context.Context, inv sdk.Invocation, in struct {
					Text string `json:"text"`
				}) (string, error) {
					sdk.Logger(ctx).Warn("noted", "text", in.Text, "call", inv.ToolCallID)
					return "ok", nil
				}),
			})
			return err
		}))
		return
	}
	os.Exit(m.Run())
}

// TestLoggerReachesTheHostLog runs this test binary as a plugin whose tool logs
// through sdk.Logger, and finds the line, its level and fields in the host's log.
func TestLoggerReachesTheHostLog(t *testing.T) {
	h := hosttest.NewHost(t, registry.Options{})
	var log testio.SyncBuffer
	cfg := plugins.Config{
		Name:   "noter",
		Path:   os.Args[0],
		Env:    map[string]string{loggingPluginEnv: "1", sdk.LogLevelEnv: "debug", "GORACE": "atexit_sleep_ms=0"},
		Logger: hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Trace}),
	}
	note(t, h, h.Root, cfg, "hello", "call-7")
	if err := h.Root.Close(context.WithoutCancel(t.Context())); err != nil {
		t.Fatal(err)
	}
	var noted, activating bool
	for _, line := range strings.Split(log.String(), "\n") {
		noted = noted || strings.Contains(line, "[WARN]") && strings.Contains(line, "noted") && strings.Contains(line, "text=hello") && strings.Contains(line, "call=call-7")
		activating = activating || strings.Contains(line, "[DEBUG]") && strings.Contains(line, "activating")
	}
	if !noted || !activating {
		t.Errorf("the host's log lacks the plugin's lines (noted %v, activating %v):\n%s", noted, activating, log.String())
	}
}

func TestLoggerFromContext(t *testing.T) {
	var buf strings.Builder
	l := hclog.New(&hclog.LoggerOptions{Output: &buf})
	sdk.Logger(sdk.WithLogger(t.Context(), l)).Info("mine")
	if !strings.Contains(buf.String(), "mine") {
		t.Errorf("WithLogger's logger was not used: %q", buf.String())
	}
	if sdk.Logger(t.Context()) != sdk.Logger(context.Background()) {
		t.Error("the process logger differs between calls")
	}
}

// note supervises cfg, this test binary serving the logging plugin, under root in
// h's Location, and calls its tool note with text; it fails t unless the call
// completes.
func note(t *testing.T, h *hosttest.Host, root *scope.Scope, cfg plugins.Config, text, callID string) {
	t.Helper()
	target := plugins.Target{Registry: h.Registry, Location: h.Location, Directory: h.Location}
	if _, err := plugins.Supervise(t.Context(), root, cfg, target, supervise.Budget{}); err != nil {
		t.Fatal(err)
	}
	q, err := h.Registry.Prepare(h.Location)
	if err != nil {
		t.Fatal(err)
	}
	in := fmt.Sprintf(`{"text": %q}`, text)
	if s, err := q.Settle(t.Context(), registry.Call{Name: "note", Input: []byte(in), Invocation: sdk.Invocation{ToolCallID: callID}}); err != nil || s.Outcome != registry.Completed {
		t.Fatalf("settle: %v %+v", err, s)
	}
}

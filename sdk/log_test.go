package sdk_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

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
	storage, err := registry.OpenStorage(t.TempDir(), registry.StorageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Options{Storage: storage})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	release, err := reg.OpenLocation(dir, registry.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	root := scope.New(t.Context())
	defer root.Close(context.WithoutCancel(t.Context()))

	var log testio.SyncBuffer
	cfg := plugins.Config{
		Name:   "noter",
		Path:   os.Args[0],
		Env:    map[string]string{loggingPluginEnv: "1", sdk.LogLevelEnv: "debug", "GORACE": "atexit_sleep_ms=0"},
		Logger: hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Trace}),
	}
	if _, err := plugins.Supervise(t.Context(), root, cfg, plugins.Target{Registry: reg, Location: dir, Directory: dir}, supervise.Budget{}); err != nil {
		t.Fatal(err)
	}
	q, err := reg.Prepare(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := q.Settle(t.Context(), registry.Call{Name: "note", Input: []byte(`{"text": "hello"}`), Invocation: sdk.Invocation{ToolCallID: "call-7"}})
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("settle: %v %+v", err, s)
	}
	if err := root.Close(context.WithoutCancel(t.Context())); err != nil {
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

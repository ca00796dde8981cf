package sdk_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// TestDebugModeDetachesQuietly attaches two hosts in turn to this test binary
// serving a plugin with -debug: a host detaching is normal, so the plugin logs no
// error for it.
func TestDebugModeDetachesQuietly(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-debug")
	cmd.Env = append(os.Environ(), loggingPluginEnv+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr testio.SyncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	var value string
	sc := bufio.NewScanner(out)
	for value == "" && sc.Scan() {
		if _, v, ok := strings.Cut(sc.Text(), pluginpb.ReattachEnv+"='"); ok {
			value = strings.TrimSuffix(v, "'")
		}
	}
	m, err := pluginpb.ParseReattach(value)
	if err != nil {
		t.Fatalf("reattach line %q: %v (scan: %v)\n%s", value, err, sc.Err(), stderr.String())
	}
	var rc pluginpb.Reattach
	for _, r := range m {
		rc = r
	}

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
	for attach := range 2 {
		root := scope.New(t.Context())
		cfg := plugins.Config{Name: "noter", Path: os.Args[0], Reattach: &plugins.Reattach{Pid: rc.Pid, Network: rc.Network, Address: rc.Address}, Logger: hclog.NewNullLogger()}
		if _, err := plugins.Supervise(t.Context(), root, cfg, plugins.Target{Registry: reg, Location: dir, Directory: dir}, supervise.Budget{}); err != nil {
			t.Fatalf("attach %d: %v", attach+1, err)
		}
		q, err := reg.Prepare(dir)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := q.Settle(t.Context(), registry.Call{Name: "note", Input: []byte(`{"text": "x"}`), Invocation: sdk.Invocation{ToolCallID: "c"}}); err != nil || s.Outcome != registry.Completed {
			t.Fatalf("attach %d: settle: %v %+v", attach+1, err, s)
		}
		if err := root.Close(context.WithoutCancel(t.Context())); err != nil {
			t.Fatal(err)
		}
	}
	// The second host's attach proves the first detached; the plugin then logs
	// "ready for the next host" only at debug level, so wait for nothing more.
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, `"@level":"error"`) || strings.Contains(line, "use of closed network connection") {
			t.Errorf("the plugin logged an error at a normal detach: %s", line)
		}
	}
}

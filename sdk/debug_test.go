package sdk_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/pluginpb"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
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

	h := hosttest.NewHost(t, registry.Options{})
	for attach := range 2 {
		root := scope.New(t.Context())
		note(t, h, root, plugins.Config{Name: "noter", Path: os.Args[0], Reattach: &plugins.Reattach{Pid: rc.Pid, Network: rc.Network, Address: rc.Address}, Logger: hclog.NewNullLogger()}, "x", "c")
		if err := root.Close(context.WithoutCancel(t.Context())); err != nil {
			t.Fatalf("detach %d: %v", attach+1, err)
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

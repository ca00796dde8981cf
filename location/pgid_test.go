//go:build linux

package location_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/sandbox"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
)

// TestHostilePluginStaysOutOfTheHostsGroup: a confined program shares the host's
// session, so without a PID namespace of its own (the cgroup and subreaper modes,
// the fallback's without root) the host's process group is one it could join with
// setpgid, and signal. It cannot: in every containment mode, without a world, the
// attempt fails and the plugin's process is gone once its Location closes.
func TestHostilePluginStaysOutOfTheHostsGroup(t *testing.T) {
	bin := buildHostile(t)
	if sandbox.LandlockABI() == 0 {
		t.Skip("this kernel has no Landlock: an untrusted plugin runs unconfined")
	}
	t.Setenv(sandbox.OffEnv, "world")
	for _, mode := range []sandbox.Mode{sandbox.ModeNamespace, sandbox.ModeCgroup, sandbox.ModeSubreaper} {
		t.Run(string(mode), func(t *testing.T) {
			if err := sandbox.Supported(mode); err != nil {
				t.Skip(err)
			}
			e := newEnv(t)
			e.opts.SocketDir = shortDir(t)
			e.opts.SandboxMode = sandboxcfg.Mode(mode)
			l := e.activate(t, workspace(t, pluginsConfig(echoPlugin("echo"), obj{"name": "hostile", "path": bin})))
			var pid int
			for _, p := range l.Plugins() {
				if p.Name() == "hostile" {
					pid = p.Current().PID()
				}
			}
			got := make(chan os.Signal, 1)
			signal.Notify(got, syscall.SIGUSR2)
			defer signal.Stop(got)
			in, _ := json.Marshal(obj{"host_pgid": syscall.Getpgrp(), "signal": int(syscall.SIGUSR2)})
			r := report(t, l, "reach", string(in))
			for _, k := range []string{fmt.Sprint("setpgid into the host's group ", syscall.Getpgrp()), fmt.Sprint("killpg the host's group ", syscall.Getpgrp())} {
				t.Logf("%-50s %s", k, r[k])
				if !strings.HasPrefix(r[k], "denied: ") {
					t.Errorf("%s: %q", k, r[k])
				}
			}
			select {
			case <-got:
				t.Errorf("the host received the plugin's SIGUSR2")
			default:
			}
			if err := l.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			if proctest.Running(pid) {
				t.Errorf("the hostile plugin's process %d outlived its Location", pid)
			}
		})
	}
}

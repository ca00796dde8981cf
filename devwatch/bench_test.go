//go:build unix

package devwatch_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/toolhost/toolhost/devwatch"
	"github.com/toolhost/toolhost/internal/echopb"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/registry"
)

// BenchmarkReload measures, side by side in one run, each iteration doing all four
// in turn (so a drift in the machine's speed hits them alike):
//
//   - reload: from a changed source file's save (the rename that ends it) to the
//     new generation serving (after the registry's change, Prepare gives a new
//     Request whose call returns the new version), through the watcher (default
//     debounce, which a single save to an idle plugin does not wait for),
//     BuildPlugin and Supervisor.Reload; the reload's own build, start and swap
//     times are reported beside it, and what it added to its build (reload-added:
//     each reload less its own build, so the rename, the detection, the start and
//     the registration);
//   - build: location.BuildPlugin of a changed source (cache key + go build);
//   - go-build: a plain `go build` of a changed source, to a new output file;
//   - bare-launch: launching a bare go-plugin echo plugin (handshake and dispense).
//
// The target (issue 16) is reload-added ≤ bare-launch; reload-start is the start
// alone. Each iteration compiles three times, so run with a fixed count:
//
//	go test -run '^$' -bench Reload -benchtime 15x -count 2 ./devwatch/
var version atomic.Int64

func init() { version.Store(1000) }

func BenchmarkReload(b *testing.B) {
	e := newEnv(b, devwatch.DefaultDebounce)
	buildSrc, goBuildSrc := benchDir(b, "bench-build-"), benchDir(b, "bench-gobuild-")
	bare := filepath.Join(b.TempDir(), "bare")
	if out, err := exec.Command("go", "build", "-o", bare, "../plugins/testdata/bare").CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	var reload, reloadBuild, added, start, swap, build, goBuild, launch []time.Duration
	for b.Loop() {
		d, ev := reloadOnce(b, e)
		reload, reloadBuild, added = append(reload, d), append(reloadBuild, ev.Build), append(added, d-ev.Build)
		start, swap = append(start, ev.Reload.Start), append(swap, ev.Reload.Swap)

		writePlugin(buildSrc, int(version.Add(1)), "Reports the version.")
		t0 := time.Now()
		if _, built, err := location.BuildPlugin(context.Background(), cache, "p", buildSrc); err != nil || !built {
			b.Fatal(built, err)
		}
		build = append(build, time.Since(t0))

		// A new file, as every build into the content-addressed cache is: on this
		// VM's ext4, overwriting the previous binary instead is 50-100 ms faster.
		out := filepath.Join(goBuildSrc, ".out")
		os.Remove(out)
		writePlugin(goBuildSrc, int(version.Add(1)), "Reports the version.")
		t0 = time.Now()
		cmd := exec.Command("go", "build", "-o", out, ".")
		cmd.Dir = goBuildSrc
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		goBuild = append(goBuild, time.Since(t0))

		launch = append(launch, bareLaunch(b, bare))
	}
	report(b, "reload", reload)
	report(b, "reload-build", reloadBuild)
	report(b, "reload-added", added)
	report(b, "reload-start", start)
	report(b, "reload-swap", swap)
	report(b, "build", build)
	report(b, "go-build", goBuild)
	report(b, "bare-launch", launch)
}

// reloadOnce writes a new version of e's plugin and returns the time until that
// version serves, and the reload's event.
func reloadOnce(b *testing.B, e *env) (time.Duration, devwatch.Event) {
	v := int(version.Add(1))
	seen, _ := e.loc.Prepare()
	// Saved as editors save, from the rename of a written temporary over main.go:
	// the moment the change appears (writing the temporary took about 0.6 ms on
	// this VM's ext4, the editor's time).
	save, err := stageFile(filepath.Join(e.dir, "main.go"), fmt.Sprintf(source, strconv.Itoa(v), "Reports the version."))
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	if err := save(); err != nil {
		b.Fatal(err)
	}
	want := strconv.Itoa(v)
	// Wait for the registry to change (which takes no CPU from the build it waits
	// for, and sees the change as it happens), then prepare: when the Request
	// changed, one call says whether the new generation serves.
	var served time.Duration
	for served == 0 {
		changed := e.reg.Changed()
		q, err := e.loc.Prepare()
		if err != nil {
			b.Fatal(err)
		}
		if q == seen {
			select {
			case <-changed:
			case <-time.After(time.Minute):
				b.Fatal("no reload within a minute")
			}
			continue
		}
		d := time.Since(t0)
		seen = q
		s, err := q.Settle(context.Background(), registry.Call{Name: "work", Input: []byte(`{"n":1}`)})
		if err != nil {
			b.Fatal(err)
		}
		if s.Text() == want {
			served = d
		}
	}
	ev := e.next() // the swap finishes before the next edit
	if ev.Err != nil {
		b.Fatal(ev.Err)
	}
	return served, ev
}

func benchDir(b *testing.B, prefix string) string {
	dir, err := os.MkdirTemp(module, prefix)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// bareLaunch launches the bare go-plugin baseline (handshake and dispense), kills it,
// and returns how long the launch took.
func bareLaunch(b *testing.B, bare string) time.Duration {
	t0 := time.Now()
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  echopb.Handshake,
		Plugins:          plugin.PluginSet{"echo": &echopb.Plugin{}},
		Cmd:              exec.Command(bare),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	defer c.Kill()
	rpc, err := c.Client()
	if err == nil {
		_, err = rpc.Dispense("echo")
	}
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// report adds the median of ds as a metric in milliseconds.
func report(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), name+"-ms")
}

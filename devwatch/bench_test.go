package devwatch_test

import (
	"context"
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

// BenchmarkReload measures, side by side in one run:
//
//   - reload: from the write of a changed source file to the new generation serving
//     (Prepare, polled every millisecond, gives a new Request whose call returns the
//     new version), through the watcher (default debounce, which a single save to an
//     idle plugin does not wait for), BuildPlugin and Supervisor.Reload; the
//     reload's own build, start and swap times are reported beside it;
//   - build: location.BuildPlugin of a changed source (cache key + go build);
//   - go-build: a plain `go build` of a changed source;
//   - bare-launch: launching a bare go-plugin echo plugin (handshake and dispense)
//     and killing it.
//
// The target is reload ≤ build + 2 × bare-launch. Each iteration compiles, so run
// with a fixed count:
//
//	go test -run '^$' -bench Reload -benchtime 5x ./devwatch/
var version atomic.Int64

func init() { version.Store(1000) }

func BenchmarkReload(b *testing.B) {
	b.Run("reload", func(b *testing.B) {
		e := newEnv(b, devwatch.DefaultDebounce)
		var lat, build, start, swap []time.Duration
		for b.Loop() {
			v := int(version.Add(1))
			t0 := time.Now()
			if err := writePlugin(e.dir, v, "Reports the version."); err != nil {
				b.Fatal(err)
			}
			want := strconv.Itoa(v)
			// Poll Prepare, which costs nothing while the registry is unchanged (a
			// call per poll would take CPU from the build it waits for); when the
			// Request changes, one call says whether the new generation serves.
			seen, _ := e.loc.Prepare()
			for {
				q, err := e.loc.Prepare()
				if err != nil {
					b.Fatal(err)
				}
				if q != seen {
					served := time.Since(t0)
					seen = q
					s, err := q.Settle(context.Background(), registry.Call{Name: "work", Input: []byte(`{"n":1}`)})
					if err != nil {
						b.Fatal(err)
					}
					if s.Text() == want {
						lat = append(lat, served)
						break
					}
				}
				time.Sleep(time.Millisecond)
			}
			ev := e.next() // the swap finishes before the next edit
			if ev.Err != nil {
				b.Fatal(ev.Err)
			}
			build, start, swap = append(build, ev.Build), append(start, ev.Reload.Start), append(swap, ev.Reload.Swap)
		}
		report(b, "reload", lat)
		report(b, "build", build)
		report(b, "start", start)
		report(b, "swap", swap)
	})
	b.Run("build", func(b *testing.B) {
		src, err := os.MkdirTemp(module, "bench-build-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(src)
		var lat []time.Duration
		for b.Loop() {
			writePlugin(src, int(version.Add(1)), "Reports the version.")
			t0 := time.Now()
			if _, built, err := location.BuildPlugin(context.Background(), cache, "p", src); err != nil || !built {
				b.Fatal(built, err)
			}
			lat = append(lat, time.Since(t0))
		}
		report(b, "build", lat)
	})
	b.Run("go-build", func(b *testing.B) {
		src, err := os.MkdirTemp(module, "bench-gobuild-")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(src)
		var lat []time.Duration
		for b.Loop() {
			writePlugin(src, int(version.Add(1)), "Reports the version.")
			t0 := time.Now()
			cmd := exec.Command("go", "build", "-o", filepath.Join(src, ".out"), ".")
			cmd.Dir = src
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v\n%s", err, out)
			}
			lat = append(lat, time.Since(t0))
		}
		report(b, "go-build", lat)
	})
	b.Run("bare-launch", func(b *testing.B) {
		bare := filepath.Join(b.TempDir(), "bare")
		if out, err := exec.Command("go", "build", "-o", bare, "../plugins/testdata/bare").CombinedOutput(); err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		var lat []time.Duration
		for b.Loop() {
			t0 := time.Now()
			c := plugin.NewClient(&plugin.ClientConfig{
				HandshakeConfig:  echopb.Handshake,
				Plugins:          plugin.PluginSet{"echo": &echopb.Plugin{}},
				Cmd:              exec.Command(bare),
				AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
				Logger:           hclog.NewNullLogger(),
			})
			rpc, err := c.Client()
			if err == nil {
				_, err = rpc.Dispense("echo")
			}
			if err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
			c.Kill()
		}
		report(b, "launch", lat)
	})
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

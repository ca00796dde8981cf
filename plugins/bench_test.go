//go:build unix

package plugins_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	"github.com/toolhost/toolhost/internal/echopb"
	"github.com/toolhost/toolhost/internal/proctest"
	isandbox "github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sandbox"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

// The benchmarks compare a toolhost call (registry pipeline + plugin protocol) with
// the baseline: a bare go-plugin gRPC plugin with one echo method. Run with
//
//	go test -run '^$' -bench . -benchmem ./plugins/

var (
	benchOnce sync.Once
	// bareBinary is the baseline as go-plugin's users build it (go build); bareStatic
	// is it built as toolhost builds plugins (location.StartupTags), so that each
	// launch measure has a like-for-like baseline too; echoBinary is the toolhost
	// plugin, built by location.BuildPlugin as an activation builds one.
	bareBinary, bareStatic, echoBinary string
)

// buildBench builds the baselines and the one-tool toolhost plugin once, before any
// benchmark timing starts.
func buildBench(b *testing.B) {
	benchOnce.Do(func() {
		dir := filepath.Dir(faultBinary)
		bareBinary, bareStatic = filepath.Join(dir, "bare"), filepath.Join(dir, "bare-static")
		for bin, tags := range map[string]string{bareBinary: "", bareStatic: location.StartupTags} {
			if out, err := exec.Command("go", "build", "-tags="+tags, "-o", bin, "./testdata/bare").CombinedOutput(); err != nil {
				panic(fmt.Sprintf("build ./testdata/bare: %v\n%s", err, out))
			}
		}
		var err error
		if echoBinary, _, err = location.BuildPlugin(context.Background(), filepath.Join(dir, "cache"), "echo", "./testdata/echo"); err != nil {
			panic(err)
		}
	})
}

func buildBare(b *testing.B) string {
	buildBench(b)
	return bareBinary
}

// startBare launches the baseline plugin the plain go-plugin way.
func startBare(b *testing.B) (echopb.EchoClient, *plugin.Client) {
	return startBareWith(b, false)
}

func startBareWith(b *testing.B, mtls bool) (echopb.EchoClient, *plugin.Client) {
	client, c, err := launchBare(buildBare(b), mtls)
	if err != nil {
		b.Fatal(err)
	}
	return client, c
}

// launchBare launches the baseline the plain go-plugin way; safe to call from any
// goroutine.
func launchBare(binary string, mtls bool) (echopb.EchoClient, *plugin.Client, error) {
	c := plugin.NewClient(&plugin.ClientConfig{
		AutoMTLS:         mtls,
		HandshakeConfig:  echopb.Handshake,
		Plugins:          plugin.PluginSet{"echo": &echopb.Plugin{}},
		Cmd:              exec.Command(binary),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hclog.NewNullLogger(),
	})
	rpc, err := c.Client()
	if err != nil {
		c.Kill()
		return nil, nil, err
	}
	raw, err := rpc.Dispense("echo")
	if err != nil {
		c.Kill()
		return nil, nil, err
	}
	return raw.(echopb.EchoClient), c, nil
}

type benchHost struct {
	reg  *registry.Registry
	root *scope.Scope
	loc  string
}

func newBenchHost(b *testing.B) *benchHost { return newBenchHostLimits(b, registry.Limits{}) }

// newBenchHostLimits is a host whose Location has the given output limits.
func newBenchHostLimits(b *testing.B, lim registry.Limits) *benchHost {
	buildBench(b)
	st, err := registry.OpenStorage(b.TempDir(), registry.StorageOptions{})
	if err != nil {
		b.Fatal(err)
	}
	reg, _ := registry.New(registry.Options{Storage: st})
	h := &benchHost{reg: reg, root: scope.New(context.Background()), loc: b.TempDir()}
	release, _ := reg.OpenLocation(h.loc, lim)
	b.Cleanup(func() { h.root.Close(context.Background()); release() })
	return h
}

func (h *benchHost) start(b *testing.B) *plugins.Supervisor {
	s, err := h.supervise()
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// supervise starts the echo plugin; safe to call from any goroutine.
func (h *benchHost) supervise() (*plugins.Supervisor, error) {
	return h.superviseIn(sandbox.Spec{})
}

// superviseIn starts the echo plugin (untrusted) in the given sandbox.
func (h *benchHost) superviseIn(spec sandbox.Spec) (*plugins.Supervisor, error) {
	return plugins.Supervise(context.Background(), h.root,
		plugins.Config{Name: "echo", Path: echoBinary, Sandbox: spec},
		plugins.Target{Registry: h.reg, Location: h.loc, Directory: h.loc}, supervise.Budget{})
}

func payload(n int) string { return strings.Repeat("a", n) }

// cpuMeter reports the CPU time (user + system) that the host process and one plugin
// process spent per operation, read from /proc: on 2 cores a call's throughput is
// bound by the sum, so this says which side an overhead is on.
type cpuMeter struct {
	pid        int
	host, peer time.Duration
}

func startCPU(pid int) *cpuMeter {
	return &cpuMeter{pid: pid, host: proctest.CPUTime(0), peer: proctest.CPUTime(pid)}
}

func (m *cpuMeter) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64((proctest.CPUTime(0)-m.host).Nanoseconds())/n, "host-cpu-ns/op")
	b.ReportMetric(float64((proctest.CPUTime(m.pid)-m.peer).Nanoseconds())/n, "plugin-cpu-ns/op")
}

// launchCPU reports the CPU time per operation of the host and of the plugin
// processes it started and reaped (getrusage RUSAGE_CHILDREN), launch to exit.
type launchCPU struct{ host, children time.Duration }

func startLaunchCPU() launchCPU { return launchCPU{proctest.CPUTime(0), childrenCPU()} }

func (m launchCPU) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(float64((proctest.CPUTime(0)-m.host).Nanoseconds())/n, "host-cpu-ns/op")
	b.ReportMetric(float64((childrenCPU()-m.children).Nanoseconds())/n, "plugins-cpu-ns/op")
}

func childrenCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// latencies records per-call durations and reports their median and p99.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	p50, p99 := l.quantiles()
	b.ReportMetric(float64(p50.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p99.Nanoseconds()), "p99-ns")
}

// quantiles sorts l and returns its median and 99th percentile.
func (l latencies) quantiles() (p50, p99 time.Duration) {
	slices.Sort(l)
	return l[len(l)/2], l[len(l)*99/100]
}

func BenchmarkCall(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		name := fmt.Sprintf("%dB", size)
		if size >= 1<<10 {
			name = fmt.Sprintf("%dKiB", size>>10)
		}
		b.Run("size="+name+"/impl=bare", func(b *testing.B) {
			client, c := startBare(b)
			defer c.Kill()
			msg := &echopb.EchoMessage{Data: []byte(payload(size))}
			lat := make(latencies, 0, b.N)
			b.SetBytes(int64(size))
			cpu := startCPU(c.ReattachConfig().Pid)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				if _, err := client.Echo(context.Background(), msg); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			lat.report(b)
			cpu.report(b)
		})
		b.Run("size="+name+"/impl=bare-mtls", func(b *testing.B) {
			client, c := startBareWith(b, true)
			defer c.Kill()
			msg := &echopb.EchoMessage{Data: []byte(payload(size))}
			lat := make(latencies, 0, b.N)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				if _, err := client.Echo(context.Background(), msg); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			lat.report(b)
		})
		b.Run("size="+name+"/impl=toolhost", func(b *testing.B) {
			// Limits above the payload: this measures the call, not retention (see
			// toolhost-bounded below).
			h := newBenchHostLimits(b, registry.Limits{MaxBytes: 1 << 20})
			sup := h.start(b)
			q, _ := h.reg.Prepare(h.loc)
			input, _ := json.Marshal(map[string]string{"text": payload(size)})
			call := registry.Call{Name: "echo", Input: input, Invocation: sdk.Invocation{ToolCallID: "c"}}
			lat := make(latencies, 0, b.N)
			b.SetBytes(int64(size))
			cpu := startCPU(sup.Current().PID())
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				s, err := q.Settle(context.Background(), call)
				if err != nil || s.Outcome != registry.Completed {
					b.Fatal(s, err)
				}
				lat = append(lat, time.Since(start))
			}
			lat.report(b)
			cpu.report(b)
		})
	}
	b.Run("size=64KiB/impl=toolhost-bounded", func(b *testing.B) {
		// Default limits (51200 bytes): every call retains its output in managed
		// storage (an fsynced file) and returns a preview.
		h := newBenchHost(b)
		h.start(b)
		q, _ := h.reg.Prepare(h.loc)
		input, _ := json.Marshal(map[string]string{"text": payload(64 << 10)})
		b.SetBytes(64 << 10)
		for b.Loop() {
			s, err := q.Settle(context.Background(), registry.Call{Name: "echo", Input: input})
			if err != nil || len(s.ManagedPaths) != 1 {
				b.Fatal(s, err)
			}
		}
	})
	b.Run("size=64B/impl=in-process", func(b *testing.B) {
		h := newBenchHost(b)
		release, _ := h.reg.Register(registry.Batch{Tools: map[string]sdk.Tool{"echo": sdk.NewTool("echo",
			func(_ context.Context, _ sdk.Invocation, in struct {
				Text string `json:"text"`
			}) (string, error) {
				return in.Text, nil
			})}})
		defer release()
		q, _ := h.reg.Prepare(registry.Application)
		input, _ := json.Marshal(map[string]string{"text": payload(64)})
		call := registry.Call{Name: "echo", Input: input}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := q.Settle(context.Background(), call); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCallAlternating makes calls in blocks of 100, a bare block and a
// toolhost block in turn, so both meet the machine in the same state: on a VM whose
// speed drifts by tens of percent between runs, the per-implementation benchmarks
// above compare runs made minutes apart. (Blocks, not single calls, so that what one
// side leaves running, its GC or its connection's goroutines, does not land on the
// other's calls.) It reports each side's median and p99 over all its calls, and
// their ratios (toolhost / bare). One iteration is one block of each.
func BenchmarkCallAlternating(b *testing.B) {
	for _, size := range []int{64, 64 << 10} {
		name := fmt.Sprintf("%dB", size)
		if size >= 1<<10 {
			name = fmt.Sprintf("%dKiB", size>>10)
		}
		b.Run("size="+name, func(b *testing.B) {
			client, c := startBare(b)
			defer c.Kill()
			h := newBenchHostLimits(b, registry.Limits{MaxBytes: 1 << 20})
			h.start(b)
			q, _ := h.reg.Prepare(h.loc)
			msg := &echopb.EchoMessage{Data: []byte(payload(size))}
			input, _ := json.Marshal(map[string]string{"text": payload(size)})
			call := registry.Call{Name: "echo", Input: input, Invocation: sdk.Invocation{ToolCallID: "c"}}
			const block = 100
			bare, toolhost := make(latencies, 0, block*b.N), make(latencies, 0, block*b.N)
			for b.Loop() {
				for range block {
					start := time.Now()
					if _, err := client.Echo(context.Background(), msg); err != nil {
						b.Fatal(err)
					}
					bare = append(bare, time.Since(start))
				}
				for range block {
					start := time.Now()
					if s, err := q.Settle(context.Background(), call); err != nil || s.Outcome != registry.Completed {
						b.Fatal(s, err)
					}
					toolhost = append(toolhost, time.Since(start))
				}
			}
			bare50, bare99 := bare.quantiles()
			th50, th99 := toolhost.quantiles()
			b.ReportMetric(float64(bare50.Nanoseconds()), "bare-p50-ns")
			b.ReportMetric(float64(th50.Nanoseconds()), "toolhost-p50-ns")
			b.ReportMetric(float64(th50)/float64(bare50), "p50-ratio")
			b.ReportMetric(float64(th99)/float64(bare99), "p99-ratio")
		})
	}
}

func BenchmarkConcurrentCalls(b *testing.B) {
	for _, callers := range []int{8, 64} {
		b.Run(fmt.Sprintf("callers=%d/impl=bare", callers), func(b *testing.B) {
			client, c := startBare(b)
			defer c.Kill()
			msg := &echopb.EchoMessage{Data: []byte(payload(64))}
			b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
			cpu := startCPU(c.ReattachConfig().Pid)
			defer cpu.report(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := client.Echo(context.Background(), msg); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(fmt.Sprintf("callers=%d/impl=toolhost", callers), func(b *testing.B) {
			h := newBenchHost(b)
			s := h.start(b)
			q, _ := h.reg.Prepare(h.loc)
			input, _ := json.Marshal(map[string]string{"text": payload(64)})
			b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
			cpu := startCPU(s.Current().PID())
			defer cpu.report(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := q.Settle(context.Background(), registry.Call{Name: "echo", Input: input}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkConcurrentAlternating is BenchmarkConcurrentCalls with both sides in
// one benchmark: each iteration is a round of 100 calls per caller on the bare
// plugin, then one on toolhost, so drift in the machine's speed hits both alike. It
// reports the time per call of each side and the throughput ratio (bare time /
// toolhost time: toolhost's throughput as a fraction of bare's).
func BenchmarkConcurrentAlternating(b *testing.B) {
	const perCaller = 100
	for _, callers := range []int{8, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			client, c := startBare(b)
			defer c.Kill()
			h := newBenchHost(b)
			h.start(b)
			q, _ := h.reg.Prepare(h.loc)
			msg := &echopb.EchoMessage{Data: []byte(payload(64))}
			input, _ := json.Marshal(map[string]string{"text": payload(64)})
			round := func(call func() error) time.Duration {
				start := time.Now()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for range perCaller {
							if err := call(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				return time.Since(start)
			}
			var bare, toolhost time.Duration
			for b.Loop() {
				bare += round(func() error { _, err := client.Echo(context.Background(), msg); return err })
				toolhost += round(func() error {
					_, err := q.Settle(context.Background(), registry.Call{Name: "echo", Input: input})
					return err
				})
			}
			calls := float64(b.N * callers * perCaller)
			b.ReportMetric(float64(bare.Nanoseconds())/calls, "bare-ns/call")
			b.ReportMetric(float64(toolhost.Nanoseconds())/calls, "toolhost-ns/call")
			b.ReportMetric(float64(bare)/float64(toolhost), "throughput-ratio")
		})
	}
}

// BenchmarkSandboxAlternating compares an untrusted plugin with its sandbox on (the
// default: contained, confined) and off (sandbox.ModeNone: a plain child), in
// turn: launching one plugin (Supervise returning), and 64-byte calls. The calls
// alternate one by one, in pairs whose order alternates too (off then on, on then
// off), so a disturbance of the machine lands on both sides alike; one iteration
// is 100 pairs, after 200 warming calls each. It reports the median of the pairs'
// ratios (on/off: the figure the target names), each side's p50 and the ratios of
// the p50s and p99s, and each plugin's CPU time per call (read from /proc: what
// the sandbox costs the plugin, whatever the scheduler does). cpu-cgroup compares
// the same calls to a confined plugin without and with the cgroup of its CPU share
// (where this machine gives it one): what that membership costs a call.
func BenchmarkSandboxAlternating(b *testing.B) {
	off := sandbox.Spec{Mode: sandbox.ModeNone}
	b.Run("launch", func(b *testing.B) {
		var on1, off1 latencies
		for b.Loop() {
			for _, run := range []struct {
				spec sandbox.Spec
				into *latencies
			}{{off, &off1}, {sandbox.Spec{}, &on1}} {
				b.StopTimer()
				h := newBenchHost(b)
				b.StartTimer()
				start := time.Now()
				if _, err := h.superviseIn(run.spec); err != nil {
					b.Fatal(err)
				}
				*run.into = append(*run.into, time.Since(start))
				b.StopTimer()
				h.root.Close(context.Background())
				b.StartTimer()
			}
		}
		o50, _ := off1.quantiles()
		n50, _ := on1.quantiles()
		b.ReportMetric(float64(o50.Microseconds()), "off-p50-us")
		b.ReportMetric(float64(n50.Microseconds()), "on-p50-us")
		b.ReportMetric(float64((n50 - o50).Microseconds()), "on-off-us")
		b.ReportMetric(float64(n50)/float64(o50), "on/off")
	})
	b.Run("call", func(b *testing.B) { benchCallPairs(b, off, sandbox.Spec{}, "") })
	// What the CPU share's cgroup costs a call: the plugin confined as shipped,
	// without its cgroup (OffEnv "cpu") and with it (where it has one here).
	b.Run("cpu-cgroup", func(b *testing.B) { benchCallPairs(b, sandbox.Spec{}, sandbox.Spec{}, "cpu") })
}

// benchCallPairs compares 64-byte calls to a plugin of spec offSpec, started with
// OffEnv set to offLayers, and to one of onSpec, in pairs (see
// BenchmarkSandboxAlternating). Beside the median of every pair's ratio it reports
// the quartiles of the per-iteration medians (pair-ratio-q1, -q3): how far the
// figure moves from one block of 100 pairs to the next.
func benchCallPairs(b *testing.B, offSpec, onSpec sandbox.Spec, offLayers string) {
	type side struct {
		call func() time.Duration
		pid  int // the plugin's process, for its CPU time
	}
	settle := func(spec sandbox.Spec) side {
		h := newBenchHost(b)
		sup, err := h.superviseIn(spec)
		if err != nil {
			b.Fatal(err)
		}
		q, _ := h.reg.Prepare(h.loc)
		input, _ := json.Marshal(map[string]string{"text": payload(64)})
		call := registry.Call{Name: "echo", Input: input, Invocation: sdk.Invocation{ToolCallID: "c"}}
		return side{pid: sup.Current().PID(), call: func() time.Duration {
			start := time.Now()
			if s, err := q.Settle(context.Background(), call); err != nil || s.Outcome != registry.Completed {
				b.Fatal(s, err)
			}
			return time.Since(start)
		}}
	}
	b.Setenv(isandbox.OffEnv, offLayers)
	offS := settle(offSpec)
	b.Setenv(isandbox.OffEnv, "")
	onS := settle(onSpec)
	for range 200 { // both connections and runtimes warm
		offS.call()
		onS.call()
	}
	const pairs = 100
	var offL, onL latencies
	var ratios, blocks []float64
	offCPU, onCPU := proctest.CPUTime(offS.pid), proctest.CPUTime(onS.pid)
	for i := 0; b.Loop(); i++ {
		block := make([]float64, pairs)
		for k := range pairs {
			var o, n time.Duration
			if (i*pairs+k)%2 == 0 {
				o = offS.call()
				n = onS.call()
			} else {
				n = onS.call()
				o = offS.call()
			}
			offL, onL = append(offL, o), append(onL, n)
			block[k] = float64(n) / float64(o)
		}
		ratios = append(ratios, block...)
		slices.Sort(block)
		blocks = append(blocks, block[pairs/2])
	}
	calls := float64(len(offL))
	b.ReportMetric(float64((proctest.CPUTime(offS.pid)-offCPU).Nanoseconds())/calls, "off-plugin-cpu-ns/call")
	b.ReportMetric(float64((proctest.CPUTime(onS.pid)-onCPU).Nanoseconds())/calls, "on-plugin-cpu-ns/call")
	slices.Sort(ratios)
	slices.Sort(blocks)
	o50, o99 := offL.quantiles()
	n50, n99 := onL.quantiles()
	b.ReportMetric(float64(o50.Nanoseconds()), "off-p50-ns")
	b.ReportMetric(float64(n50.Nanoseconds()), "on-p50-ns")
	b.ReportMetric(ratios[len(ratios)/2], "pair-ratio")
	b.ReportMetric(blocks[len(blocks)/4], "pair-ratio-q1")
	b.ReportMetric(blocks[len(blocks)*3/4], "pair-ratio-q3")
	b.ReportMetric(float64(n50)/float64(o50), "p50-ratio")
	b.ReportMetric(float64(n99)/float64(o99), "p99-ratio")
}

// BenchmarkLaunchAlternating is BenchmarkLaunch with every kind in one benchmark:
// each iteration launches one bare plugin, eight bare plugins at once, one bare
// plugin that then answers a call, one and eight of the bare plugin built as
// toolhost builds plugins (bare-static), one toolhost plugin and eight toolhost
// plugins at once, so drift hits all alike. It reports each median and the ratios
// the targets name. sandbox=on is the toolhost plugin as shipped (untrusted:
// contained and confined), sandbox=off the same plugin as a plain child
// (sandbox.ModeNone).
func BenchmarkLaunchAlternating(b *testing.B) {
	buildBench(b)
	for _, sb := range []struct {
		name string
		spec sandbox.Spec
	}{{"on", sandbox.Spec{}}, {"off", sandbox.Spec{Mode: sandbox.ModeNone}}} {
		b.Run("sandbox="+sb.name, func(b *testing.B) { benchLaunchAlternating(b, sb.spec) })
	}
}

func benchLaunchAlternating(b *testing.B, spec sandbox.Spec) {
	timed := func(n int, launch func() func()) time.Duration {
		stops := make([]func(), n)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range stops {
			wg.Go(func() { stops[i] = launch() })
		}
		wg.Wait()
		d := time.Since(start)
		for _, stop := range stops {
			if stop != nil {
				stop()
			}
		}
		return d
	}
	bareFrom := func(binary string) func() func() {
		return func() func() {
			_, c, err := launchBare(binary, false)
			if err != nil {
				b.Error(err)
				return nil
			}
			return c.Kill
		}
	}
	bare, static := bareFrom(bareBinary), bareFrom(bareStatic)
	// A bare launch that has also answered a call: Dispense returns before the
	// connection is dialled, where toolhost's launch has made one (the activation).
	msg := &echopb.EchoMessage{Data: []byte(payload(64))}
	bareCalled := func() func() {
		client, c, err := launchBare(bareBinary, false)
		if err == nil {
			_, err = client.Echo(context.Background(), msg)
		}
		if err != nil {
			b.Error(err)
			return nil
		}
		return c.Kill
	}
	var bare1, bare8, bareCall1, static1, static8, toolhost1, toolhost8 latencies
	for b.Loop() {
		bare1 = append(bare1, timed(1, bare))
		bare8 = append(bare8, timed(8, bare))
		bareCall1 = append(bareCall1, timed(1, bareCalled))
		static1 = append(static1, timed(1, static))
		static8 = append(static8, timed(8, static))
		for _, run := range []struct {
			n    int
			into *latencies
		}{{1, &toolhost1}, {8, &toolhost8}} {
			b.StopTimer()
			h := newBenchHost(b)
			b.StartTimer()
			*run.into = append(*run.into, timed(run.n, func() func() {
				if _, err := h.superviseIn(spec); err != nil {
					b.Error(err)
				}
				return nil
			}))
			h.root.Close(context.Background())
		}
	}
	b1, _ := bare1.quantiles()
	b8, _ := bare8.quantiles()
	bc1, _ := bareCall1.quantiles()
	s1, _ := static1.quantiles()
	s8, _ := static8.quantiles()
	t1, _ := toolhost1.quantiles()
	t8, _ := toolhost8.quantiles()
	for name, d := range map[string]time.Duration{"bare-1": b1, "bare-8": b8, "bare-1-call": bc1, "bare-static-1": s1, "bare-static-8": s8, "toolhost-1": t1, "toolhost-8": t8} {
		b.ReportMetric(float64(d)/float64(time.Millisecond), name+"-ms")
	}
	b.ReportMetric(float64(t1)/float64(b1), "toolhost-1/bare-1")
	b.ReportMetric(float64(t1)/float64(bc1), "toolhost-1/bare-1-call")
	b.ReportMetric(float64(t8)/float64(b8), "toolhost-8/bare-8")
	b.ReportMetric(float64(t1)/float64(s1), "toolhost-1/bare-static-1")
	b.ReportMetric(float64(t8)/float64(s8), "toolhost-8/bare-static-8")
	b.ReportMetric(float64(t8)/float64(b1), "toolhost-8/bare-1")
	b.ReportMetric(float64(b8)/float64(b1), "bare-8/bare-1")
}

// BenchmarkLaunch times launches up to the moment the plugins serve: for bare, the
// handshake and Dispense (and, for bare-first-call, one echo call after them); for
// toolhost, Supervise returning (handshake, activation, the Tools capability
// dialled, tools registered and their schemas compiled).
// Stopping the processes, and making the host, are outside the timing. bare/8 starts
// eight bare plugins at once: the floor that eight processes set on this machine.
func BenchmarkLaunch(b *testing.B) {
	buildBench(b)
	b.Run("plugins=1/impl=bare", func(b *testing.B) {
		defer startLaunchCPU().report(b)
		for b.Loop() {
			_, c := startBare(b)
			b.StopTimer()
			c.Kill()
			b.StartTimer()
		}
	})
	b.Run("plugins=1/impl=bare-first-call", func(b *testing.B) {
		// Launched and answering: go-plugin's Dispense returns before the gRPC
		// connection is up, so the bare launch above has not yet dialled it, where
		// toolhost's has already made a call (the activation).
		defer startLaunchCPU().report(b)
		msg := &echopb.EchoMessage{Data: []byte(payload(64))}
		for b.Loop() {
			client, c := startBare(b)
			if _, err := client.Echo(context.Background(), msg); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			c.Kill()
			b.StartTimer()
		}
	})
	b.Run("plugins=8/impl=bare", func(b *testing.B) {
		defer startLaunchCPU().report(b)
		for b.Loop() {
			clients := make([]*plugin.Client, 8)
			var wg sync.WaitGroup
			for i := range clients {
				wg.Go(func() {
					var err error
					if _, clients[i], err = launchBare(bareBinary, false); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			for _, c := range clients {
				if c != nil {
					c.Kill()
				}
			}
			b.StartTimer()
		}
	})
	launch := func(b *testing.B, n int) {
		defer startLaunchCPU().report(b)
		for b.Loop() {
			b.StopTimer()
			h := newBenchHost(b)
			b.StartTimer()
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					if _, err := h.supervise(); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			h.root.Close(context.Background())
			b.StartTimer()
		}
	}
	b.Run("plugins=1/impl=toolhost", func(b *testing.B) { launch(b, 1) })
	b.Run("plugins=8/impl=toolhost", func(b *testing.B) { launch(b, 8) })
}

// BenchmarkHostMemoryPerPlugin reports the host's live heap per loaded plugin.
func BenchmarkHostMemoryPerPlugin(b *testing.B) {
	const n = 8
	measure := func(b *testing.B, load func() func()) {
		var total float64
		for b.Loop() {
			before := heapInUse()
			unload := load()
			total += float64(heapInUse()-before) / n
			unload()
		}
		b.ReportMetric(total/float64(b.N), "heap-B/plugin")
	}
	b.Run("impl=bare", func(b *testing.B) {
		measure(b, func() func() {
			var clients []*plugin.Client
			for range n {
				_, c := startBare(b)
				clients = append(clients, c)
			}
			return func() {
				for _, c := range clients {
					c.Kill()
				}
			}
		})
	})
	b.Run("impl=toolhost", func(b *testing.B) {
		measure(b, func() func() {
			h := newBenchHost(b)
			for range n {
				h.start(b)
			}
			return func() { h.root.Close(context.Background()) }
		})
	})
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

package telemetry_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/location"
	"github.com/toolhost/toolhost/permission"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/telemetry"
)

// BenchmarkTelemetryAlternating calls a plugin's echo tool in blocks of 100, in
// turn through a registry without telemetry and through one with traces and
// metrics on (every call sampled, spans batched to an OTLP receiver in a process
// of its own, as a local collector is, metrics read by a periodic OTLP reader),
// each Location with its own copy of the plugin. It reports each side's median and
// their ratio (on / off), and fails unless the receiver got every span.
//
// It runs against two receivers: the OpenTelemetry Collector's own (otlpreceiver,
// testdata/collector), what an operator runs as the local receiver, and one serving
// the protocol's reference types (testdata/receiver), whose decoding by reflection
// costs several times the Collector's. On a machine of two CPUs the receiver's CPU
// is taken from the calls', so the ratio depends on which receiver runs.
func BenchmarkTelemetryAlternating(b *testing.B) {
	b.Run("receiver=collector", func(b *testing.B) { benchmarkTelemetryAlternating(b, collectorBin(b)) })
	b.Run("receiver=reference", func(b *testing.B) { benchmarkTelemetryAlternating(b, receiverBin) })
}

var collector struct {
	once sync.Once
	bin  string
	err  error
}

// collectorBin builds testdata/collector, a module of its own, once, and returns
// the binary's path.
func collectorBin(b *testing.B) string {
	collector.once.Do(func() {
		collector.bin = filepath.Join(filepath.Dir(receiverBin), "collector")
		out, err := exec.Command("go", "build", "-C", "testdata/collector", "-o", collector.bin, ".").CombinedOutput()
		if err != nil {
			collector.err = fmt.Errorf("build testdata/collector: %v\n%s", err, out)
		}
	})
	if collector.err != nil {
		b.Fatal(collector.err)
	}
	return collector.bin
}

func benchmarkTelemetryAlternating(b *testing.B, receiver string) {
	addr, receiverPid, receivedSpans := startReceiverProcess(b, receiver)
	otlpEnv(b, addr)
	b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	// The loop settles calls back to back, faster than a runner would: on a loaded
	// machine a queue of the default 2048 spans (4 batches) fills while one export
	// waits for the receiver, and the batcher drops spans, as it should, which would
	// fail the count below. The cost per span does not depend on the queue's size.
	b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "16384")
	tel, err := telemetry.Start(b.Context(), telemetry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	shut := false
	defer func() {
		if !shut {
			tel.Shutdown(context.Background())
		}
	}()
	root := scope.New(context.Background())
	defer root.Close(context.Background())
	rules := `[{"action": "*", "resource": "*", "effect": "allow"}]`
	activate := func(reg *registry.Registry, observe func(context.Context, string, permission.Decision)) *registry.Request {
		loc, err := location.Activate(b.Context(), root, workspace(b, `, "trusted": true`, rules), location.Options{
			Registry: reg, StateDir: b.TempDir(), ObservePermission: observe,
		})
		if err != nil {
			b.Fatal(err)
		}
		q, err := loc.Prepare()
		if err != nil {
			b.Fatal(err)
		}
		return q
	}
	off := activate(newRegistry(b, nil), nil)
	offPlugin := newPlugin(b, nil)
	regOn := newRegistry(b, tel.Observer())
	tel.SetStorage(regOn.Storage())
	on := activate(regOn, tel.ObservePermission())
	onPlugin := newPlugin(b, []int{offPlugin})
	pluginCPU := func() (off, on time.Duration) { return proctest.CPUTime(offPlugin), proctest.CPUTime(onPlugin) }
	offPluginStart, onPluginStart := pluginCPU()
	receiverStart := proctest.CPUTime(receiverPid)

	call := registry.Call{Name: "echo", Input: []byte(`{"text":"0123456789012345678901234567890123456789012345678901"}`),
		Invocation: sdk.Invocation{SessionID: "s", ToolCallID: "c"}}
	const block = 100
	var offLat, onLat []time.Duration
	var offUse, onUse usage
	run := func(q *registry.Request, lat *[]time.Duration, u *usage) {
		before := measureUsage()
		defer func() { u.add(before, measureUsage()) }()
		for range block {
			start := time.Now()
			if s, err := q.Settle(context.Background(), call); err != nil || s.Outcome != registry.Completed {
				b.Fatal(s, err)
			}
			*lat = append(*lat, time.Since(start))
		}
	}
	for b.Loop() {
		run(off, &offLat, &offUse)
		run(on, &onLat, &onUse)
	}
	b.StopTimer()
	shut = true
	if err := tel.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	offPluginEnd, onPluginEnd := pluginCPU()
	receiverCPU := proctest.CPUTime(receiverPid) - receiverStart
	// A settlement of a tool without hooks makes 7 spans: itself, 5 steps and the
	// plugin call.
	if got, want := receivedSpans(), int64(7*len(onLat)); got != want {
		b.Fatalf("the receiver got %d spans, want %d (7 for each of %d calls)", got, want, len(onLat))
	}
	slices.Sort(offLat)
	slices.Sort(onLat)
	off50, on50 := offLat[len(offLat)/2], onLat[len(onLat)/2]
	b.ReportMetric(float64(off50.Nanoseconds()), "off-p50-ns")
	b.ReportMetric(float64(on50.Nanoseconds()), "on-p50-ns")
	b.ReportMetric(float64(on50)/float64(off50), "p50-ratio")
	b.ReportMetric(float64(onLat[len(onLat)*99/100])/float64(offLat[len(offLat)*99/100]), "p99-ratio")
	calls := float64(len(onLat))
	b.ReportMetric(float64(offUse.cpu.Nanoseconds())/calls, "off-cpu-ns/call")
	b.ReportMetric(float64(onUse.cpu.Nanoseconds())/calls, "on-cpu-ns/call")
	b.ReportMetric(float64((offPluginEnd-offPluginStart).Nanoseconds())/calls, "off-plugin-cpu-ns/call")
	b.ReportMetric(float64((onPluginEnd-onPluginStart).Nanoseconds())/calls, "on-plugin-cpu-ns/call")
	b.ReportMetric(float64(receiverCPU.Nanoseconds())/calls, "receiver-cpu-ns/call")
	b.ReportMetric(float64(offUse.allocs)/calls, "off-allocs/call")
	b.ReportMetric(float64(onUse.allocs)/calls, "on-allocs/call")
	b.ReportMetric(float64(offUse.bytes)/calls, "off-B/call")
	b.ReportMetric(float64(onUse.bytes)/calls, "on-B/call")
	b.ReportMetric(float64(offUse.gcs), "off-gcs")
	b.ReportMetric(float64(onUse.gcs), "on-gcs")
}

// usage is what this process (host, exporters) spent in blocks of calls: CPU time,
// in clock ticks, and heap allocations. Work the exporters do after an "on" block
// ends may be counted in the next "off" block.
type usage struct {
	cpu    time.Duration
	allocs uint64
	bytes  uint64
	gcs    uint64
}

func measureUsage() usage {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return usage{cpu: proctest.CPUTime(0), allocs: s[0].Value.Uint64(), bytes: s[1].Value.Uint64(), gcs: s[2].Value.Uint64()}
}

func (u *usage) add(before, after usage) {
	u.cpu += after.cpu - before.cpu
	u.allocs += after.allocs - before.allocs
	u.bytes += after.bytes - before.bytes
	u.gcs += after.gcs - before.gcs
}

// startReceiverProcess starts the receiver bin (testdata/receiver or
// testdata/collector) and returns its address, its pid and a function that ends it
// and returns how many spans it received.
func startReceiverProcess(b *testing.B, bin string) (addr string, pid int, spans func() int64) {
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	ended := false
	b.Cleanup(func() {
		if !ended {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	out := bufio.NewScanner(stdout)
	if !out.Scan() {
		b.Fatalf("receiver: no address: %v", out.Err())
	}
	addr, ok := strings.CutPrefix(out.Text(), "listening ")
	if !ok {
		b.Fatalf("receiver said %q, want its address", out.Text())
	}
	return addr, cmd.Process.Pid, func() int64 {
		stdin.Close()
		var n int64
		if out.Scan() {
			fmt.Sscanf(out.Text(), "spans %d", &n)
		}
		ended = true
		if err := cmd.Wait(); err != nil {
			b.Fatalf("receiver: %v", err)
		}
		return n
	}
}

// BenchmarkObservedSettle measures what telemetry adds to a settlement in the host
// alone: an in-process echo tool settled through a registry without an observer
// ("off") and with traces and metrics on ("on": every call sampled, spans batched
// to the receiver process). Compare allocs/op, which load does not disturb. The
// loop ends spans faster than one exporter sends them, so the batcher drops some
// (and says so at the end): the exporter's own share is counted fully only by
// BenchmarkTelemetryAlternating.
func BenchmarkObservedSettle(b *testing.B) {
	addr, _, _ := startReceiverProcess(b, receiverBin)
	otlpEnv(b, addr)
	b.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tel, err := telemetry.Start(b.Context(), telemetry.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	type echoIn struct {
		Text string `json:"text"`
	}
	echo := sdk.NewTool("Echoes the text.", func(_ context.Context, _ sdk.Invocation, in echoIn) (string, error) { return in.Text, nil })
	for _, side := range []struct {
		name string
		obs  registry.Observer
	}{{"off", nil}, {"on", tel.Observer()}} {
		b.Run(side.name, func(b *testing.B) {
			reg := newRegistry(b, side.obs)
			release, err := reg.Register(registry.Batch{Location: registry.Application, Source: registry.Source{Kind: "plugin", Name: "test"},
				Tools: map[string]sdk.Tool{"echo": echo}})
			if err != nil {
				b.Fatal(err)
			}
			defer release()
			q, err := reg.Prepare(registry.Application)
			if err != nil {
				b.Fatal(err)
			}
			call := registry.Call{Name: "echo", Input: []byte(`{"text":"0123456789012345678901234567890123456789012345678901"}`),
				Invocation: sdk.Invocation{SessionID: "s", ToolCallID: "c"}}
			b.ReportAllocs()
			for b.Loop() {
				if s, err := q.Settle(context.Background(), call); err != nil || s.Outcome != registry.Completed {
					b.Fatal(s, err)
				}
			}
		})
	}
}

// newPlugin returns the pid of the one process running testdata/plugin, under its
// sandbox launcher if any, that is not among known.
func newPlugin(b *testing.B, known []int) int {
	for _, pid := range proctest.Children(pluginBin) {
		if p := proctest.Program(pid); !slices.Contains(known, p) {
			return p
		}
	}
	b.Fatal("no new plugin process")
	return 0
}

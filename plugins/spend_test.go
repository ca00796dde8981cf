//go:build unix

package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/proctest"
	isandbox "github.com/toolhost/toolhost/internal/sandbox"
	"github.com/toolhost/toolhost/plugins"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/scope"
	"github.com/toolhost/toolhost/sdk"
	"github.com/toolhost/toolhost/supervise"
)

var (
	spenderOnce sync.Once
	spenderBin  string
	spenderErr  error
)

// spenderBinary builds testdata/spender once, beside the fault plugin.
func spenderBinary(t testing.TB) string {
	t.Helper()
	spenderOnce.Do(func() {
		spenderBin = filepath.Join(filepath.Dir(faultBinary), "spender")
		if out, err := exec.Command("go", "build", "-o", spenderBin, "./testdata/spender").CombinedOutput(); err != nil {
			spenderErr = fmt.Errorf("build the spender plugin: %v\n%s", err, out)
		}
	})
	if spenderErr != nil {
		t.Fatal(spenderErr)
	}
	return spenderBin
}

// startSpender starts the spender plugin, its tools' names prefixed with prefix,
// its config changed by edits.
func (h *host) startSpender(t *testing.T, prefix string, edits ...func(*plugins.Config)) *plugins.Instance {
	t.Helper()
	cfg := plugins.Config{Name: "spender", Path: spenderBinary(t), StartTimeout: 20 * time.Second, StopGrace: 2 * time.Second,
		Options: json.RawMessage(fmt.Sprintf(`{"prefix":%q}`, prefix))}
	for _, edit := range edits {
		edit(&cfg)
	}
	inst, err := plugins.Start(context.Background(), h.root, cfg, h.target(), 1)
	if err != nil {
		t.Fatal(err)
	}
	h.track(inst)
	return inst
}

// callJSON calls a tool and decodes its output into v; a string output is its
// text.
func (h *host) callJSON(t *testing.T, name, input string, v any) {
	t.Helper()
	s := h.mustCall(name, input)
	if s.Outcome != registry.Completed {
		t.Fatalf("%s: %s: %s", name, s.Outcome, s.Text())
	}
	if p, ok := v.(*string); ok {
		*p = s.Text()
		return
	}
	if err := json.Unmarshal([]byte(s.Text()), v); err != nil {
		t.Fatalf("%s: %q: %v", name, s.Text(), err)
	}
}

func TestHugeRegistrationsAreRefusedUnread(t *testing.T) {
	h := newHost(t)
	if _, err := h.supervise(h.config(nil, ""), supervise.Budget{}); err != nil { // a well-behaved neighbour
		t.Fatal(err)
	}
	h.startSpender(t, "s_")
	const mib, n = 24, 8
	for _, conns := range []int{0, 4} { // its own connection; four of its own making
		t.Run(fmt.Sprintf("%dConnections", max(conns, 1)), func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var answers map[string]int
			h.callJSON(t, "s_huge", fmt.Sprintf(`{"mib":%d,"n":%d,"conns":%d}`, mib, n, conns), &answers)
			runtime.ReadMemStats(&after)
			if conns > 0 && isandbox.RefusesConnect(isandbox.Spec{Contain: true, Confine: &isandbox.Confinement{}}) {
				// Without a world its sandbox refuses connect(2), and its broker is
				// multiplexed over the host's one connection: it can make no
				// connection of its own to the host.
				for a := range answers {
					if !strings.HasPrefix(a, "no Tools capability among the sockets") {
						t.Errorf("the plugin, whose sandbox refuses connect(2), made connections of its own: %v", answers)
					}
				}
				return
			}
			refused := 0
			for a, k := range answers {
				t.Logf("%d× %s", k, a)
				if strings.HasPrefix(a, "refused (ResourceExhausted)") && (strings.Contains(a, "larger than max") || strings.Contains(a, "at once")) {
					refused += k
				}
			}
			if refused != n {
				t.Errorf("%d of %d registrations of %d MiB refused for their size or number", refused, n, mib)
			}
			// Together they were 192 MiB: not one of them was read whole.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > mib<<20 {
				t.Errorf("the host allocated %d MiB meanwhile; one registration is %d MiB", grew>>20, mib)
			}
		})
	}
	t.Run("AWellBehavedBatchStillRegisters", func(t *testing.T) {
		var got string
		h.callJSON(t, "s_names", `{"names":["after_the_flood"]}`, &got)
		if got != "registered" {
			t.Fatalf("names: %s", got)
		}
	})
	t.Run("TheNeighbourKeepsWorking", func(t *testing.T) {
		if s := h.mustCall("echo", `{"text":"still here"}`); !strings.Contains(s.Text(), "still here") {
			t.Fatalf("echo: %s", s.Text())
		}
	})
}

// allocated runs f and returns the bytes the host allocated meanwhile.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A plugin streaming a result larger than its budget gets a failed call naming it
// and the limit, and the host stops reading at the budget: it never holds more.
// Within the budget a large result arrives whole, and the budget is given back
// after each call.
func TestStreamedResultsAreBoundedByTheBudget(t *testing.T) {
	h := newHost(t)
	if _, err := h.supervise(h.config(nil, ""), supervise.Budget{}); err != nil { // a well-behaved neighbour
		t.Fatal(err)
	}
	const budget = 16 << 20
	inst := h.startSpender(t, "s_", func(c *plugins.Config) { c.MaxHeldBytes = budget })
	const flood = 512 // MiB
	var err error
	grew := allocated(func() { _, err = h.call(context.Background(), "s_flood", fmt.Sprintf(`{"mib":%d}`, flood)) })
	t.Log(err)
	if err == nil || !strings.Contains(err.Error(), `plugin "spender"`) || !strings.Contains(err.Error(), "max_held_bytes of 16777216") {
		t.Errorf("a %d MiB result: %v; want it refused naming the plugin and max_held_bytes", flood, err)
	}
	// Collecting the result takes about twice what is held (a growing buffer), and
	// the stream's messages are allocated as they arrive.
	if grew > 8*budget {
		t.Errorf("the host allocated %d MiB for a %d MiB result refused at %d MiB", grew>>20, flood, budget>>20)
	}
	t.Logf("the host allocated %d MiB", grew>>20)
	proctest.Until(t, func() bool { return inst.Held() == 0 })

	for range 3 { // within the budget, again and again: what a call held is given back
		if s := h.mustCall("s_flood", `{"mib":12}`); s.Outcome != registry.Completed {
			t.Fatalf("a 12 MiB result within a 16 MiB budget: %s %q", s.Outcome, s.Text())
		}
		proctest.Until(t, func() bool { return inst.Held() == 0 })
	}
	if s := h.mustCall("echo", `{"text":"still here"}`); !strings.Contains(s.Text(), "still here") {
		t.Fatalf("the neighbour: %s", s.Text())
	}
}

// The Interaction capability takes a message no larger than a registration's, and
// refuses a larger one from its length prefix, before it is read.
func TestHugeAsksAreRefusedUnread(t *testing.T) {
	h := newHost(t)
	inst := h.startSpender(t, "", func(c *plugins.Config) { c.Grants = []plugins.Grant{plugins.GrantAsk} })
	const mib, n = 24, 8
	var answers map[string]int
	grew := allocated(func() { h.callJSON(t, "ask", fmt.Sprintf(`{"mib":%d,"n":%d}`, mib, n), &answers) })
	refused := 0
	for a, k := range answers {
		t.Logf("%d× %s", k, a)
		if strings.HasPrefix(a, "refused (ResourceExhausted)") && (strings.Contains(a, "larger than max") || strings.Contains(a, "max_held_bytes")) {
			refused += k
		}
	}
	if refused != n {
		t.Errorf("%d of %d asks of %d MiB refused for their size", refused, n, mib)
	}
	if grew > mib<<20 {
		t.Errorf("the host allocated %d MiB meanwhile; one ask is %d MiB", grew>>20, mib)
	}
	// A small ask is read: nobody is there to answer it.
	answers = nil
	h.callJSON(t, "ask", `{"mib":0,"n":1}`, &answers)
	if len(answers) != 1 || !strings.Contains(fmt.Sprint(answers), "FailedPrecondition") {
		t.Errorf("a small ask: %v; want it read and left unanswered", answers)
	}
	proctest.Until(t, func() bool { return inst.Held() == 0 })
}

func TestCostlySchemasOfAPluginAreRefused(t *testing.T) {
	h := newHost(t)
	h.startSpender(t, "")
	for _, depth := range []int{9000, 2000} {
		var got string
		h.callJSON(t, "deep", fmt.Sprintf(`{"depth":%d}`, depth), &got)
		if !strings.Contains(got, "nest more than 64 deep") {
			t.Errorf("depth %d: %s; want refused naming the limit", depth, got)
		}
		t.Log(got)
	}
	var got string
	if h.callJSON(t, "deep", `{"depth":10}`, &got); got != "registered" {
		t.Errorf("depth 10: %s", got)
	}
}

// builtinRead registers a built-in "read" in h's Location until the test ends.
func builtinRead(t *testing.T, h *host) {
	release, err := h.reg.Register(registry.Batch{Location: h.loc, Source: registry.Source{Kind: "builtin"}, Tools: map[string]sdk.Tool{
		"read": {InputSchema: json.RawMessage(`{}`), Execute: func(context.Context, sdk.Invocation, json.RawMessage) (sdk.Output, error) { return sdk.Output{}, nil }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
}

func TestCaseVariantOfABuiltinIsRefused(t *testing.T) {
	h := newHost(t)
	builtinRead(t, h)
	h.startSpender(t, "")
	for _, name := range []string{"Read", "READ"} {
		var got string
		h.callJSON(t, "names", fmt.Sprintf(`{"names":[%q]}`, name), &got)
		if !strings.Contains(got, `differs only by letter case from "read", which belongs to builtin`) {
			t.Errorf("%s: %s", name, got)
		}
	}
	q, _ := h.reg.Prepare(h.loc)
	for _, d := range q.Definitions() {
		if strings.EqualFold(d.Name, "read") && d.Name != "read" {
			t.Errorf("%s is listed beside the built-in read", d.Name)
		}
	}
}

// spendHost is the host process of TestShutdownDuringARegistrationStorm: it starts
// the spender, sets it storming, says so, and closes everything on SIGTERM,
// printing how the close went.
func spendHost() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	dir := os.Getenv("SPEND_TEST_HOST")
	st, _ := registry.OpenStorage(dir, registry.StorageOptions{})
	reg, _ := registry.New(registry.Options{Storage: st})
	reg.OpenLocation(dir, registry.Limits{})
	root := scope.New(context.Background())
	inst, err := plugins.Start(ctx, root, plugins.Config{Name: "spender", Path: os.Getenv("SPEND_TEST_PLUGIN")},
		plugins.Target{Registry: reg, Location: dir, Directory: dir}, 1)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	q, _ := reg.Prepare(dir)
	s, err := q.Settle(ctx, registry.Call{Name: "storm", Input: json.RawMessage(`{}`)})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(inst.PID(), s.Text())
	<-ctx.Done()
	// No deadline of its own: the test's timeout is the only one. Closing must not
	// wait for a compile.
	if err := root.Close(context.Background()); err != nil {
		fmt.Println("close:", err)
		os.Exit(1)
	}
	fmt.Println("closed")
}

func init() {
	if os.Getenv("SPEND_TEST_HOST") != "" {
		spendHost()
		os.Exit(0)
	}
}

// A host told to stop while a plugin registers costly schemas from eight
// goroutines stops: it closes without waiting for any compile (a 9,000-deep
// schema once kept a host compiling, deaf to SIGTERM, for more than ten minutes).
func TestShutdownDuringARegistrationStorm(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), "SPEND_TEST_HOST="+t.TempDir(), "SPEND_TEST_PLUGIN="+spenderBinary(t))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid int
	var storming string
	if _, err := fmt.Fscan(out, &pid, &storming); err != nil || storming != "storming" {
		t.Fatalf("the host did not set its plugin storming: %v %q", err, storming)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rest strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := out.Read(buf)
		rest.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil || strings.TrimSpace(rest.String()) != "closed" {
		t.Fatalf("the host ended with %v, saying %q; want a clean close", err, rest.String())
	}
	if proctest.Running(pid) {
		t.Errorf("the plugin %d outlived its host", pid)
	}
}

// syncBuffer is a log output written by many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.WriteString(string(p))
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// logCount counts the JSON log lines containing one of markers, and adds up the
// lines the reports of held-back lines counted.
func logCount(t *testing.T, log string, markers ...string) (logged, heldBack int) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var e struct {
			Message string `json:"@message"`
			Lines   int    `json:"lines"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.HasPrefix(e.Message, "log lines held back") {
			heldBack += e.Lines
			continue
		}
		for _, m := range markers {
			if strings.Contains(line, m) {
				logged++
				break
			}
		}
	}
	return logged, heldBack
}

// A plugin's log lines reach the host's log with its name, and a flood of them is
// held back past the plugin's budget and counted: every line is logged or counted.
func TestPluginLogFloodsAreHeldBackAndCounted(t *testing.T) {
	for _, tt := range []struct {
		name, tool, input string
		markers           []string
		total             int
	}{
		{"PlainStderrLines", "stderr", `{"lines":20000,"mode":"fd2"}`, []string{"plain line"}, 20000},
		{"HCLogLinesAndMalformedOnes", "stderr", `{"lines":5000,"mode":"json"}`, []string{"json line", "a string"}, 10000},
		{"RefusedRegistrations", "refuse", `{"n":3000}`, []string{"refused a registration"}, 3000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t)
			builtinRead(t, h) // what "refuse" takes
			out := &syncBuffer{}
			logger := hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info, JSONFormat: true})
			cfg := plugins.Config{Name: "spender", Path: spenderBinary(t), StartTimeout: 20 * time.Second, StopGrace: 2 * time.Second, Logger: logger}
			inst, err := plugins.Start(context.Background(), h.root, cfg, h.target(), 1)
			if err != nil {
				t.Fatal(err)
			}
			h.track(inst)
			if s := h.mustCall(tt.tool, tt.input); s.Outcome != registry.Completed {
				t.Fatalf("%s: %s", tt.tool, s.Text())
			}
			if err := inst.Stop(context.Background()); err != nil { // its stderr read to the end, its budget's report made
				t.Fatal(err)
			}
			log := out.String()
			logged, heldBack := logCount(t, log, tt.markers...)
			t.Logf("%d lines logged (%d bytes of log), %d held back and counted", logged, len(log), heldBack)
			if logged+heldBack != tt.total {
				t.Errorf("%d logged and %d held back of %d lines", logged, heldBack, tt.total)
			}
			if heldBack == 0 {
				t.Errorf("%d bytes of log, none held back: the flood was not bounded", len(log))
			}
			if !strings.Contains(log, `"plugin":"spender"`) {
				t.Errorf("the plugin's lines do not name it:\n%.2000s", log)
			}
		})
	}
	t.Run("LinesOnOsStderrReachTheLog", func(t *testing.T) {
		h := newHost(t)
		out := &syncBuffer{}
		logger := hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info, JSONFormat: true})
		cfg := plugins.Config{Name: "spender", Path: spenderBinary(t), StartTimeout: 20 * time.Second, StopGrace: 2 * time.Second, Logger: logger}
		inst, err := plugins.Start(context.Background(), h.root, cfg, h.target(), 1)
		if err != nil {
			t.Fatal(err)
		}
		h.track(inst)
		h.mustCall("stderr", `{"lines":2,"mode":"os"}`)
		proctest.Until(t, func() bool { return strings.Count(out.String(), "on os.Stderr") == 2 })
		if log := out.String(); !strings.Contains(log, `"plugin":"spender"`) || !strings.Contains(log, `"stream":"stderr"`) {
			t.Errorf("log: %s", log)
		}
	})
}

// gRPC metadata and a status's message travel in HTTP/2 headers, which no message
// limit and no byte budget counts, and which gRPC takes up to 16 MiB a block by
// default. A plugin fails a call with a 12 MiB status message, answers one with
// 12 MiB of trailers, and sends registrations with 12 MiB of metadata each, four at
// once: each is refused before it is read (the host allocates little), the
// failed call's error stays short and names the plugin, and the plugin and its
// neighbour keep working. A defect it reports (a message and a stack of 512 KiB
// each, within a message) is kept short too.
func TestHugeMetadataIsRefusedUnread(t *testing.T) {
	h := newHost(t)
	if _, err := h.supervise(h.config(nil, ""), supervise.Budget{}); err != nil { // a well-behaved neighbour
		t.Fatal(err)
	}
	h.startSpender(t, "s_")
	const mib = 12
	for _, tool := range []string{"s_status", "s_trailers"} {
		t.Run(tool, func(t *testing.T) {
			var s *registry.Settlement
			var err error
			grew := allocated(func() { s, err = h.call(context.Background(), tool, fmt.Sprintf(`{"mib":%d}`, mib)) })
			if err != nil {
				t.Logf("the host allocated %d KiB; %.300s", grew>>10, err)
			}
			if err == nil || !strings.Contains(err.Error(), `plugin "spender"`) {
				t.Errorf("%s: %v, %v; want an error naming the plugin", tool, s, err)
			} else if len(err.Error()) > 8<<10 {
				t.Errorf("%s: the error is %d bytes long", tool, len(err.Error()))
			}
			if grew > 4<<20 {
				t.Errorf("%s: the host allocated %d MiB for %d MiB of headers", tool, grew>>20, mib)
			}
		})
	}
	t.Run("s_metadata", func(t *testing.T) {
		const n = 4
		var answers map[string]int
		grew := allocated(func() { h.callJSON(t, "s_metadata", fmt.Sprintf(`{"mib":%d,"n":%d}`, mib, n), &answers) })
		t.Logf("the host allocated %d KiB; %v", grew>>10, answers)
		if answers["registered"] != 0 {
			t.Errorf("%d of %d registrations with %d MiB of metadata registered", answers["registered"], n, mib)
		}
		if grew > 4<<20 {
			t.Errorf("the host allocated %d MiB for %d registrations with %d MiB of metadata each", grew>>20, n, mib)
		}
	})
	t.Run("s_defect", func(t *testing.T) {
		_, err := h.call(context.Background(), "s_defect", `{"mib":1}`)
		var defect *registry.DefectError
		if !errors.As(err, &defect) || !strings.Contains(err.Error(), `plugin "spender"`) {
			t.Fatalf("a defect of 1 MiB: %.300v; want a DefectError naming the plugin", err)
		}
		if n := len(err.Error()); n > 8<<10 {
			t.Errorf("a defect's message of 512 KiB became an error of %d bytes", n)
		}
		if n := len(defect.Stack); n > 64<<10 {
			t.Errorf("a defect's stack of 512 KiB is kept whole (%d bytes)", n)
		}
	})
	t.Run("EveryoneKeepsWorking", func(t *testing.T) {
		var got string
		h.callJSON(t, "s_names", `{"names":["after_the_headers"]}`, &got)
		if got != "registered" {
			t.Fatalf("names: %s", got)
		}
		if s := h.mustCall("echo", `{"text":"still here"}`); !strings.Contains(s.Text(), "still here") {
			t.Fatalf("echo: %s", s.Text())
		}
	})
}

// A plugin's progress messages are its own text, passed on to whoever watches the
// call (a serve API stream keeps 16 events): reported with 1 MiB messages, they
// arrive cut to 4 KiB, and the call completes.
func TestPluginProgressMessagesAreCut(t *testing.T) {
	h := newHost(t)
	h.startSpender(t, "s_")
	var mu sync.Mutex
	var got []int
	ctx := sdk.WithProgress(t.Context(), func(p sdk.Progress) {
		mu.Lock()
		got = append(got, len(p.Message))
		mu.Unlock()
	})
	if s, err := h.call(ctx, "s_progress", `{"mib":1}`); err != nil || s.Outcome != registry.Completed {
		t.Fatalf("a call with 1 MiB progress messages: %v, %.300v", s, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("no progress reached the caller")
	}
	for _, n := range got {
		if n > 8<<10 {
			t.Errorf("a progress message of 1 MiB reached the caller as %d bytes", n)
		}
	}
	t.Logf("progress message lengths: %v", got)
}

// A tool's title is the plugin's text too, and counts against no limit of the
// registry's: sixteen tools, each registered alone with a title of 8 MiB (within a
// registration message), are refused, and the host holds none of it.
func TestHugeTitlesAreRefused(t *testing.T) {
	h := newHost(t)
	h.startSpender(t, "s_")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var answers map[string]int
	h.callJSON(t, "s_titles", `{"mib":8,"n":16}`, &answers)
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	for a, n := range answers {
		t.Logf("%d× %.200s", n, a)
	}
	if answers["registered"] > 0 {
		t.Errorf("%d of 16 tools with a title of 8 MiB registered", answers["registered"])
	}
	if held > 16<<20 {
		t.Errorf("the host holds %d MiB more after the registrations", held>>20)
	}
	var got string
	h.callJSON(t, "s_names", `{"names":["after_the_titles"]}`, &got)
	if got != "registered" {
		t.Fatalf("names: %s", got)
	}
}

// sampler answers every sample at once, counting them.
type sampler struct{ n atomic.Int64 }

func (s *sampler) Ask(context.Context, sdk.Question) (sdk.Answer, error) {
	return sdk.Answer{}, errors.New("no questions here")
}

func (s *sampler) Sample(context.Context, sdk.SampleRequest) (sdk.SampleResult, error) {
	s.n.Add(1)
	return sdk.SampleResult{Message: sdk.SampleMessage{Role: "assistant", Content: sdk.Text("ok")}}, nil
}

// A plugin granted "sample" asks the runner's model, whose tokens the user pays
// for, as often as it likes unless the host says otherwise: as an MCP server's
// asks are, its asks and samples are held to a token bucket (10 at once, then 20
// a minute), and those past it are refused without reaching anyone, naming the
// limit. The plugin asks 100 times in one call.
func TestPluginAsksPastTheRateAreRefused(t *testing.T) {
	h := newHost(t)
	h.startSpender(t, "", func(c *plugins.Config) { c.Grants = []plugins.Grant{plugins.GrantAsk, plugins.GrantSample} })
	in := &sampler{}
	s, err := h.call(sdk.WithInteractor(t.Context(), in), "samples", `{"n":100}`)
	if err != nil || s.Outcome != registry.Completed {
		t.Fatalf("samples: %v, %v", s, err)
	}
	var answers map[string]int
	if err := json.Unmarshal([]byte(s.Text()), &answers); err != nil {
		t.Fatalf("samples: %q: %v", s.Text(), err)
	}
	refused := 0
	for a, k := range answers {
		t.Logf("%d× %.200s", k, a)
		if strings.HasPrefix(a, "refused (ResourceExhausted)") && strings.Contains(a, "20 a minute") {
			refused += k
		}
	}
	if n := in.n.Load(); n > 11 {
		t.Errorf("%d of 100 samples reached the runner's model", n)
	}
	if refused < 89 {
		t.Errorf("%d of 100 samples refused naming the rate", refused)
	}
}

//go:build unix

package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
	"github.com/toolhost/toolhost/sdk"
)

func init() {
	if mode := os.Getenv("MCP_TEST_HOSTILE"); mode != "" {
		hostileServer(mode)
		os.Exit(0)
	}
}

// hostilePage is the size of what the hostile server pads each message with.
const hostilePage = 256 << 10

// hostileServer is an MCP server on stdio, raw JSON-RPC, that sends the host large
// messages. In mode "noise" its tool "big" prints floodLines lines that are not
// JSON-RPC before it answers. In mode "pages" its tools/list has 100 pages of one tool each, each
// page padded to hostilePage bytes; in mode "big" it lists one tool, "big", whose
// call {"pages": n} is answered with n times hostilePage bytes of text; in mode
// "errors" the same call is answered with a JSON-RPC error whose message and data
// are that long, and in mode "progress" it reports progress three times with a
// message that long before it answers; in mode "liar" it answers initialize with a protocol version no
// one speaks; in mode "titles" it lists beside "big" two tools with a title of
// hostilePage bytes (one in its annotations). In mode
// "asks" its tools "ask" and "echo" put requests of its own to the host
// (askFlood, asks_test.go).
func hostileServer(mode string) {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := &wire{w: bufio.NewWriter(os.Stdout)}
	reply := func(id json.RawMessage, result string) {
		fmt.Fprintf(out.w, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result)
	}
	pad := strings.Repeat("p", hostilePage)
	flood := &askFlood{out: out, waiting: map[string]chan *rpcError{}}
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Error  *rpcError       `json:"error"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Cursor          string `json:"cursor"`
				Name            string `json:"name"`
				Meta            struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
				Arguments struct {
					Pages int `json:"pages"`
					askInput
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil || msg.ID == nil {
			continue // a notification
		}
		if msg.Method == "" {
			flood.answered(msg.ID, msg.Error) // the host's answer to a request of ours
			continue
		}
		out.mu.Lock()
		switch {
		case msg.Method == "initialize" && mode == "liar":
			reply(msg.ID, `{"protocolVersion":"1999-01-01","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}`)
		case msg.Method == "initialize":
			reply(msg.ID, fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}`, msg.Params.ProtocolVersion))
		case msg.Method == "tools/list" && mode == "pages":
			page, _ := strconv.Atoi(msg.Params.Cursor)
			reply(msg.ID, fmt.Sprintf(`{"tools":[{"name":"t%d","inputSchema":{"type":"object"}}],"nextCursor":"%d","_meta":{"pad":%q}}`, page, page+1, pad))
		case msg.Method == "tools/list" && (mode == "wide" || mode == "unfold"):
			reply(msg.ID, wideListing(mode))
		case msg.Method == "tools/list" && mode == "titles":
			title, _ := json.Marshal(pad)
			reply(msg.ID, fmt.Sprintf(`{"tools":[{"name":"big","inputSchema":{"type":"object"}},{"name":"titled","title":%s,"inputSchema":{"type":"object"}},`+
				`{"name":"annotated","annotations":{"title":%s},"inputSchema":{"type":"object"}}]}`, title, title))
		case msg.Method == "tools/list" && mode == "asks":
			reply(msg.ID, `{"tools":[{"name":"ask","inputSchema":{"type":"object"}},{"name":"echo","inputSchema":{"type":"object"}}]}`)
		case msg.Method == "tools/list":
			reply(msg.ID, `{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}`)
		case msg.Method == "tools/call" && mode == "asks" && msg.Params.Name == "echo":
			reply(msg.ID, `{"content":[{"type":"text","text":"echo"}]}`)
		case msg.Method == "tools/call" && mode == "asks":
			flood.start(msg.ID, msg.Params.Arguments.askInput)
		case msg.Method == "tools/call" && mode == "noise":
			for i := range floodLines {
				fmt.Fprintf(out.w, "noise line %d %s\n", i, strings.Repeat("x", 200))
			}
			reply(msg.ID, `{"content":[{"type":"text","text":"noisy"}]}`)
		case msg.Method == "tools/call" && mode == "progress":
			message, _ := json.Marshal(strings.Repeat(pad, msg.Params.Arguments.Pages))
			for i := range 3 {
				fmt.Fprintf(out.w, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%s,"progress":%d,"message":%s}}`+"\n",
					msg.Params.Meta.ProgressToken, i+1, message)
			}
			reply(msg.ID, `{"content":[{"type":"text","text":"done"}]}`)
		case msg.Method == "tools/call" && mode == "errors":
			text := strings.Repeat(pad, msg.Params.Arguments.Pages)
			message, _ := json.Marshal("\x1b]0;owned\x07" + text)
			data, _ := json.Marshal(text)
			fmt.Fprintf(out.w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":%s,"data":%s}}`+"\n", msg.ID, message, data)
		case msg.Method == "tools/call":
			reply(msg.ID, fmt.Sprintf(`{"content":[{"type":"text","text":%q}]}`, strings.Repeat(pad, msg.Params.Arguments.Pages)))
		default:
			reply(msg.ID, `{}`)
		}
		out.w.Flush()
		out.mu.Unlock()
	}
}

// wire is the hostile server's stdout, written by its reading loop and by an
// askFlood's goroutine.
type wire struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// wideListing lists listedTools tools, each with a schema within the limits of
// one: in mode "wide", of 1,000 subschemas written out; in mode "unfold", of 26
// that unfold through "$ref" to about 1,500.
func wideListing(mode string) string {
	var schema strings.Builder
	if mode == "wide" {
		schema.WriteString(`{"type":"object","properties":{`)
		for i := range 999 {
			if i > 0 {
				schema.WriteByte(',')
			}
			fmt.Fprintf(&schema, `"p%d":{}`, i)
		}
		schema.WriteString(`}}`)
	} else {
		schema.WriteString(`{"type":"object","properties":{"a":{"$ref":"#/$defs/d0"}},"$defs":{`)
		for i := range 7 {
			fmt.Fprintf(&schema, `"d%d":{"anyOf":[{"$ref":"#/$defs/d%d"},{"$ref":"#/$defs/d%d"}]},`, i, i+1, i+1)
		}
		schema.WriteString(`"d7":{"type":"integer"}}}`)
	}
	var b strings.Builder
	b.WriteString(`{"tools":[`)
	for i := range listedTools {
		if i > 0 {
			b.WriteByte(',')
		}
		// Each schema is its own (the registry compiles one text once).
		fmt.Fprintf(&b, `{"name":"t%d","inputSchema":{"title":"t%d",%s}`, i, i, schema.String()[1:])
	}
	b.WriteString(`]}`)
	return b.String()
}

// listedTools is how many tools the hostile server's wide listings have: the
// most a server may hold by default.
const listedTools = registry.DefaultMaxTools

func hostileConfig(t *testing.T, mode string, maxHeld int64) mcp.Config {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcp.Config{
		Name: "hostile", Command: self, Args: []string{"-test.run=^$"}, Env: map[string]string{"MCP_TEST_HOSTILE": mode},
		StopGrace: time.Second, MaxMessageBytes: 1 << 20, MaxHeldBytes: maxHeld,
	}
}

// A tools/list whose pages are each within the message cap, but together more than
// the server's max_held_bytes, fails the listing, naming the server and the limit:
// the host held every page read until the listing was applied.
func TestListingPagesAreBoundedByTheBudget(t *testing.T) {
	h := newBareHost(t)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := mcp.Start(t.Context(), h.root, hostileConfig(t, "pages", 2<<20), mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	runtime.ReadMemStats(&after)
	t.Logf("start: %v; the host allocated %d MiB", err, (after.TotalAlloc-before.TotalAlloc)>>20)
	var budget *mcp.BudgetError
	if !errors.As(err, &budget) || budget.Server != "hostile" || budget.Limit != 2<<20 ||
		!strings.Contains(err.Error(), "max_held_bytes of 2097152") {
		t.Fatalf("start = %v; want the listing refused by max_held_bytes, naming the server", err)
	}
}

// A response within the message cap but past the server's budget fails its call,
// naming the server and the limit, and the session goes on: the next call, within
// the budget, completes.
func TestResponsesAreBoundedByTheBudget(t *testing.T) {
	h := newBareHost(t)
	cfg := hostileConfig(t, "big", 1<<20)
	cfg.MaxMessageBytes = 4 << 20
	inst, err := mcp.Start(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.track(inst)
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })

	_, err = h.settle(t.Context(), "hostile_big", `{"pages":8}`)
	var budget *mcp.BudgetError
	if !errors.As(err, &budget) || budget.Server != "hostile" || !strings.Contains(err.Error(), "max_held_bytes of 1048576") {
		t.Fatalf("a 2 MiB response: %v; want it refused by max_held_bytes, naming the server", err)
	}
	if s := mustSettle(t, h, "hostile_big", `{"pages":1}`); s.Outcome != registry.Completed {
		t.Errorf("a call within the budget afterwards: %s %q", s.Outcome, s.Text())
	}
}

// A listing of many tools, each schema within the limits of one, is bounded as a
// whole before any is compiled: the tools past MaxBatchSchemaNodes subschemas in
// all, written out or unfolded through "$ref", are skipped with one warning.
func TestListingCompileCostIsBounded(t *testing.T) {
	for _, mode := range []string{"wide", "unfold"} {
		t.Run(mode, func(t *testing.T) {
			h := newBareHost(t)
			cfg := hostileConfig(t, mode, 0)
			cfg.MaxMessageBytes = 0
			before := cpuTime(t)
			inst, err := mcp.Start(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc}, 1)
			cpu := cpuTime(t) - before
			if err != nil {
				t.Fatal(err)
			}
			h.track(inst)
			t.Cleanup(func() { _ = inst.Stop(context.Background()) })
			registered := len(inst.Tools())
			t.Logf("%d of %d tools registered, host CPU %s while starting", registered, listedTools, cpu)
			var warned bool
			for _, w := range inst.Warnings() {
				warned = warned || strings.Contains(w.Error(), fmt.Sprintf("the listing's schemas pass %d subschemas together", registry.MaxBatchSchemaNodes))
			}
			if !warned || registered == 0 || registered >= listedTools/2 {
				t.Errorf("%d of %d tools registered, warnings %.300v; want the listing cut at %d subschemas with a warning", registered, listedTools, inst.Warnings(), registry.MaxBatchSchemaNodes)
			}
		})
	}
}

// A server printing lines that are not JSON-RPC without pause is logged within its
// log budget: what is held back is counted.
func TestStdoutNoiseIsHeldBackAndCounted(t *testing.T) {
	h := newBareHost(t)
	out := &testio.SyncBuffer{}
	cfg := hostileConfig(t, "noise", 0)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info, JSONFormat: true})
	inst, err := mcp.Start(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.track(inst)
	if st := mustSettle(t, h, "hostile_big", `{}`); st.Outcome != registry.Completed {
		t.Fatalf("noise: %s", st.Text())
	}
	if err := inst.Stop(context.Background()); err != nil { // the budget's last report made
		t.Fatal(err)
	}
	logged, heldBack := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e struct {
			Message string `json:"@message"`
			Lines   int    `json:"lines"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch {
		case strings.HasPrefix(e.Message, "log lines held back"):
			heldBack += e.Lines
		case strings.HasPrefix(e.Message, "skipping a line on the server's stdout"):
			logged++
		}
	}
	t.Logf("%d noise lines logged (%d bytes of log), %d held back and counted", logged, len(out.String()), heldBack)
	if heldBack == 0 || logged+heldBack != floodLines {
		t.Errorf("%d logged and %d held back of %d lines: want the noise held back and counted", logged, heldBack, floodLines)
	}
}

// A server's JSON-RPC error is its own text: answered with an error of a 1 MiB
// message and 1 MiB of data (within the message cap), the call fails with an error that names the server and
// stays short, and the session goes on.
func TestServerErrorTextsAreBounded(t *testing.T) {
	h := newBareHost(t)
	cfg := hostileConfig(t, "errors", 16<<20)
	cfg.MaxMessageBytes = 4 << 20
	inst, err := mcp.Start(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.track(inst)
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })

	for range 2 {
		_, err = h.settle(t.Context(), "hostile_big", `{"pages":4}`)
		var call *mcp.CallError
		if !errors.As(err, &call) || call.Server != "hostile" {
			t.Fatalf("a 1 MiB error: %.300v; want a CallError naming the server", err)
		}
		if n := len(err.Error()); n > 8<<10 {
			t.Errorf("a 1 MiB error message from the server became a %d-byte error: %.300s", n, err)
		}
		t.Logf("%.300q", err.Error())
	}
}

// A server that answers initialize with a protocol version the host does not
// speak does not start, and the error names the server and the version.
func TestServerThatLiesAboutItsProtocolDoesNotStart(t *testing.T) {
	h := newBareHost(t)
	_, err := mcp.Start(t.Context(), h.root, hostileConfig(t, "liar", 0), mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err == nil || !strings.Contains(err.Error(), `"hostile"`) || !strings.Contains(err.Error(), "1999-01-01") {
		t.Fatalf("a server that answers initialize with protocol version 1999-01-01: %v; want a start error naming the server and the version", err)
	}
	t.Log(err)
	if got := h.names(); len(got) != 0 {
		t.Errorf("its tools: %v", got)
	}
}

// A server's progress messages are its own text, passed on to whoever watches the
// call (a serve API stream keeps 16 events, an MCP client gets each): reported
// with 1 MiB messages (within the message cap, never held by the budget), they
// arrive cut to 4 KiB, and the call completes.
func TestProgressMessagesAreCut(t *testing.T) {
	h := newBareHost(t)
	cfg := hostileConfig(t, "progress", 16<<20)
	cfg.MaxMessageBytes = 4 << 20
	inst, err := mcp.Start(t.Context(), h.root, cfg, mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.track(inst)
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })

	var mu sync.Mutex
	var got []int
	ctx := sdk.WithProgress(t.Context(), func(p sdk.Progress) {
		mu.Lock()
		got = append(got, len(p.Message))
		mu.Unlock()
	})
	if s, err := h.settle(ctx, "hostile_big", `{"pages":4}`); err != nil || s.Outcome != registry.Completed {
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

// A listed tool's title counts against no limit of the registry's: a tool whose
// title (its own or its annotations') is 256 KiB is skipped with a warning, and
// the server's other tool serves.
func TestHugeTitlesAreSkipped(t *testing.T) {
	h := newBareHost(t)
	inst, err := mcp.Start(t.Context(), h.root, hostileConfig(t, "titles", 0), mcp.Target{Registry: h.reg, Location: h.loc}, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.track(inst)
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })
	got := h.names()
	if !got["hostile_big"] || got["hostile_titled"] || got["hostile_annotated"] {
		t.Errorf("tools: %v; want hostile_big alone", got)
	}
	for _, w := range inst.Warnings() {
		t.Logf("%.200s", w)
	}
}

//go:build unix

package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
)

func init() {
	if os.Getenv("MCP_TEST_RELIST") != "" {
		relistServer()
		os.Exit(0)
	}
}

// relistServer is an MCP server on stdio, raw JSON-RPC, whose every tools/list
// lists MCP_TEST_RELIST tools, each with a schema of its own that changes with every
// listing (so nothing of one listing can be kept for the next), and the tools
// "storm", after which it answers each of the next {"n"} tools/list with a
// notifications/tools/list_changed at once (a loop: each listing asks for the
// next), and "listings", which says how many tools/list it answered.
func relistServer() {
	count, _ := strconv.Atoi(os.Getenv("MCP_TEST_RELIST"))
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	reply := func(id json.RawMessage, result string) {
		fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result)
	}
	listings, storm := 0, 0
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Name            string `json:"name"`
				Arguments       struct{ N int }
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil || msg.ID == nil {
			continue // a notification
		}
		switch msg.Method {
		case "initialize":
			reply(msg.ID, fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"relist","version":"1"}}`, msg.Params.ProtocolVersion))
		case "tools/list":
			listings++
			var b strings.Builder
			b.WriteString(`{"tools":[{"name":"storm","inputSchema":{"type":"object"}},{"name":"listings","inputSchema":{"type":"object"}}`)
			for i := range count {
				fmt.Fprintf(&b, `,{"name":"t%d","inputSchema":{"type":"object","properties":{"l%d":{"type":"string","pattern":"^a+$"},"x":{"anyOf":[{"type":"integer"},{"type":"string"}]}}}}`, i, listings)
			}
			b.WriteString("]}")
			reply(msg.ID, b.String())
			if storm > 0 {
				storm--
				fmt.Fprintln(out, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			}
		case "tools/call":
			switch msg.Params.Name {
			case "storm":
				storm = msg.Params.Arguments.N
				reply(msg.ID, `{"content":[{"type":"text","text":"stormed"}]}`)
				fmt.Fprintln(out, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			case "listings":
				reply(msg.ID, fmt.Sprintf(`{"content":[{"type":"text","text":"%d"}]}`, listings))
			}
		default:
			reply(msg.ID, `{}`)
		}
		out.Flush()
	}
}

// cpuTime is the CPU time this process has used.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A server listing more tools than max_tools has the rest ignored before they are
// compiled, and a server announcing tools/list_changed without pause has its tools
// listed again a few times at once, then once a second, the notifications coalesced
// and counted in the log; its tools still work.
func TestAListChangedStormIsPaced(t *testing.T) {
	h := newBareHost(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := &testio.SyncBuffer{}
	const maxTools = 40
	s := h.supervise(mcp.Config{
		Name: "relist", Command: self, Args: []string{"-test.run=^$"}, Env: map[string]string{"MCP_TEST_RELIST": "200"},
		StopGrace: time.Second, Limits: registry.SourceLimits{MaxTools: maxTools},
		Logger: hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info, JSONFormat: true}),
	})
	inst := s.Current()
	if n := len(inst.Tools()); n != maxTools {
		t.Errorf("%d tools registered of 202 listed; want max_tools, %d", n, maxTools)
	}
	if w := fmt.Sprint(inst.Warnings()); !strings.Contains(w, "more than max_tools (40)") {
		t.Errorf("warnings: %s; want the listing cut at max_tools", w)
	}

	const storm = 1000
	before, began := cpuTime(t), time.Now()
	listed, _ := inst.Listed()
	mustSettle(t, h, "relist_storm", fmt.Sprintf(`{"n":%d}`, storm))
	waitListed(t, inst, func() bool { n, _ := inst.Listed(); return n >= listed+8 }) // past the burst: paced
	spent, took := cpuTime(t)-before, time.Since(began)
	var listings int
	if n, err := strconv.Atoi(mustSettle(t, h, "relist_listings", `{}`).Text()); err != nil {
		t.Fatal(err)
	} else {
		listings = n - 1 // the first one, at the start
	}
	t.Logf("a loop of %d notifications: %d listings in %s, %s of host CPU", storm, listings, took.Round(time.Millisecond), spent.Round(time.Millisecond))
	// Four at once, then one a second: the bound is computed from what elapsed.
	if most := 4 + int(took/time.Second) + 2; listings > most {
		t.Errorf("%d listings in %s; want at most %d", listings, took, most)
	}
	if !strings.Contains(out.String(), "notifications coalesced") {
		t.Errorf("no log line counts the coalesced notifications:\n%.3000s", out.String())
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

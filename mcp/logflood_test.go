package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/mcp"
	"github.com/toolhost/toolhost/registry"
)

// floodLines is how many notifications/message the flooding server sends per call.
const floodLines = 20000

func init() {
	if os.Getenv("MCP_TEST_LOG_FLOOD") != "" {
		floodServer()
		os.Exit(0)
	}
}

// floodServer is an MCP server on stdio, raw JSON-RPC, with one tool, "flood", that
// sends floodLines notifications/message without pause before it answers.
func floodServer() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	reply := func(id json.RawMessage, result string) {
		fmt.Fprintf(out, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", id, result)
	}
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil || msg.ID == nil {
			continue // a notification
		}
		switch msg.Method {
		case "initialize":
			reply(msg.ID, fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{},"logging":{}},"serverInfo":{"name":"flood","version":"1"}}`, msg.Params.ProtocolVersion))
		case "tools/list":
			reply(msg.ID, `{"tools":[{"name":"flood","inputSchema":{"type":"object"}}]}`)
		case "tools/call":
			for i := range floodLines {
				fmt.Fprintf(out, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","logger":"flood","data":"flood line %d %s"}}`+"\n", i, strings.Repeat("x", 200))
			}
			reply(msg.ID, `{"content":[{"type":"text","text":"flooded"}]}`)
		default:
			reply(msg.ID, `{}`)
		}
		out.Flush()
	}
}

// A server sending notifications/message without pause is held back past its log
// budget, and what was held back is counted.
func TestServerLogFloodsAreHeldBackAndCounted(t *testing.T) {
	h := newBareHost(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := &testio.SyncBuffer{}
	s := h.supervise(mcp.Config{
		Name: "flood", Command: self, Args: []string{"-test.run=^$"}, Env: map[string]string{"MCP_TEST_LOG_FLOOD": "1"},
		StopGrace: time.Second, Logger: hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Info, JSONFormat: true}),
	})
	if st := mustSettle(t, h, "flood_flood", `{}`); st.Outcome != registry.Completed {
		t.Fatalf("flood: %s", st.Text())
	}
	if err := s.Close(context.Background()); err != nil { // the budget's last report made
		t.Fatal(err)
	}
	logged, heldBack := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e struct {
			Message string `json:"@message"`
			Server  string `json:"server"`
			Data    string `json:"data"`
			Lines   int    `json:"lines"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		switch {
		case strings.HasPrefix(e.Message, "log lines held back"):
			heldBack += e.Lines
		case e.Message == "server log" && e.Server == "flood" && strings.Contains(e.Data, "flood line"):
			logged++
		}
	}
	t.Logf("%d notifications logged (%d bytes of log), %d held back and counted", logged, len(out.String()), heldBack)
	if heldBack == 0 || logged+heldBack > floodLines || logged+heldBack < floodLines*9/10 {
		t.Errorf("%d logged and %d held back of %d notifications: want the flood held back and counted", logged, heldBack, floodLines)
	}
}

package mcp

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/toolhost/toolhost/internal/loglimit"
)

// TestGatedEventStream: what the SDK reads of a server's event stream. A retry
// field asking to reconnect sooner than minRetry is raised to it (a server that
// ends its stream at once cannot make the host reconnect in a loop); an event
// the gate drops keeps its id (the SDK resumes from it); an id too long to send
// back, comments and lines that are not fields are left out; a message is
// passed on one line.
func TestGatedEventStream(t *testing.T) {
	logs := loglimit.New(hclog.NewNullLogger(), 0, 0)
	defer logs.Close()
	var notified []string
	g := newGate("srv", 1<<20, func(method string, _ json.RawMessage) { notified = append(notified, method) }, logs)
	l := &httpLink{server: "srv", limit: 1 << 10, gate: g, logs: logs}
	stream := strings.Join([]string{
		": a comment",
		"id: 1",
		"retry: 1",
		`data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`,
		"",
		"not a field",
		"id: " + strings.Repeat("9", 2*maxFieldBytes),
		`data: {"jsonrpc":"2.0",`,
		`data:  "method":"notifications/unknown"}`,
		"",
		"id: 3",
		"retry: 5000",
		`data: {"jsonrpc":"2.0","id":"r1",`,
		`data: "method":"ping"}`,
		"",
	}, "\n")
	body := &gatedBody{l: l, body: io.NopCloser(nil), r: bufio.NewReader(strings.NewReader(stream)), sse: true}
	got, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	want := "id: 1\nretry: 100\n\n" +
		"id: 3\nretry: 5000\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"r1\",\"method\":\"ping\"}\n\n"
	if string(got) != want {
		t.Errorf("the SDK reads\n%q\nwant\n%q", got, want)
	}
	if len(notified) != 1 || notified[0] != notifyToolsListed {
		t.Errorf("notified %v; want the list change handled as read", notified)
	}
}

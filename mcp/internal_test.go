package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolhost/toolhost/internal/loglimit"
)

func TestToolName(t *testing.T) {
	long := strings.Repeat("x", 70)
	sum := sha256.Sum256([]byte("srv_" + long))
	for _, tc := range []struct{ server, tool, want string }{
		{"srv", "echo", "srv_echo"},
		{"srv", "get-tiny-image", "srv_get-tiny-image"},
		{"srv", "files.read all", "srv_files_read_all"},
		{"srv", long, ("srv_" + long)[:55] + "_" + hex.EncodeToString(sum[:4])},
	} {
		got, err := ToolName(tc.server, tc.tool)
		if err != nil || got != tc.want {
			t.Errorf("ToolName(%q, %q) = %q, %v; want %q", tc.server, tc.tool, got, err, tc.want)
		}
		if len(got) > 64 {
			t.Errorf("%q is over 64 characters", got)
		}
	}
	a, _ := ToolName("srv", long+"a")
	b, _ := ToolName("srv", long+"b")
	if a == b {
		t.Errorf("tools differing past the cut share the name %q", a)
	}
	if _, err := ToolName("1srv", "x"); err == nil {
		t.Error("a name not starting with a letter was accepted")
	}
}

func TestArguments(t *testing.T) {
	for in, want := range map[string]string{"": "{}", "null": "{}", " {\"a\":1} ": `{"a":1}`} {
		got, err := arguments(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("arguments(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := arguments(json.RawMessage(`[1]`)); err == nil {
		t.Error("an array was accepted as arguments")
	}
}

func TestIDScanner(t *testing.T) {
	for _, tc := range []struct {
		msg, id          string
		method, response bool
	}{
		{`{"result":{"id":9,"s":"}\",{"},"jsonrpc":"2.0","id":5}`, "5", false, true},
		{`{"jsonrpc":"2.0", "id" : "a\"b" ,"result":1}`, `"a\"b"`, false, true},
		{`{"jsonrpc":"2.0","id":-3,"error":{"code":1,"message":"m"}}`, "-3", false, true},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"id":1}}`, "", true, false},
		{`{"jsonrpc":"2.0","id":7,"method":"ping"}`, "7", true, false},
		{`[{"id":1,"result":2}]`, "", false, false},
	} {
		var s idScanner
		s.feed([]byte(tc.msg))
		if string(s.id) != tc.id || s.method != tc.method || s.response != tc.response {
			t.Errorf("%s: id %q method %v response %v; want %q %v %v", tc.msg, s.id, s.method, s.response, tc.id, tc.method, tc.response)
		}
	}
}

// FuzzIDScanner checks the streaming scanner against encoding/json on any object.
func FuzzIDScanner(f *testing.F) {
	f.Add(`{"result":{"content":[{"type":"text","text":"x"}]},"jsonrpc":"2.0","id":12}`)
	f.Add(`{"id":"x","error":{}}`)
	f.Add(`{"method":"a","id":1e3}`)
	f.Fuzz(func(t *testing.T, msg string) {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(msg), &m) != nil || strings.Contains(msg, `\`) {
			return // not an object, or keys the scanner does not unescape
		}
		var s idScanner
		for b := []byte(msg); len(b) > 0; { // chunk boundaries must not matter
			n := min(len(b), 3)
			s.feed(b[:n])
			b = b[n:]
		}
		_, method := m["method"]
		_, result := m["result"]
		_, errField := m["error"]
		if s.method != method || s.response != (result || errField) {
			t.Errorf("method %v response %v; want %v %v", s.method, s.response, method, result || errField)
		}
		if id, ok := m["id"]; ok && len(id) <= maxIDLen && !bytes.Equal(bytes.TrimSpace(id), s.id) {
			t.Errorf("id %q, want %q", s.id, id)
		}
	})
}

// TestConnOversizedResponse feeds a real pipe: an oversized response becomes an
// error response for its id, and the next message is read normally.
func TestConnOversizedResponse(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sink, sinkW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	logs := loglimit.New(hclog.NewNullLogger(), 0, 0)
	defer logs.Close()
	g := newGate("srv", 1<<20, func(string, json.RawMessage) {}, logs)
	for _, n := range []float64{4, 5} { // the host's calls these answer
		id, _ := jsonrpc.MakeID(n)
		g.sent(t.Context(), &jsonrpc.Request{ID: id, Method: "tools/call"})
	}
	c := newConn("srv", 1000, logs, g, sinkW, r)
	big := `{"result":{"content":[{"type":"text","text":"` + strings.Repeat("y", 5000) + `"}]},"jsonrpc":"2.0","id":4}`
	go func() {
		io.WriteString(w, big+"\n")
		io.WriteString(w, "not json at all\n")
		io.WriteString(w, `{"result":{},"jsonrpc":"2.0","id":5}`+"\n")
		w.Close()
	}()
	ctx := context.Background()
	msg, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := msg.(*jsonrpc.Response)
	var tooLarge *MessageTooLargeError
	if !ok || resp.ID.Raw() != int64(4) || !errors.As(resp.Error, &tooLarge) || tooLarge.Size != int64(len(big)) || tooLarge.Limit != 1000 {
		t.Fatalf("first message = %#v (%v), want an error response for id 4 stating sizes", msg, resp.Error)
	}
	msg, err = c.Read(ctx)
	if resp, ok := msg.(*jsonrpc.Response); err != nil || !ok || resp.ID.Raw() != int64(5) || resp.Error != nil {
		t.Fatalf("second message = %#v, %v; want the response for id 5 (the noise skipped)", msg, err)
	}
	if _, err := c.Read(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("at the end: err = %v, want EOF", err)
	}
	c.Close()
	<-c.done
}

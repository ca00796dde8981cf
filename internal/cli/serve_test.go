package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolhost/toolhost/client"
	"github.com/toolhost/toolhost/internal/cli"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/sdk"
)

func TestServeUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"TCPBeyondLoopback", []string{"serve", "--tcp", "0.0.0.0:0"}, "beyond loopback"},
		{"TCPAnyHost", []string{"serve", "--tcp", ":0"}, "beyond loopback"},
		{"TokenFileWithoutTCP", []string{"serve", "--token-file", "t"}, "--token-file goes with --tcp"},
		{"SocketAndTCP", []string{"serve", "--socket", "s", "--tcp", "127.0.0.1:0"}, "exclude each other"},
		{"ExtraArgument", []string{"serve", "extra"}, "unexpected arguments"},
		{"DevWithoutLocation", []string{"dev"}, "missing --location"},
		{"DevBadDebounce", []string{"dev", "--location", ".", "--debounce", "soon"}, "invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, "", tt.args...)
			r.want(t, cli.ExitUsage)
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr does not contain %q:\n%s", tt.want, r.stderr)
			}
		})
	}
}

func TestServeHelp(t *testing.T) {
	for _, cmd := range []string{"serve", "dev"} {
		r := run(t, "", "help", cmd)
		r.want(t, cli.ExitOK)
		if !strings.Contains(r.stdout, "usage: toolhost "+cmd) || !strings.Contains(r.stdout, "-tcp") {
			t.Errorf("help %s:\n%s", cmd, r.stdout)
		}
	}
	if r := run(t, "", "help"); !strings.Contains(r.stdout, "serve ") || !strings.Contains(r.stdout, "dev ") {
		t.Errorf("usage does not list serve and dev:\n%s", r.stdout)
	}
}

// lineWriter is a stdout that signals when a line with a prefix was written.
type lineWriter struct {
	mu     sync.Mutex
	b      bytes.Buffer
	prefix string
	line   chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	complete, _ := cutLast(w.b.String(), "\n")
	for _, l := range strings.Split(complete, "\n") {
		if rest, ok := strings.CutPrefix(l, w.prefix); ok && w.line != nil {
			w.line <- rest
			w.line = nil
		}
	}
	return n, err
}

// cutLast cuts s around the last sep.
func cutLast(s, sep string) (before, after string) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return "", s
	}
	return s[:i], s[i+len(sep):]
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestServeInProcess(t *testing.T) {
	dir := workspace(t, "")
	sockDir, err := os.MkdirTemp("", "cli")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	socket := filepath.Join(sockDir, "s.sock")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	serving := make(chan string, 1)
	stdout := &lineWriter{prefix: "", line: serving} // the first line
	stderr := &watchWriter{}
	code := make(chan int, 1)
	go func() {
		code <- cli.Run(ctx, []string{"serve", "--socket", socket, "--location", dir}, strings.NewReader(""), stdout, stderr)
	}()
	var addr string
	select {
	case addr = <-serving:
	case c := <-code:
		t.Fatalf("serve exited with %d:\n%s", c, stderr.String())
	}
	addr, _ = strings.CutPrefix(addr, "serving on ")
	if addr != "unix://"+socket {
		t.Fatalf("first line of stdout: %q", addr)
	}
	c, err := client.Dial(t.Context(), addr, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req, err := c.PrepareRequest(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Settle(t.Context(), req.ID, client.Call{Name: "echo", Input: json.RawMessage(`{"text":"served"}`), Invocation: sdk.Invocation{ToolCallID: "c1"}}, nil)
	if err != nil || s.Text() != "echo: served" {
		t.Fatalf("echo: %+v, %v", s, err)
	}
	cancel() // what SIGINT or SIGTERM does
	if got := <-code; got != cli.ExitOK {
		t.Fatalf("serve exited with %d after the signal:\n%s", got, stderr.String())
	}
	if lines := strings.Split(stdout.String(), "\n"); len(lines) < 2 || !strings.HasPrefix(lines[1], "location "+dir+": ") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	if pids := proctest.Children(pluginBin); len(pids) != 0 {
		t.Errorf("plugin processes left: %v", pids)
	}
	if _, err := os.Stat(socket); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

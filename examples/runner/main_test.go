//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunner builds toolhost and the runner, and runs the runner: it starts a real
// `toolhost serve`, which builds and starts the example workspace's plugins.
func TestRunner(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example plugins")
	}
	bin := t.TempDir()
	for pkg, out := range map[string]string{"../../cmd/host": "toolhost", ".": "runner"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, out), pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "runner"), "--toolhost", filepath.Join(bin, "toolhost"), "--workspace", "../workspace")
	data := t.TempDir()
	cmd.Env = append(os.Environ(),
		"TOOLHOST_BUILD_CACHE="+filepath.Join(data, "build"),
		"TOOLHOST_OUTPUT_DIR="+filepath.Join(data, "output"),
		"XDG_DATA_HOME="+filepath.Join(data, "share"),
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("runner output:\n%s", out)
	if err != nil {
		t.Fatalf("runner: %v\n%s", err, stderr.String())
	}
	for _, want := range []string{
		`call_1 upper: completed: HELLO FROM THE RUNNER`,
		`call_2 countdown: progress 3/10`,
		`call_2 countdown: interrupted`,
		`call_3 feature_toggle: permission asked for "feature_toggle"`,
		`call_3 feature_toggle: completed: Beta tools are on`,
		`call_4 find: tool_failure: pattern "("`,
		`a new Request now offers beta_echo`,
		`toolhost serve stopped (exit status 0)`,
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("output lacks %q", want)
		}
	}
	// The countdown was cancelled mid-way: it never reached its end.
	if bytes.Contains(out, []byte("Lift-off")) {
		t.Error("the cancelled countdown completed")
	}
	// Every plugin process the runner's serve started is gone.
	pids := regexp.MustCompile(`plugin \w+: running, generation 1, pid (\d+)`).FindAllSubmatch(out, -1)
	if len(pids) == 0 {
		t.Fatal("no plugin pids printed")
	}
	for _, m := range pids {
		pid, _ := strconv.Atoi(string(m[1]))
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("plugin process %d survived serve's shutdown", pid)
		}
	}
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, "[ERROR]") {
			t.Errorf("serve logged an error: %s", line)
		}
	}
}

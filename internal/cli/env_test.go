//go:build unix

package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPluginSocketsIgnoreAnUnfitRuntimeDir: a relative XDG_RUNTIME_DIR (invalid,
// says the XDG spec) and one too long for a unix socket path under it are passed
// over for the next socket directory: the plugin starts, and nothing is written to
// the relative directory.
func TestPluginSocketsIgnoreAnUnfitRuntimeDir(t *testing.T) {
	cwd := t.TempDir()
	long := filepath.Join(cwd, strings.Repeat("r", 100))
	for _, dir := range []string{filepath.Join(cwd, "rel"), long} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	loc := workspace(t, "")
	for name, runtimeDir := range map[string]string{"Relative": "rel", "TooLong": long} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(os.Args[0], "tools", "--location", loc)
			cmd.Env = append(os.Environ(), mainEnv+"=1", "XDG_RUNTIME_DIR="+runtimeDir)
			cmd.Dir, cmd.Stdout, cmd.Stderr = cwd, &stdout, &stderr
			if err := cmd.Run(); err != nil || !strings.Contains(stdout.String(), "echo ") {
				t.Fatalf("tools with XDG_RUNTIME_DIR=%s: %v\n%s%s", runtimeDir, err, stdout.String(), stderr.String())
			}
			for _, dir := range []string{filepath.Join(cwd, "rel"), long} {
				if entries, _ := os.ReadDir(dir); len(entries) != 0 {
					t.Errorf("%s holds %v", dir, entries)
				}
			}
		})
	}
}

// TestNoHomeSaysWhatToSet: with HOME, XDG_DATA_HOME and TOOLHOST_OUTPUT_DIR unset
// there is no managed output directory: call fails at once, saying which variables
// would give one, and writes nothing to its working directory.
func TestNoHomeSaysWhatToSet(t *testing.T) {
	cwd := t.TempDir()
	loc := workspace(t, "")
	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "HOME" && name != "XDG_DATA_HOME" && name != "TOOLHOST_OUTPUT_DIR" {
			env = append(env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "call", "--location", loc, "echo", `{"text": "x"}`)
	cmd.Env = append(env, mainEnv+"=1")
	cmd.Dir, cmd.Stderr = cwd, &stderr
	err := cmd.Run()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(stderr.String(), "set TOOLHOST_OUTPUT_DIR, XDG_DATA_HOME (an absolute path) or HOME") {
		t.Fatalf("call without HOME: %v\n%s", err, stderr.String())
	}
	if entries, _ := os.ReadDir(cwd); len(entries) != 0 {
		t.Errorf("call wrote %v to its working directory", entries)
	}
	t.Log(strings.TrimSpace(stderr.String()))
}

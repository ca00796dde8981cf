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

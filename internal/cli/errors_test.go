package cli_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/internal/cli"
)

// TestErrorTexts asserts what a person reads when something cannot run: each layer
// adds only what it knows, so the path, the name and the exit status appear once in
// a message, and a failing source is reported once on stdout (the listing) and once
// on stderr (the log).
func TestErrorTexts(t *testing.T) {
	t.Run("MissingMCPCommand", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "gone")
		dir := workspace(t, fmt.Sprintf(`{"mcp_servers": [{"name": "gone", "command": %q}]}`, missing))
		r := run(t, "", "tools", "--location", dir)
		r.want(t, cli.ExitPartial)
		// Restarting, or failed once the retries are spent.
		want := regexp.MustCompile(`(?m)^mcp:gone: (restarting|failed): (not restarting after \d+ crashes within 1m0s: )?` +
			regexp.QuoteMeta(`mcp: start server "gone": command `+missing+`: file does not exist`) + `$`)
		if !want.MatchString(r.stdout) {
			t.Errorf("stdout does not report the missing command as wanted (%s):\n%s", want, r.stdout)
		}
		reportedOnce(t, r, missing)
	})

	t.Run("PluginExitsDuringActivation", func(t *testing.T) {
		dir := workspace(t, fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "env": {"EXIT_IN_ACTIVATION": "1"}}]}`, pluginBin))
		r := run(t, "", "tools", "--location", dir)
		r.want(t, cli.ExitPartial)
		want := regexp.MustCompile(`(?m)^plugin:test: (restarting|failed): (not restarting after \d+ crashes within 1m0s: )?` +
			regexp.QuoteMeta(`plugins: plugin "test" did not start: the plugin exited before it finished its activation (exit status 3`) +
			`[^\n]*\n  plugin stderr \(last lines\):\n    plugin: cannot open the cache database$`)
		if !want.MatchString(r.stdout) {
			t.Errorf("stdout does not report the exit as wanted (%s):\n%s", want, r.stdout)
		}
		reportedOnce(t, r, "cannot open the cache database")
		for _, line := range strings.Split(r.stdout, "\n") {
			if n := strings.Count(line, "exit status"); n > 1 {
				t.Errorf("the exit status appears %d times in %q", n, line)
			}
		}
	})

	t.Run("DeadServeSocket", func(t *testing.T) {
		socket := filepath.Join(t.TempDir(), "none.sock")
		r := run(t, "", "tools", "--socket", socket)
		r.want(t, cli.ExitFailure)
		want := "toolhost tools: no toolhost serve or dev answers on " + socket +
			" (no such file or directory): start one, or check the address\n"
		if r.stderr != want {
			t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, want)
		}
	})
}

// reportedOnce checks that what appears once in a message (a path, a plugin's
// complaint) is on one line of stdout and at most one line of stderr, and never twice
// on one line.
func reportedOnce(t *testing.T, r result, what string) {
	t.Helper()
	for name, out := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
		lines := 0
		for _, line := range strings.Split(out, "\n") {
			switch n := strings.Count(line, what); {
			case n > 1:
				t.Errorf("%s repeats %q on one line: %q", name, what, line)
			case n == 1:
				lines++
			}
		}
		if lines > 1 || name == "stdout" && lines == 0 {
			t.Errorf("%s reports %q on %d lines, want once:\n%s", name, what, lines, out)
		}
	}
}

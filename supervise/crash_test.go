package supervise_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolhost/toolhost/supervise"
)

// A crash's message, for a person, names the program, how it ended, its last stderr
// lines and what happens next; errors.As finds it through wrapping.
func TestCrashErrorSaysWhatEndedAndWhy(t *testing.T) {
	var err error = &supervise.CrashError{Kind: "MCP server", Name: "files", Generation: 3, Status: "exit status 2",
		Stderr: "starting\npanic: no config\n"}
	err = fmt.Errorf("call read: %w", err)
	msg := err.Error()
	for _, want := range []string{`MCP server "files" (generation 3) ended unexpectedly: exit status 2`, "restarts it", "MCP server stderr (last lines):\n  starting\n  panic: no config"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	var crash *supervise.CrashError
	if !errors.As(err, &crash) || crash.Name != "files" {
		t.Errorf("errors.As(%v) found %+v", err, crash)
	}
	if quiet := (&supervise.CrashError{Kind: "plugin", Name: "p", Status: "signal: killed"}).Error(); strings.Contains(quiet, "stderr") {
		t.Errorf("a crash without stderr quotes it: %q", quiet)
	}
}

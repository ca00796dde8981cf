//go:build linux

package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/cli"
)

// openPTY opens a pseudo-terminal pair: the person types into master, the command
// reads slave. It skips the test where the machine has none.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pseudo-terminal number: %v", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open the pseudo-terminal's other end: %v", err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

// TestCallAsksOnlyOnATerminal calls the built-in read, which asks permission (no
// rule allows it), with standard input from /dev/null, a pipe and a
// pseudo-terminal: only the terminal is prompted; the others get a deny whose
// model-visible text says nothing of the config, and the hint on stderr.
func TestCallAsksOnlyOnATerminal(t *testing.T) {
	dir := workspace(t, `{"permission": []}`)
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	call := func(t *testing.T, stdin *os.File, args ...string) result {
		t.Helper()
		var stdout strings.Builder
		stderr := &watchWriter{}
		code := cli.Run(t.Context(), append([]string{"call", "--location", dir}, args...), stdin, &stdout, stderr)
		return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}
	hint := []string{filepath.Join(dir, ".toolhost", "config.json"), `{"action":"read","resource":"a.txt","effect":"allow"}`}
	denied := func(t *testing.T, r result) {
		t.Helper()
		r.want(t, cli.ExitToolError)
		if !strings.Contains(r.stdout, "permission denied") {
			t.Errorf("stdout %q is not a deny", r.stdout)
		}
		for _, h := range hint {
			if strings.Contains(r.stdout, h) {
				t.Errorf("stdout (what the model sees) %q holds the hint %q", r.stdout, h)
			}
			if !strings.Contains(r.stderr, h) {
				t.Errorf("stderr %q lacks the hint %q", r.stderr, h)
			}
		}
		if strings.Contains(r.stderr, "allow?") {
			t.Errorf("prompted without a terminal: %q", r.stderr)
		}
	}
	t.Run("DevNull", func(t *testing.T) {
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		denied(t, call(t, null, "read", `{"path": "a.txt"}`))
		denied(t, call(t, null, "--json", "read", `{"path": "a.txt"}`))
	})
	t.Run("Pipe", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		fmt.Fprintln(w, "o") // would answer a prompt, if there were one
		w.Close()
		denied(t, call(t, r, "read", `{"path": "a.txt"}`))
	})
	t.Run("PseudoTerminal", func(t *testing.T) {
		master, slave := openPTY(t)
		if _, err := master.Write([]byte("o\n")); err != nil { // the person answers "once"
			t.Fatal(err)
		}
		r := call(t, slave, "read", `{"path": "a.txt"}`)
		r.want(t, cli.ExitOK)
		if !strings.Contains(r.stderr, "allow? [o]nce") || !strings.Contains(r.stdout, "hello") {
			t.Fatalf("want a prompt and the file\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	})
}

// TestCallAsksAToolsQuestionOnATerminal calls a plugin tool that asks the person
// (sdk.Ask): on a pseudo-terminal, a prompt per field answers it; from /dev/null
// nobody does, as before.
func TestCallAsksAToolsQuestionOnATerminal(t *testing.T) {
	dir := workspace(t, fmt.Sprintf(`{"plugins": [{"name": "test", "path": %q, "grants": ["ask"], "allow": true}]}`, pluginBin))
	call := func(t *testing.T, stdin *os.File) result {
		t.Helper()
		var stdout strings.Builder
		stderr := &watchWriter{}
		code := cli.Run(t.Context(), []string{"call", "--location", dir, "confirm"}, stdin, &stdout, stderr)
		return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
	}
	t.Run("PseudoTerminal", func(t *testing.T) {
		master, slave := openPTY(t)
		// Answer; "maybe" is not a boolean and is asked again; the note is optional.
		if _, err := master.Write([]byte("a\nmaybe\nyes\nlooks good\n")); err != nil {
			t.Fatal(err)
		}
		r := call(t, slave)
		r.want(t, cli.ExitOK)
		if !strings.Contains(r.stdout, `accept {"ok":true,"note":"looks good"}`) {
			t.Errorf("stdout %q, want the accepted answer", r.stdout)
		}
		for _, want := range []string{"question from the tool: Proceed?", "ok [yes or no]: ", "not a yes or no", "note, why [string; empty: none]: "} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
			}
		}
	})
	t.Run("DevNull", func(t *testing.T) {
		null, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		defer null.Close()
		r := call(t, null)
		r.want(t, cli.ExitToolError)
		if !strings.Contains(r.stdout, "no one to answer") || strings.Contains(r.stderr, "question from the tool") {
			t.Errorf("without a terminal: stdout %q, stderr %q", r.stdout, r.stderr)
		}
	})
}

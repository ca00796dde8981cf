//go:build unix

package proc_test

import (
	"errors"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/proc"
	"github.com/toolhost/toolhost/internal/sandbox"
)

func TestStartGivesExactlyTheEnvironment(t *testing.T) {
	t.Setenv("HOST_SECRET", "leaked")
	sh, err := proc.LookPath("sh", map[string]string{"PATH": "/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start(sandbox.Spec{Name: "env", Contain: true}, sh, []string{"sh", "-c", "env"}, t.TempDir(), map[string]string{"ONLY": "this"})
	if err != nil {
		t.Fatal(err)
	}
	p.Stdin.Close()
	out, _ := io.ReadAll(p.Stdout)
	p.Stdout.Close()
	p.Stderr.Close()
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "ONLY=this") || strings.Contains(string(out), "HOST_SECRET") {
		t.Fatalf("child environment:\n%s", out)
	}
	if pgid, err := syscall.Getpgid(p.Cmd.Process.Pid); err == nil && pgid != p.Cmd.Process.Pid {
		t.Fatalf("child is not its own process group leader")
	}
	if p.Status() != "exit status 0" {
		t.Fatalf("status %q", p.Status())
	}
}

func TestLookPathNeverUsesTheHostPath(t *testing.T) {
	if _, err := proc.LookPath("sh", nil); err == nil || !strings.Contains(err.Error(), "sets no PATH") {
		t.Fatalf("err = %v, want a refusal naming the missing PATH", err)
	}
	if _, err := proc.LookPath("no-such-program", map[string]string{"PATH": "/usr/bin"}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v", err)
	}
	if _, err := proc.LookPath("sh", map[string]string{"PATH": "relative/bin"}); err == nil {
		t.Fatal("a relative PATH entry was searched")
	}
	if got, _ := proc.LookPath("./x", nil); got != "./x" {
		t.Fatalf("a path with a slash must be used as is, got %q", got)
	}
}

func TestEnvListIsNeverNil(t *testing.T) {
	if proc.EnvList(nil) == nil {
		t.Fatal("nil would make exec inherit the host's environment")
	}
	if got := proc.EnvList(map[string]string{"B": "2", "A": "1"}); strings.Join(got, " ") != "A=1 B=2" {
		t.Fatalf("EnvList = %v", got)
	}
}

func TestRingKeepsTheTail(t *testing.T) {
	r := proc.NewRing(5)
	io.WriteString(r, "hello ")
	io.WriteString(r, "world")
	if r.String() != "world" {
		t.Fatalf("ring = %q", r.String())
	}
}

//go:build linux

package sandbox_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/hosttest"
	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/sandbox"
)

func TestMain(m *testing.M) {
	if helper() {
		return
	}
	goleak.VerifyTestMain(m)
}

var modes = []sandbox.Mode{sandbox.ModeNamespace, sandbox.ModeCgroup, sandbox.ModeSubreaper}

func skipUnsupported(t *testing.T, mode sandbox.Mode) {
	t.Helper()
	switch mode {
	case sandbox.ModeNamespace:
		if sandbox.DetectMode() != sandbox.ModeNamespace {
			t.Skip("the kernel refuses a new PID namespace here")
		}
	case sandbox.ModeCgroup:
		if !sandbox.CgroupAvailable() {
			t.Skip("no usable cgroup v2 hierarchy (cgroup.kill) here")
		}
	}
}

func self(t *testing.T) string {
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startHelper starts the test binary in a box of spec, in dir, with env (which names
// its SANDBOX_HELPER role), and returns the box and the program's standard output.
func startHelper(t *testing.T, spec sandbox.Spec, dir string, env ...string) (*sandbox.Box, io.Reader) {
	t.Helper()
	exe := self(t)
	b, err := sandbox.Command(spec, exe, []string{exe}, dir, env)
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	return b, out
}

func startForker(t *testing.T, spec sandbox.Spec, marker string, env ...string) (*sandbox.Box, *bufio.Reader) {
	t.Helper()
	b, out := startHelper(t, spec, t.TempDir(), append([]string{"SANDBOX_HELPER=forker", "SANDBOX_MARKER=" + marker}, env...)...)
	r := bufio.NewReader(out)
	if line, _ := r.ReadString('\n'); line != "ready\n" {
		t.Fatalf("forker said %q", line)
	}
	return b, r
}

// chainScript, run by /bin/sh with a marker, a count and "stay": each link starts
// the next (count-1) in the background, in a session of its own, and exits at
// once (the first stays, as a sleep).
const chainScript = `n=$2
if [ "$n" -gt 0 ]; then setsid /bin/sh "$0" "$1" $((n-1)) & fi
if [ "$3" = stay ]; then exec sleep "$1"; fi
`

// deepScript, run by /bin/sh with a marker and a count: a chain of count+1
// sleeping processes, each the parent of the next, each in a session of its own.
const deepScript = `n=$2
if [ "$n" -gt 0 ]; then setsid /bin/sh "$0" "$1" $((n-1)) & fi
exec sleep "$1"
`

func TestContainment(t *testing.T) {
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			skipUnsupported(t, mode)
			t.Run("KillEndsOrphans", func(t *testing.T) {
				marker := proctest.NewMarker()
				b, _ := startForker(t, sandbox.Spec{Name: "kill", Contain: true, Mode: mode}, marker)
				pids := proctest.WaitMarked(t, marker, 3)
				if b.Mode() != mode {
					t.Fatalf("mode %s", b.Mode())
				}
				for _, pid := range pids {
					if name, ok := sandbox.SourceOf(pid); !ok || name != "kill" {
						t.Errorf("SourceOf(%d) = %q, %v", pid, name, ok)
					}
				}
				if _, ok := sandbox.SourceOf(os.Getpid()); ok {
					t.Error("the host itself is in a source's tree")
				}
				b.Kill()
				err := b.Wait()
				if err == nil {
					t.Error("killed, yet exit status 0")
				}
				proctest.AssertMarkedGone(t, marker)
				if _, ok := sandbox.SourceOf(pids[0]); ok {
					t.Error("a released box still claims its pids")
				}
			})
			t.Run("ProgramExitEndsOrphans", func(t *testing.T) {
				marker := proctest.NewMarker()
				b, _ := startForker(t, sandbox.Spec{Name: "exit", Contain: true, Mode: mode}, marker, "SANDBOX_EXIT=1")
				var ee *sandbox.ExitError
				if err := b.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 3 {
					t.Errorf("wait: %v, want exit status 3", err)
				}
				proctest.AssertMarkedGone(t, marker)
			})
			t.Run("AForkChainEnds", func(t *testing.T) {
				// Each link starts the next in the background, in a session of its
				// own, and exits at once, so that a kill of its process group misses
				// it and a sweep by pid finds mostly the dead; 3000 links at most, so
				// that a chain that escapes ends by itself after the test fails.
				marker := proctest.NewMarker()
				script := filepath.Join(t.TempDir(), "chain")
				os.WriteFile(script, []byte(chainScript), 0o644)
				b, err := sandbox.Command(sandbox.Spec{Name: "chain", Contain: true, Mode: mode}, "/bin/sh", []string{"sh", script, marker, "3000", "stay"}, "/", nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Start(); err != nil {
					t.Fatal(err)
				}
				proctest.WaitMarked(t, marker, 2) // the sleep and a link (a third only by chance)
				b.Kill()
				b.Wait()
				proctest.AssertMarkedGone(t, marker)
			})
			t.Run("ADeepTreeEnds", func(t *testing.T) {
				// A chain of sleeping processes, each the parent of the next and
				// each in a session of its own: SourceOf knows the deepest, and
				// killed, none is left (a sweep of the launcher's children only,
				// one level a round, outlasted the second Box.Kill gives it).
				marker := proctest.NewMarker()
				script := filepath.Join(t.TempDir(), "deep")
				os.WriteFile(script, []byte(deepScript), 0o644)
				b, err := sandbox.Command(sandbox.Spec{Name: "deep", Contain: true, Mode: mode}, "/bin/sh", []string{"sh", script, marker, "200"}, "/", nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Start(); err != nil {
					t.Fatal(err)
				}
				pids := proctest.WaitMarked(t, marker, 201)
				// SourceOf knows every one of them, the deepest too.
				for _, pid := range pids {
					if name, ok := sandbox.SourceOf(pid); !ok || name != "deep" {
						t.Errorf("SourceOf(%d) = %q, %v", pid, name, ok)
					}
				}
				start := time.Now()
				b.Kill()
				b.Wait()
				t.Logf("killed in %v", time.Since(start))
				proctest.AssertMarkedGone(t, marker)
			})
			for _, c := range []struct {
				name, script, n string
				running         int
			}{{"AForkChainEndsWithItsHost", chainScript, "3000", 2}, {"ADeepTreeEndsWithItsHost", deepScript, "50", 51}} {
				t.Run(c.name, func(t *testing.T) {
					marker := proctest.NewMarker()
					script := filepath.Join(t.TempDir(), "script")
					os.WriteFile(script, []byte(c.script), 0o644)
					host := exec.Command(self(t))
					host.Env = []string{"SANDBOX_HELPER=host", "SANDBOX_MARKER=" + marker, "SANDBOX_MODE=" + string(mode),
						"SANDBOX_SCRIPT=" + script, "SANDBOX_SCRIPT_N=" + c.n}
					out, _ := host.StdoutPipe()
					if err := host.Start(); err != nil {
						t.Fatal(err)
					}
					if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
						host.Process.Kill()
						host.Wait()
						t.Fatalf("host said %q", line)
					}
					proctest.WaitMarked(t, marker, c.running)
					host.Process.Kill()
					host.Wait()
					proctest.AssertMarkedGone(t, marker)
				})
			}
			t.Run("HostSIGKILLEndsTree", func(t *testing.T) {
				marker := proctest.NewMarker()
				host := exec.Command(self(t))
				host.Env = []string{"SANDBOX_HELPER=host", "SANDBOX_MARKER=" + marker, "SANDBOX_MODE=" + string(mode)}
				out, _ := host.StdoutPipe()
				if err := host.Start(); err != nil {
					t.Fatal(err)
				}
				if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
					host.Process.Kill()
					host.Wait()
					t.Fatalf("host said %q", line)
				}
				proctest.WaitMarked(t, marker, 3)
				host.Process.Kill()
				host.Wait()
				proctest.AssertMarkedGone(t, marker)
			})
		})
	}
}

func TestExitStatusPassesThrough(t *testing.T) {
	exe := self(t)
	for _, tc := range []struct {
		code int
		want string
	}{{0, ""}, {2, "exit status 2"}, {-int(syscall.SIGKILL), "signal: killed"}} {
		b, err := sandbox.Command(sandbox.Spec{Name: "x", Contain: true}, exe, []string{exe}, "/", []string{"SANDBOX_HELPER=exit", fmt.Sprintf("SANDBOX_CODE=%d", tc.code)})
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		b.Cmd.Stderr = &stderr
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		if tc.code < 0 {
			syscall.Kill(b.ProgramPID(), syscall.Signal(-tc.code))
		}
		err = b.Wait()
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && got != tc.want {
			t.Errorf("code %d: wait = %v, want %q", tc.code, err, tc.want)
		}
		if tc.code >= 0 && stderr.String() != "bye\n" {
			t.Errorf("stderr %q", stderr.String())
		}
	}
}

func TestConfinement(t *testing.T) {
	if sandbox.LandlockABI() == 0 {
		t.Skip("no Landlock in this kernel")
	}
	ws := t.TempDir()
	secret := filepath.Join(ws, "secret")
	os.WriteFile(secret, []byte("s"), 0o600)
	outside := t.TempDir()
	l := hosttest.AcceptAndClose(t)
	victim := exec.Command("sleep", "60")
	victim.Start()
	defer func() { victim.Process.Kill(); victim.Wait() }()

	exe := self(t)
	run := func(t *testing.T, c *sandbox.Confinement) map[string]string {
		b, out := startHelper(t, sandbox.Spec{Name: "probe", Confine: c, Limits: sandbox.Limits{MemoryBytes: 512 << 20}}, ws,
			"SANDBOX_HELPER=probe", "SANDBOX_WORKSPACE_FILE="+secret, "SANDBOX_OUTSIDE="+outside,
			"SANDBOX_TCP="+l.Addr().String(), fmt.Sprintf("SANDBOX_SIGNAL_PID=%d", victim.Process.Pid))
		tmp := b.TempDir()
		res := map[string]string{}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			what, how, _ := strings.Cut(sc.Text(), " ")
			res[what] = how
		}
		if err := b.Wait(); err != nil {
			t.Fatal(err)
		}
		checkTempDirCleared(t, tmp)
		return res
	}
	deflt := func(t *testing.T) {
		res := run(t, &sandbox.Confinement{})
		want := map[string]bool{"read-hostname": false, "read-workspace": false, "write-outside": false, "write-tmp": true, "read-self": true,
			"tcp": false, "mptcp": false, "udp": false, "unix": true}
		if sandbox.LandlockABI() >= 6 {
			want["signal"] = false
		}
		for what, ok := range want {
			if got := strings.HasPrefix(res[what], "ok"); got != ok {
				t.Errorf("%s: %s", what, res[what])
			}
		}
		// No capability, effective or permitted, even when the host has them all (root).
		if got := res["capabilities"]; got != "0 0" {
			t.Errorf("effective capabilities %q, want none", got)
		}
		// The program's first instructions already run with its limits.
		if got, want := res["rlimit-data"], fmt.Sprint(512<<20, " ", 512<<20); got != want {
			t.Errorf("RLIMIT_DATA at the program's start: %s, want %s", got, want)
		}
	}
	t.Run("Default", deflt)
	t.Run("DefaultUnderTheLauncher", func(t *testing.T) {
		defer sandbox.DisableThreadStart()()
		deflt(t)
	})
	t.Run("Widened", func(t *testing.T) {
		res := run(t, &sandbox.Confinement{Read: []string{ws}, Write: []string{outside}, Network: true})
		for _, what := range []string{"read-workspace", "write-outside", "tcp", "mptcp", "udp"} {
			if !strings.HasPrefix(res[what], "ok") {
				t.Errorf("%s: %s", what, res[what])
			}
		}
	})
	t.Run("RequireWithoutLandlockRefuses", func(t *testing.T) {
		defer sandbox.DisableLandlock()()
		if ok, _ := sandbox.WorldAvailable(); ok {
			// A world of its own confines it without Landlock.
			b, err := sandbox.Command(sandbox.Spec{Name: "strict", Confine: &sandbox.Confinement{}, Require: true}, exe, []string{exe}, ws, nil)
			if err != nil || !b.Confined() {
				t.Fatalf("with a world: %v", err)
			}
			b.Release()
		}
		defer sandbox.DisableWorld()()
		_, err := sandbox.Command(sandbox.Spec{Name: "strict", Confine: &sandbox.Confinement{}, Require: true}, exe, []string{exe}, ws, nil)
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), `"strict"`) {
			t.Fatalf("err = %v", err)
		}
		b, err := sandbox.Command(sandbox.Spec{Name: "lax", Confine: &sandbox.Confinement{}}, exe, []string{exe}, ws, nil)
		if err != nil || b.Warning() == "" || b.Confined() {
			t.Fatalf("lax: %v, warning %q", err, b.Warning())
		}
	})
}

// TestConfinedThreadStaysWithItsProgram: a confined program started from a confined
// host thread leaves the rest of the host unconfined while it runs — goroutines on
// every other thread read files and dial TCP — and no thread of the host is
// confined once the program is gone.
func TestConfinedThreadStaysWithItsProgram(t *testing.T) {
	defer sandbox.DisableWorld()() // a program in a world is confined by its child alone
	if sandbox.LandlockABI() == 0 || sandbox.DetectMode() != sandbox.ModeNamespace || !sandbox.ThreadStart() {
		t.Skip("confined programs do not start from a host thread here")
	}
	l := hosttest.AcceptAndClose(t)
	exe := self(t)
	// A start that fails leaves no confined thread either.
	missing, err := sandbox.Command(sandbox.Spec{Name: "missing", Confine: &sandbox.Confinement{}}, "/nonexistent/plugin", []string{"plugin"}, "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Start(); err == nil || !strings.Contains(err.Error(), "/nonexistent/plugin") {
		t.Fatalf("start of a missing program: %v", err)
	}
	var boxes []*sandbox.Box
	for range 3 {
		b, err := sandbox.Command(sandbox.Spec{Name: "sleeper", Confine: &sandbox.Confinement{}}, exe, []string{exe}, "/", []string{"SANDBOX_HELPER=exit", "SANDBOX_CODE=-1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		boxes = append(boxes, b)
	}
	// One each (the failed start's thread may take a moment to end).
	proctest.Until(t, func() bool { return confinedThreads(t) == len(boxes) })
	errs := make(chan error, 64)
	for range cap(errs) {
		go func() {
			if _, err := os.ReadFile("/etc/hostname"); err != nil {
				errs <- err
				return
			}
			c, err := net.Dial("tcp", l.Addr().String())
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Errorf("the host, beside its confined programs: %v", err)
		}
	}
	for _, b := range boxes {
		b.Kill()
		b.Wait()
	}
	proctest.Until(t, func() bool { return confinedThreads(t) == 0 }) // their threads end
}

// confinedThreads counts this process's threads with a seccomp filter.
func confinedThreads(t *testing.T) int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, task := range tasks {
		status, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err == nil && strings.Contains(string(status), "\nSeccomp:\t2\n") {
			n++
		}
	}
	return n
}

// TestProcessesCap: a contained program's tree is held to Limits.Processes, through
// a cgroup's pids.max (with root) or RLIMIT_NPROC counted in a user namespace of its
// own (without): it cannot start more, and the kernel refuses with EAGAIN.
func TestProcessesCap(t *testing.T) {
	if sandbox.DetectMode() != sandbox.ModeNamespace || !sandbox.ThreadStart() {
		t.Skip("programs are not started traced here")
	}
	for name, spec := range map[string]sandbox.Spec{
		"Contained": {Contain: true},
		"Confined":  {Confine: &sandbox.Confinement{}},
	} {
		t.Run(name, func(t *testing.T) {
			const limit = 24
			spec.Name, spec.Limits = "spawner", sandbox.Limits{Processes: limit}
			b, out := startHelper(t, spec, "/", "SANDBOX_HELPER=spawner")
			if !b.ProcessesCapped() {
				b.Kill()
				b.Wait()
				t.Skip("no pids cgroup for root here")
			}
			spawned, refused := 0, ""
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if line := sc.Text(); strings.HasPrefix(line, "refused:") {
					refused = line
				} else {
					spawned++
				}
			}
			werr := b.Wait()
			// Its own threads count too: it started fewer children than the limit,
			// and the kernel said no (or, needing a thread itself, its runtime died
			// of it).
			if spawned >= limit || refused == "" && werr == nil {
				t.Fatalf("spawned %d children under a limit of %d processes; %q, exit %v", spawned, limit, refused, werr)
			}
			if refused != "" && !strings.Contains(refused, "resource temporarily unavailable") {
				t.Errorf("refused with %q, want EAGAIN", refused)
			}
			t.Logf("spawned %d, then %s (exit: %v)", spawned, refused, werr)
		})
	}
}

// checkTempDirCleared fails unless a program's temporary directory, after its end,
// is gone or back in the host's reserve as made: empty, private, without
// extended attributes.
func checkTempDirCleared(t *testing.T, tmp string) {
	t.Helper()
	fi, err := os.Stat(tmp)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	entries, _ := os.ReadDir(tmp)
	n, _ := unix.Listxattr(tmp, nil)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 || len(entries) > 0 || n > 0 {
		t.Errorf("the temporary directory %s outlived its program as %v (%d entries, %d bytes of attribute names, %v)", tmp, fi.Mode(), len(entries), n, err)
	}
}

// TestTempDirAfterItsProgram starts programs one after another that litter their
// temporary directory: each finds it empty and private, whatever the one before
// left (temporary directories are recycled), and nothing outside it is touched.
func TestTempDirAfterItsProgram(t *testing.T) {
	if sandbox.LandlockABI() == 0 {
		t.Skip("no Landlock in this kernel")
	}
	t.Run("World", func(t *testing.T) { testTempDirAfterItsProgram(t) })
	t.Run("HostDirectory", func(t *testing.T) {
		defer sandbox.DisableWorld()()
		testTempDirAfterItsProgram(t)
	})
}

func testTempDirAfterItsProgram(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside")
	os.WriteFile(outside, []byte("keep"), 0o600)
	for i, xattr := range []string{"", "", "1", ""} {
		b, out := startHelper(t, sandbox.Spec{Name: "litter", Confine: &sandbox.Confinement{}}, "/",
			"SANDBOX_HELPER=litter", "SANDBOX_OUTSIDE="+outside, "SANDBOX_XATTR="+xattr)
		tmp := b.TempDir()
		data, _ := io.ReadAll(out)
		if err := b.Wait(); err != nil {
			t.Fatal(err)
		}
		if got := string(data); got != "found 0 700 0\n" {
			t.Errorf("program %d: %q, want an empty private directory", i, got)
		}
		checkTempDirCleared(t, tmp)
		if xattr != "" {
			if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("program %d: %s, whose attribute cannot be reset, is still there", i, tmp)
			}
		}
	}
	if data, err := os.ReadFile(outside); string(data) != "keep" {
		t.Errorf("the file outside: %q, %v", data, err)
	}
}

// TestProgramRunsInTheHostsSession: a contained or confined program is in a
// process group of its own (a signal to the group reaches its helpers and no
// process of the host), in the host's session (where sessions are scheduling
// autogroups, in the host's share: a call's wakeups stay within one group), and
// at the host's priority (see Box.Layers).
func TestProgramRunsInTheHostsSession(t *testing.T) {
	sid, _ := unix.Getsid(0)
	prio, _ := unix.Getpriority(unix.PRIO_PROCESS, 0)
	specs := map[string]sandbox.Spec{
		"confined":          {Name: "s", Confine: &sandbox.Confinement{}},
		"confined-no-world": {Name: "s", Confine: &sandbox.Confinement{}},
	}
	for _, mode := range modes {
		specs[string(mode)] = sandbox.Spec{Name: "s", Contain: true, Mode: mode}
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			skipUnsupported(t, spec.Mode)
			if name == "confined-no-world" {
				t.Setenv(sandbox.OffEnv, "world")
			}
			b, _ := startForker(t, spec, proctest.NewMarker())
			defer func() { b.Kill(); b.Wait() }()
			pid := b.ProgramPID()
			if got, err := unix.Getsid(pid); err != nil || got != sid {
				t.Errorf("the program's session is %d (%v); want the host's, %d", got, err, sid)
			}
			if got, err := unix.Getpgid(pid); err != nil || got != pid {
				t.Errorf("the program's process group is %d (%v); want its own, %d", got, err, pid)
			}
			if got, err := unix.Getpriority(unix.PRIO_PROCESS, pid); err != nil || got != prio {
				t.Errorf("the program's priority is %d (%v); want the host's, %d", got, err, prio)
			}
			if layers := b.Layers(); !slices.ContainsFunc(layers, func(l string) bool {
				return l == "host's share" || l == "cpu weight" || l == "cpu shares" || l == "lower priority once busy"
			}) {
				t.Errorf("layers %q name no CPU share", layers)
			}
		})
	}
}

// TestCPUMax: Limits.CPUs is the cpu.max of the program's cgroup, and the layers
// name it, where the cgroup v2 cpu controller is delegated; a program without the
// limit has no cap.
func TestCPUMax(t *testing.T) {
	if !sandbox.CPUDelegated() {
		t.Skip("the cgroup v2 cpu controller cannot be enabled for sources here (cgroup v1, or not delegated): cpu.max has no effect")
	}
	for _, spec := range []sandbox.Spec{
		{Name: "cpu", Confine: &sandbox.Confinement{}, Limits: sandbox.Limits{CPUs: 0.5}},
		{Name: "cpu", Contain: true, Mode: sandbox.ModeCgroup, Limits: sandbox.Limits{CPUs: 0.5}},
		{Name: "cpu", Confine: &sandbox.Confinement{}},
	} {
		b, _ := startForker(t, spec, proctest.NewMarker())
		want := "50000 100000"
		if spec.Limits.CPUs == 0 {
			want = "max 100000"
		}
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", b.ProgramPID()))
		rel, _ := strings.CutPrefix(strings.TrimSpace(string(data)), "0::")
		got, err := os.ReadFile(filepath.Join(sandbox.Cgroup2Mount(), rel, "cpu.max"))
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("%s: cpu.max of %s: %q (%v); want %q", spec.Mode, rel, got, err, want)
		}
		if has := slices.Contains(b.Layers(), "cpu max 0.5"); has != (spec.Limits.CPUs > 0) {
			t.Errorf("%s: layers %q", spec.Mode, b.Layers())
		}
		b.Kill()
		b.Wait()
	}
}

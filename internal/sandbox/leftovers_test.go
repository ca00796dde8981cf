//go:build linux

package sandbox_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/sandbox"
)

// TestNothingLeftAfterAKilledHost SIGKILLs a real host process while three
// confined programs run in it (each with helpers of its own): their processes
// end, no mount of theirs is in the host's mount namespace, no temporary directory
// of the host is left, and what a killed host cannot remove itself (the empty
// processes and cpu cgroups a root host keeps ready, its own cpu cgroup) the next
// host's start removes. With
// the world turned off (the fallback), the temporary directories the killed host
// made are removed by the next host too.
func TestNothingLeftAfterAKilledHost(t *testing.T) {
	for _, off := range []string{"", "world"} {
		name := "World"
		if off != "" {
			name = "Fallback"
		}
		t.Run(name, func(t *testing.T) {
			if ok, why := sandbox.WorldAvailable(); off == "" && !ok {
				t.Skip("no world here: " + why)
			}
			if sandbox.DetectMode() != sandbox.ModeNamespace {
				t.Skip("the kernel refuses a new PID namespace here")
			}
			mountsBefore := mounts(t)
			marker := proctest.NewMarker()
			host := exec.Command(self(t))
			host.Env = append(os.Environ(), "SANDBOX_HELPER=worldhost", "SANDBOX_MARKER="+marker, sandbox.OffEnv+"="+off)
			out, _ := host.StdoutPipe()
			if err := host.Start(); err != nil {
				t.Fatal(err)
			}
			if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
				host.Process.Kill()
				host.Wait()
				t.Fatalf("the host said %q", line)
			}
			t.Cleanup(func() { host.Process.Kill(); host.Wait() })
			proctest.WaitMarked(t, marker, 3*3) // each forker leaves three
			pid := host.Process.Pid
			host.Process.Signal(syscall.SIGKILL)
			host.Wait()

			proctest.AssertMarkedGone(t, marker)
			if got := mounts(t); len(got) != len(mountsBefore) {
				t.Errorf("the host's mounts went from %d to %d: %v", len(mountsBefore), len(got), got)
			}
			if off == "" {
				// A world's TMPDIR was a tmpfs in its own mount namespace only.
				for _, p := range leftBy(pid) {
					if strings.HasPrefix(p, os.TempDir()) {
						t.Errorf("left by the killed host %d: %s", pid, p)
					}
				}
			}
			// The next host removes what the killed one could not.
			next := exec.Command(self(t))
			next.Env = append(os.Environ(), "SANDBOX_HELPER=worldhost", "SANDBOX_MARKER="+proctest.NewMarker(), "SANDBOX_ONCE=1", sandbox.OffEnv+"="+off)
			if out, err := next.CombinedOutput(); err != nil {
				t.Fatalf("the next host: %v: %s", err, out)
			}
			if left := leftBy(pid); len(left) > 0 {
				t.Errorf("left by the killed host %d: %v", pid, left)
			}
		})
	}
}

// mounts lists this process's mount points.
func mounts(t *testing.T) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) > 4 {
			out = append(out, f[4])
		}
	}
	slices.Sort(out)
	return out
}

// leftBy lists the temporary directories and cgroups named for host pid.
func leftBy(pid int) []string {
	var left []string
	p := strconv.Itoa(pid)
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "toolhost-sandbox-"+p+"-") {
			left = append(left, filepath.Join(os.TempDir(), e.Name()))
		}
	}
	for _, root := range []string{"/sys/fs/cgroup/toolhost", "/sys/fs/cgroup/pids/toolhost", "/sys/fs/cgroup/cpu/toolhost"} {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			if strings.Contains(e.Name(), "."+p+".") {
				left = append(left, filepath.Join(root, e.Name()))
			}
		}
	}
	return left
}

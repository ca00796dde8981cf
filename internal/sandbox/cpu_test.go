//go:build linux

package sandbox_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolhost/toolhost/internal/proctest"
	"github.com/toolhost/toolhost/internal/sandbox"
)

// startSpinner starts a confined program of spec that keeps threads busy, all on
// one CPU (the same for every spinner of the test process), and returns it once it
// spins.
func startSpinner(t *testing.T, spec sandbox.Spec, threads int) *sandbox.Box {
	t.Helper()
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	cpu := 0
	for !allowed.IsSet(cpu) {
		cpu++
	}
	// Without asynchronous preemption, the runtime never parks a spinning thread
	// (a locked goroutine's thread sleeps at each preemption until another thread
	// hands it back, which on a loaded machine can take most of its time).
	b, out := startHelper(t, spec, t.TempDir(), "SANDBOX_HELPER=spinner", "SANDBOX_THREADS="+strconv.Itoa(threads),
		"SANDBOX_CPU="+strconv.Itoa(cpu), "GODEBUG=asyncpreemptoff=1")
	t.Cleanup(func() { b.Kill(); b.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("spinner said %q", line)
	}
	return b
}

// hasCPUShare reports whether b's layers name a CPU share of its own.
func hasCPUShare(b *sandbox.Box) bool {
	return slices.ContainsFunc(b.Layers(), func(l string) bool { return l == "cpu shares" || l == "cpu weight" })
}

// TestBusySourceDoesNotStarveAnother: two confined programs, as two Locations'
// plugins are, one with eight busy threads and one with a single busy thread (a
// call's work), on one CPU: with a CPU share per source the single thread gets
// about as much CPU time as the eight together, where as tasks of one group it
// would get one eighth of theirs. Measured in the CPU time each has used, not in
// wall time. Without a CPU share of its own (OffEnv "cpu", or no cgroup cpu
// controller here) it skips.
func TestBusySourceDoesNotStarveAnother(t *testing.T) {
	busy := startSpinner(t, sandbox.Spec{Name: "busy", Confine: &sandbox.Confinement{}}, 8)
	if !hasCPUShare(busy) {
		t.Skipf("no CPU share of its own for a source here (layers %q)", busy.Layers())
	}
	other := startSpinner(t, sandbox.Spec{Name: "other", Confine: &sandbox.Confinement{}}, 1)
	if slices.Contains(busy.Layers(), "cpu shares") { // cgroup v1: each joins its cgroup once busy
		waitInOwnCPUCgroup(t, busy)
		waitInOwnCPUCgroup(t, other)
	}
	busy0, other0 := proctest.CPUTime(busy.ProgramPID()), proctest.CPUTime(other.ProgramPID())
	var busyCPU, otherCPU time.Duration
	proctest.Until(t, func() bool {
		busyCPU = proctest.CPUTime(busy.ProgramPID()) - busy0
		otherCPU = proctest.CPUTime(other.ProgramPID()) - other0
		return busyCPU+otherCPU >= 3*time.Second
	})
	// Tasks of one group: 1/8; a share each: 1.
	ratio := float64(otherCPU) / float64(busyCPU)
	t.Logf("CPU time: one thread %v, eight threads %v (%.2f)", otherCPU, busyCPU, ratio)
	if ratio < 0.5 {
		t.Errorf("the single busy thread got %v of CPU against the eight threads' %v (%.2f); want at least half of theirs", otherCPU, busyCPU, ratio)
	}
}

// TestCPUQuota: Limits.CPUs is the cpu.cfs_quota_us of the program's cgroup v1 cpu
// cgroup, the layers name it, and the kernel holds a spinning program to it: over
// the periods it ran, it used at most the quota of each (the kernel's own counts:
// cpu.stat's periods and the threads' schedstat, not wall time), and it was
// throttled. The quota is a tenth of a CPU, so that two spinning threads exceed it
// even on a loaded machine. A program without the limit has no quota.
func TestCPUQuota(t *testing.T) {
	capped := startSpinner(t, sandbox.Spec{Name: "cpu", Confine: &sandbox.Confinement{}, Limits: sandbox.Limits{CPUs: 0.1}}, 2)
	if !slices.Contains(capped.Layers(), "cpu shares") {
		t.Skipf("no cgroup v1 cpu cgroup for a source here (layers %q)", capped.Layers())
	}
	if !slices.Contains(capped.Layers(), "cpu quota 0.1") {
		t.Errorf("layers %q name no cpu quota 0.1", capped.Layers())
	}
	dir := cpuCgroupOf(t, capped.ProgramPID())
	if got := readCgroupFile(t, dir, "cpu.cfs_quota_us"); got != "10000" {
		t.Errorf("cpu.cfs_quota_us of %s: %q, want 10000", dir, got)
	}
	const quota = 10 * time.Millisecond
	periods0, throttled0 := cpuStat(t, dir)
	cpu0 := onCPU(t, capped.ProgramPID())
	var used time.Duration
	proctest.Until(t, func() bool {
		used = onCPU(t, capped.ProgramPID()) - cpu0
		return used >= 30*quota
	})
	periods, throttled := cpuStat(t, dir)
	// A period more at each end of the measure.
	if limit := time.Duration(periods-periods0+2) * quota; used > limit {
		t.Errorf("the program used %v of CPU in %d periods of its quota of %v, more than %v", used, periods-periods0, quota, limit)
	}
	if throttled == throttled0 {
		t.Errorf("two spinning threads under a quota of a tenth of a CPU were never throttled (%d periods, %v used)", periods-periods0, used)
	}

	free := startSpinner(t, sandbox.Spec{Name: "cpu", Confine: &sandbox.Confinement{}}, 1)
	if got := readCgroupFile(t, waitInOwnCPUCgroup(t, free), "cpu.cfs_quota_us"); got != "-1" {
		t.Errorf("cpu.cfs_quota_us without a limit: %q, want -1", got)
	}
	if slices.ContainsFunc(free.Layers(), func(l string) bool { return strings.HasPrefix(l, "cpu quota") }) {
		t.Errorf("layers %q name a quota without a limit", free.Layers())
	}
}

// onCPU is the time pid's live threads have run, from their schedstat (in
// nanoseconds, where /proc/PID/stat counts clock ticks).
func onCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads of %d: %v", pid, err)
	}
	var sum time.Duration
	for _, p := range tasks {
		data, _ := os.ReadFile(p)
		if f := strings.Fields(string(data)); len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(n)
		}
	}
	return sum
}

// TestCPUCgroupJoinedOnceBusy: on cgroup v1, a program without a CPU cap runs in
// its host's cpu group while it is idle (its calls' wakeups cross no group), and
// joins its own cpu cgroup once it keeps a CPU busy; a capped program is in its
// cgroup from its start (TestCPUQuota).
func TestCPUCgroupJoinedOnceBusy(t *testing.T) {
	idle := startSpinner(t, sandbox.Spec{Name: "idle", Confine: &sandbox.Confinement{}}, 0)
	if !slices.Contains(idle.Layers(), "cpu shares") {
		t.Skipf("no cgroup v1 cpu cgroup for a source here (layers %q)", idle.Layers())
	}
	host := cpuCgroupOf(t, os.Getpid())
	if got := cpuCgroupOf(t, idle.ProgramPID()); got != host {
		t.Errorf("an idle program's cpu cgroup is %s; want its host's, %s", got, host)
	}
	busy := startSpinner(t, sandbox.Spec{Name: "busy", Confine: &sandbox.Confinement{}}, 1)
	waitInOwnCPUCgroup(t, busy)
	if got := cpuCgroupOf(t, idle.ProgramPID()); got != host {
		t.Errorf("the idle program moved to %s once the other was busy; want its host's, %s", got, host)
	}
}

// waitInOwnCPUCgroup waits until b's program is in a cpu cgroup under its host's
// and returns that cgroup's directory.
func waitInOwnCPUCgroup(t *testing.T, b *sandbox.Box) string {
	t.Helper()
	host := cpuCgroupOf(t, os.Getpid())
	var dir string
	proctest.Until(t, func() bool {
		dir = cpuCgroupOf(t, b.ProgramPID())
		return strings.HasPrefix(dir, host+"/")
	})
	return dir
}

// cpuCgroupOf is the directory of pid's cgroup v1 cpu cgroup.
func cpuCgroupOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if f := strings.SplitN(strings.TrimSpace(line), ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "cpu") {
			return filepath.Join(sandbox.CPUMount(), f[2])
		}
	}
	t.Fatalf("no cpu cgroup in /proc/%d/cgroup: %s", pid, data)
	return ""
}

func readCgroupFile(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// cpuStat reads a cgroup's nr_periods and nr_throttled.
func cpuStat(t *testing.T, dir string) (periods, throttled int64) {
	t.Helper()
	for line := range strings.Lines(readCgroupFile(t, dir, "cpu.stat")) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "nr_periods":
			periods = n
		case "nr_throttled":
			throttled = n
		}
	}
	return periods, throttled
}

// TestBusyProgramGetsALowerPriority: where a program has no cgroup cpu controller
// of its own (OffEnv "cpu" stands for such a machine here), an idle program keeps
// its host's priority, and a busy one gets sandbox.BusyNice on every thread.
func TestBusyProgramGetsALowerPriority(t *testing.T) {
	t.Setenv(sandbox.OffEnv, "cpu")
	idle := startSpinner(t, sandbox.Spec{Name: "idle", Confine: &sandbox.Confinement{}}, 0)
	if !slices.Contains(idle.Layers(), "lower priority once busy") {
		t.Skipf("layers %q: a cgroup cpu controller serves here", idle.Layers())
	}
	busy := startSpinner(t, sandbox.Spec{Name: "busy", Confine: &sandbox.Confinement{}}, 2)
	proctest.Until(t, func() bool {
		return !slices.ContainsFunc(threadNices(t, busy.ProgramPID()), func(n int) bool { return n != sandbox.BusyNice })
	})
	if n := threadNices(t, idle.ProgramPID()); slices.ContainsFunc(n, func(n int) bool { return n != 0 }) {
		t.Errorf("the idle program's threads have niceness %v once the other is busy; want 0", n)
	}
}

// threadNices lists the niceness of each thread of pid.
func threadNices(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var nices []int
	for _, task := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // it ended
		}
		// After the command's closing parenthesis: state is field 3, nice field 19.
		f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
		n, err := strconv.Atoi(f[16])
		if err != nil {
			t.Fatalf("/proc/%d/task/%s/stat: %s", pid, task.Name(), data)
		}
		nices = append(nices, n)
	}
	return nices
}

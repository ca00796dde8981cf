//go:build linux

package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cpuV1 finds, once, where this process may give confined programs a CPU share of
// their own through a cgroup v1 cpu controller (the machines without a delegated
// cgroup v2 cpu controller: cgroup v1 hosts, many containers and older
// distributions; as a rule it needs root): parent is the directory their cgroups
// are made in, home the tasks file a starting thread returns to. Both are "" when
// there is none, or when the v2 controller serves instead (cpuShared).
//
// The cgroups sit under the host's own cpu cgroup, in toolhost/host.<pid>.<n>,
// which the host joins itself (all its threads, at its first Command): the host
// and its sources are then one group against the rest of the machine, as the
// host's session was, and inside it each busy source's cgroup is one entity
// beside the host's own threads, with the default cpu.shares (1024) each, so a
// source with many busy threads weighs as much as a source with one. A source
// that is not busy runs as a plain task of the host's group (see watchCPU): a
// call's wakeups are cheapest within one group, and a cgroup of its own, beside
// the host's or inside it, cost each call (BENCHMARKS.md). A host started by
// another host's process is inside that host's group, and so makes its own there.
// The host's group stays while the host runs (the host is in it); a later host
// removes it, with what a SIGKILLed host left in it, as it removes the other
// cgroups named for dead hosts.
func cpuV1() (parent, home string) {
	cpuOnce.Do(func() {
		mount := cpuMount()
		if mount == "" || cpuShared() {
			return
		}
		root := filepath.Join(mount, ownCgroup("cpu"), "toolhost")
		if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return
		}
		removeDeadHosts(root)
		host := filepath.Join(root, cgroupName("host"))
		if err := os.Mkdir(host, 0o755); err != nil {
			return
		}
		if err := os.WriteFile(filepath.Join(host, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			_ = os.Remove(host)
			return
		}
		cpuParent, cpuHome = host, filepath.Join(host, "tasks")
	})
	return cpuParent, cpuHome
}

// cpuMount is where the cgroup v1 cpu controller is mounted, "" when nowhere.
func cpuMount() string {
	return cgroupMount(func(fstype, options string) bool {
		return fstype == "cgroup" && slices.Contains(strings.Split(options, ","), "cpu")
	})
}

var (
	cpuOnce            sync.Once
	cpuParent, cpuHome string
)

// ownCgroup is this process's cgroup v1 path in the hierarchy of controller ("/"
// when unknown).
func ownCgroup(controller string) string {
	own := "/"
	data, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(data), "\n") {
		// ID:controllers:path
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), controller) {
			own = f[2]
		}
	}
	return own
}

// cpuCgroup is a cgroup v1 cpu directory in the reserve, with its quota.
type cpuCgroup struct {
	dir   string
	quota int64 // cpu.cfs_quota_us, -1 for none
}

var cpuCgroups = reserve[cpuCgroup]{
	make: func() (cpuCgroup, bool) {
		parent, _ := cpuV1()
		dir := makeCPUCgroup(parent, -1)
		return cpuCgroup{dir, -1}, dir != ""
	},
	drop: func(c cpuCgroup) { removeCgroup(c.dir) },
}

// newCPUCgroup returns a cgroup v1 cpu directory for a confined program, with the
// default share and l.CPUs as its quota, "" when there is none (no v1 cpu
// controller this process may use, or OffEnv's "cpu"): one from the reserve, else
// a new one. It holds no process until a start joins it.
func newCPUCgroup(l Limits) string {
	parent, _ := cpuV1()
	if parent == "" || Off("cpu") {
		return ""
	}
	quota := l.cfsQuota()
	if c, ok := cpuCgroups.take(); ok {
		if c.quota == quota || writeCFSQuota(c.dir, quota) == nil {
			return c.dir
		}
		removeCgroup(c.dir)
	}
	return makeCPUCgroup(parent, quota)
}

// makeCPUCgroup makes a cpu cgroup under parent with quota, "" when it cannot.
func makeCPUCgroup(parent string, quota int64) string {
	if parent == "" {
		return ""
	}
	dir := filepath.Join(parent, cgroupName("box"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	if quota != -1 && writeCFSQuota(dir, quota) != nil {
		_ = os.Remove(dir)
		return ""
	}
	return dir
}

// writeCFSQuota sets dir's cpu.cfs_quota_us (the period is the default, CPUPeriod).
func writeCFSQuota(dir string, quota int64) error {
	return os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0)
}

// recycleCPUCgroup gives a program's cpu cgroup back to the reserve if no process
// is left in it, else removes it as removeCgroup does.
func recycleCPUCgroup(dir string, l Limits) {
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil || len(procs) > 0 {
		removeCgroup(dir)
		return
	}
	cpuCgroups.put(cpuCgroup{dir, l.cfsQuota()})
}

// A program without a CPU cap starts in its host's cpu group, as one task beside
// the host's own, and joins its own cpu cgroup (its CPU share) once it is busy:
// it used cpuBusy of CPU time within one cpuWatchEvery. A call's wakeups cross no
// group while it is not (a program in a cgroup of its own paid for each call;
// BENCHMARKS.md), and a busy program weighs as one source once it is. A program
// with a cap joins at its birth, since the cap must hold from the start.
const (
	cpuWatchEvery = 250 * time.Millisecond
	cpuBusy       = cpuWatchEvery / 2 // half a CPU
)

// cpuWatch holds the started programs not yet in their cpu cgroup, with the CPU
// time their tree had used at the last look; one goroutine looks while any is
// held.
var cpuWatch struct {
	sync.Mutex
	boxes   map[*Box]time.Duration
	running bool
	wake    chan struct{} // a box left: the watcher ends if it was the last
}

// BusyNice is the niceness a program without a cgroup cpu controller of its own
// (Box.cpuFallback) is given once it is busy: it then yields to its host and to
// the sources that are not busy, other Locations' included. It cannot undo it
// (no capability, RLIMIT_NICE 0).
const BusyNice = 5

// watchCPU makes b join its cpu cgroup once it is busy (see cpuBusy), or, without
// one, lowers its priority to BusyNice.
func watchCPU(b *Box) {
	used := b.treeCPU()
	cpuWatch.Lock()
	defer cpuWatch.Unlock()
	if cpuWatch.boxes == nil {
		cpuWatch.boxes, cpuWatch.wake = map[*Box]time.Duration{}, make(chan struct{}, 1)
	}
	cpuWatch.boxes[b] = used
	if !cpuWatch.running {
		cpuWatch.running = true
		go cpuWatcher()
	}
}

// unwatchCPU forgets b (its release).
func unwatchCPU(b *Box) {
	cpuWatch.Lock()
	defer cpuWatch.Unlock()
	if _, ok := cpuWatch.boxes[b]; !ok {
		return
	}
	delete(cpuWatch.boxes, b)
	select {
	case cpuWatch.wake <- struct{}{}:
	default:
	}
}

// cpuWatcher looks at the watched programs every cpuWatchEvery and moves the busy
// ones into their cpu cgroups; it ends when none is left.
func cpuWatcher() {
	tick := time.NewTicker(cpuWatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-cpuWatch.wake:
		}
		cpuWatch.Lock()
		if len(cpuWatch.boxes) == 0 {
			cpuWatch.running = false
			cpuWatch.Unlock()
			return
		}
		var busy []*Box
		for b, last := range cpuWatch.boxes {
			now := b.treeCPU()
			if now-last >= cpuBusy {
				busy = append(busy, b)
				delete(cpuWatch.boxes, b)
			} else {
				cpuWatch.boxes[b] = now
			}
		}
		cpuWatch.Unlock()
		for _, b := range busy {
			if b.cpu != "" {
				b.joinCPU()
			} else {
				b.lowerPriority()
			}
		}
	}
}

// treePIDs lists the processes of b's tree as the host sees them: its processes
// cgroup's where it has one, else its program.
func (b *Box) treePIDs() []int {
	if b.pids != "" {
		if data, err := os.ReadFile(filepath.Join(b.pids, "cgroup.procs")); err == nil {
			var pids []int
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return pids
		}
	}
	return []int{b.ProgramPID()}
}

// treeCPU is the CPU time b's live processes have used (clock ticks).
func (b *Box) treeCPU() time.Duration {
	var sum time.Duration
	for _, pid := range b.treePIDs() {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		// After the command's closing parenthesis: state is field 3; utime and stime
		// are fields 14 and 15.
		i := strings.LastIndexByte(string(data), ')')
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		sum += time.Duration(utime+stime) * time.Second / 100 // USER_HZ
	}
	return sum
}

// joinCPU moves b's processes into its cpu cgroup, unless b was released (its
// cgroup may then serve another program).
func (b *Box) joinCPU() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return
	}
	procs := filepath.Join(b.cpu, "cgroup.procs")
	for _, pid := range b.treePIDs() {
		_ = os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0) // one that exited meanwhile fails
	}
}

// lowerPriority gives every thread of b's processes the niceness BusyNice, unless
// b was released. On Linux a niceness is a thread's, and a new thread inherits its
// creator's: so it sweeps the threads until a sweep finds none it has not set, after
// which every thread there is, and every one they start, has it.
func (b *Box) lowerPriority() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.released {
		return
	}
	set := map[int]bool{}
	for fresh := true; fresh; {
		fresh = false
		for _, pid := range b.treePIDs() {
			tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
			for _, task := range tasks {
				tid, err := strconv.Atoi(task.Name())
				if err != nil || set[tid] {
					continue
				}
				set[tid], fresh = true, true
				_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, BusyNice) // one that exited meanwhile fails
			}
		}
	}
}

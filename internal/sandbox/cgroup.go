//go:build linux

package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// cgroupRoot is the toolhost directory in the cgroup v2 mount, "" when there is
// none this process may use. Found once from /proc/self/mountinfo; directories left
// by dead hosts are removed then.
func cgroupRoot() string {
	cgroupOnce.Do(func() {
		mount := cgroup2Mount()
		if mount == "" {
			return
		}
		root := filepath.Join(mount, "toolhost")
		if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return
		}
		if _, err := os.Stat(filepath.Join(root, "cgroup.kill")); err != nil {
			return // cgroup.kill needs Linux 5.14
		}
		removeDeadHosts(root)
		cgroupDir = root
	})
	return cgroupDir
}

// removeDeadHosts removes the directories under root that hosts no longer running
// left: <name>.<host pid>.<n>, with the cgroups in them (a live cgroup's rmdir
// fails anyway).
func removeDeadHosts(root string) {
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		parts := strings.Split(e.Name(), ".")
		if !e.IsDir() || len(parts) < 3 {
			continue
		}
		if pid, err := strconv.Atoi(parts[len(parts)-2]); err == nil && syscall.Kill(pid, 0) != nil {
			removeCgroupDirs(filepath.Join(root, e.Name()))
		}
	}
}

// removeCgroupDirs removes the cgroup dir after the cgroups under it.
func removeCgroupDirs(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupDirs(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// pidsRoot is a toolhost directory in a cgroup hierarchy with the pids controller
// that this process may use to cap a source's processes — under the cgroup v2
// mount when pids can be enabled for its children there, else under a cgroup v1
// pids mount — or "" when there is none (as a rule, without root). Found once.
// pidsHome is, for v1, the tasks file of this process's own pids cgroup.
func pidsRoot() (root, home string) {
	pidsOnce.Do(func() {
		if root := cgroupRoot(); root != "" && os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0) == nil {
			pidsDir = root
			// The cpu controller too, where it can be: each source's cgroup then
			// has a CPU share of its own (cpu.weight, the default 100 for each).
			cpuDelegated = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu"), 0) == nil
			return
		}
		mount := cgroupMount(func(fstype, options string) bool {
			return fstype == "cgroup" && slices.Contains(strings.Split(options, ","), "pids")
		})
		if mount == "" {
			return
		}
		root := filepath.Join(mount, "toolhost")
		if err := os.Mkdir(root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return
		}
		removeDeadHosts(root)
		pidsDir, pidsHome = root, filepath.Join(mount, ownCgroup("pids"), "tasks")
	})
	return pidsDir, pidsHome
}

// PidsCgroupAvailable reports whether sources' processes can be capped through a
// cgroup made here (with root, the only way: see Limits.Processes).
func PidsCgroupAvailable() bool {
	root, _ := pidsRoot()
	return root != ""
}

var (
	pidsOnce          sync.Once
	pidsDir, pidsHome string
	cpuDelegated      bool // the cpu controller is enabled for the cgroups under pidsDir (v2)
)

// cpuShared reports whether the cgroups made for sources have a CPU share of their
// own (looking for the hierarchy once).
func cpuShared() bool {
	pidsRoot()
	return cpuDelegated
}

// newPidsCgroup returns a directory under pidsRoot capped at l.Processes processes,
// and where the cpu controller is delegated (cgroup v2) at l.CPUs (cpu.max), ""
// when it cannot: one from the reserve (see reserve; pids.max is rewritten when its
// cap differs), else a new one. They are named box.<host pid>.<n>, since a cgroup
// serves one source after another. It holds no process until a start joins it.
func newPidsCgroup(l Limits) string {
	dir := pidsCgroupFor(l.Processes)
	if dir != "" && cpuDelegated && writeCPUMax(dir, l) != nil {
		removeCgroup(dir)
		return ""
	}
	return dir
}

// writeCPUMax sets dir's cpu.max for l: every start sets it, since a cgroup of the
// reserve served another source before.
func writeCPUMax(dir string, l Limits) error {
	return os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(l.cpuMax()), 0)
}

// pidsCgroupFor is newPidsCgroup without the CPU cap.
func pidsCgroupFor(max int64) string {
	root, _ := pidsRoot()
	if root == "" || max <= 0 {
		return ""
	}
	lastPidsMax.Store(max)
	if c, ok := pidsCgroups.take(); ok {
		if c.max == max || writePidsMax(c.dir, max) == nil {
			return c.dir
		}
		removeCgroup(c.dir)
	}
	return makePidsCgroup(root, cgroupName("box"), max)
}

// pidsCgroup is a processes cgroup in the reserve, with its pids.max.
type pidsCgroup struct {
	dir string
	max int64
}

var (
	pidsCgroups = reserve[pidsCgroup]{
		make: func() (pidsCgroup, bool) {
			root, _ := pidsRoot()
			max := lastPidsMax.Load() // the last cap asked for
			dir := makePidsCgroup(root, cgroupName("box"), max)
			return pidsCgroup{dir, max}, dir != ""
		},
		drop: func(c pidsCgroup) { removeCgroup(c.dir) },
	}
	lastPidsMax atomic.Int64
)

// recyclePidsCgroup gives a program's processes cgroup (capped at max) back to the
// reserve if no process is left in it, else removes it as removeCgroup does.
func recyclePidsCgroup(dir string, max int64) {
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil || len(procs) > 0 {
		removeCgroup(dir)
		return
	}
	pidsCgroups.put(pidsCgroup{dir, max})
}

// makePidsCgroup makes root/name capped at max processes, "" when it cannot.
func makePidsCgroup(root, name string, max int64) string {
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return ""
	}
	if err := writePidsMax(dir, max); err != nil {
		_ = os.Remove(dir)
		return ""
	}
	return dir
}

func writePidsMax(dir string, max int64) error {
	return os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(max, 10)), 0)
}

// cgroupName is a source's directory name: <name>.<host pid>.<n>.
func cgroupName(name string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '/' || r == '.' || r == '\n' {
			return '_'
		}
		return r
	}, name)
	return fmt.Sprintf("%s.%d.%d", safe, os.Getpid(), cgroupSeq.Add(1))
}

var (
	cgroupOnce sync.Once
	cgroupDir  string
	cgroupSeq  atomic.Uint64
)

// CgroupAvailable reports whether a cgroup v2 directory can be made for a source.
func CgroupAvailable() bool { return cgroupRoot() != "" }

// cgroup2Mount finds the cgroup v2 mount point ("" when none).
func cgroup2Mount() string {
	return cgroupMount(func(fstype, _ string) bool { return fstype == "cgroup2" })
}

// cgroupMount finds the first mount point whose file system type and super block
// options match ("" when none).
func cgroupMount(match func(fstype, options string) bool) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		left, right, ok := strings.Cut(sc.Text(), " - ")
		r := strings.Fields(right)
		if !ok || len(r) < 3 || !match(r[0], r[2]) {
			continue
		}
		if f := strings.Fields(left); len(f) >= 5 {
			return f[4]
		}
	}
	return ""
}

// newCgroup makes a source's cgroup directory, with pids.max when the pids
// controller is delegated there.
func newCgroup(name string, l Limits) (string, error) {
	root := cgroupRoot()
	if root == "" {
		return "", errors.New("sandbox: no usable cgroup v2 hierarchy")
	}
	dir := filepath.Join(root, cgroupName(name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("sandbox: cgroup: %w", err)
	}
	if l.Processes > 0 {
		_ = os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(l.Processes, 10)), 0)
	}
	if cpuShared() && l.CPUs > 0 {
		if err := writeCPUMax(dir, l); err != nil {
			_ = os.Remove(dir)
			return "", fmt.Errorf("sandbox: cgroup: cap its CPU at %g: %w", l.CPUs, err)
		}
	}
	return dir, nil
}

// removeCgroup kills what is left in dir (cgroup v2) and removes it, retrying while
// the killed processes exit.
func removeCgroup(dir string) {
	_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	for range 400 {
		if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cgroupOf returns the cgroup v2 path of pid relative to the mount ("" if unknown).
func cgroupOf(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}
